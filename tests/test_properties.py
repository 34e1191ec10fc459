"""Hypothesis properties of the spec language and its masks."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import kinds, padded_rows, spec_like_text, specs, specs_with_depth

from nosink.layerspec import Kind, SpecError, build_mask, parse_spec

settings.register_profile("nosink", max_examples=200, deadline=None)
settings.load_profile("nosink")


@given(specs())
def test_printed_spec_parses_back_equal(spec):
    assert parse_spec(str(spec)) == spec
    assert eval(repr(spec), {"Spec": type(spec), **_names()}) == spec


def _names():
    from nosink.layerspec import Block, Kind, Segment

    return {"Block": Block, "Kind": Kind, "Segment": Segment}


@given(st.one_of(st.text(max_size=40), spec_like_text))
def test_any_text_parses_or_raises_spec_error(text):
    try:
        spec = parse_spec(text)
    except SpecError as err:
        message = str(err)  # the message itself must render
        assert err.problem in message
        assert all(ch.isprintable() for line in message.splitlines() for ch in line), message  # no raw escapes
        if err.column is not None:
            assert 1 <= err.column <= len(text) + 1
        return
    assert parse_spec(str(spec)) == spec


@given(spec_like_text, st.integers(1, 40))
def test_resolving_any_parsed_text_raises_only_spec_error(text, depth):
    try:
        parse_spec(text).resolve(depth)
    except SpecError:
        pass


@given(specs_with_depth())
def test_resolved_plan_has_exactly_the_model_depth(spec_depth):
    spec, depth = spec_depth
    plan = spec.resolve(depth)
    stack = [s for s in plan.layer_steps if s.role == "stack"]
    assert [s.layer for s in stack] == list(range(depth))
    assert len(plan.stack) == depth
    assert all(s.layer == depth - 1 for s in plan.layer_steps if s.role == "extend")
    assert all(0 <= s.layer < depth for s in plan.layer_steps)
    # every stream that is forked is merged back exactly once
    forks = [s.target for s in plan.steps if type(s).__name__ == "Fork"]
    merges = [s.source for s in plan.steps if type(s).__name__ == "Merge"]
    assert sorted(forks) == sorted(merges)


def _row_mask(kind: Kind, length: int, total: int, side: str) -> torch.Tensor:
    pad = total - length
    row = [1] * length + [0] * pad if side == "right" else [0] * pad + [1] * length
    return build_mask(kind, torch.tensor([row], dtype=torch.long))[0, 0]


def _batch(lengths: list[int], total: int, side: str) -> torch.Tensor:
    rows = [[1] * n + [0] * (total - n) if side == "right" else [0] * (total - n) + [1] * n for n in lengths]
    return torch.tensor(rows, dtype=torch.long).reshape(len(lengths), total)


def _real_block(mask: torch.Tensor, length: int, total: int, side: str) -> torch.Tensor:
    start = 0 if side == "right" else total - length
    return mask[start : start + length, start : start + length]


@given(kinds, padded_rows())
def test_mask_of_a_row_ignores_padding_side_and_batch_companions(kind, rows):
    lengths, total, side = rows
    other = "left" if side == "right" else "right"
    batch = _batch(lengths, total, side)
    masks = build_mask(kind, batch)[:, 0]
    for i, n in enumerate(lengths):
        alone = _row_mask(kind, n, n, side)  # no padding at all
        assert torch.equal(_real_block(masks[i], n, total, side), alone)
        assert torch.equal(_real_block(_row_mask(kind, n, total, other), n, total, other), alone)
        # a real query never attends a padding key; a padding query attends only itself
        real = batch[i].bool()
        assert not masks[i][real][:, ~real].any()
        pad_rows = masks[i][~real]
        assert torch.equal(pad_rows, torch.eye(total, dtype=torch.bool)[~real])


@given(kinds, padded_rows())
def test_every_row_attends_at_least_one_key(kind, rows):
    lengths, total, side = rows
    batch = _batch(lengths, total, side)
    assert build_mask(kind, batch).any(-1).all()


@given(st.sampled_from(["F", "B"]), st.integers(0, 10), st.integers(1, 12))
def test_sink_masks_nest(direction, n, length):
    ones = torch.ones(1, length, dtype=torch.long)
    wider = build_mask(Kind(direction, sink=n), ones)
    narrower = build_mask(Kind(direction, sink=n + 1), ones)
    plain = build_mask(Kind(direction), ones)
    assert not (narrower & ~wider).any()  # M<n+1> attends a subset of what M<n> attends
    assert not (wider & ~plain).any()  # and M<n> a subset of the plain kind


@given(specs_with_depth(), st.data())
def test_forward_steps_keep_the_decoders_window_and_converted_steps_none(spec_depth, data):
    spec, depth = spec_depth
    windows = tuple(data.draw(st.lists(st.none() | st.integers(1, 8), min_size=depth, max_size=depth)))
    plan = spec.resolve(depth, windows=windows)
    for step in plan.layer_steps:
        assert step.window == (windows[step.layer] if step.kind.is_causal else None), step
    # Windows change nothing else: the same steps as without them, less the window.
    assert [(s.layer, s.kind, s.stream, s.role) for s in plan.layer_steps] == [
        (s.layer, s.kind, s.stream, s.role) for s in spec.resolve(depth).layer_steps
    ]
