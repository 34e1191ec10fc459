"""Hypothesis properties of the spec language and its masks."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import (
    kinds,
    padded_rows,
    spec_like_text,
    spec_texts,
    spec_texts_with_depth,
    specs,
    specs_with_depth,
)

from nosink.layerspec import Block, Fork, Kind, LayerStep, Merge, Segment, SpecError, build_mask, parse_spec

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


@given(st.one_of(spec_like_text, spec_texts().map(lambda pair: pair[1])), st.integers(1, 40))
def test_resolving_any_parsed_text_raises_only_spec_error(text, depth):
    try:
        spec = parse_spec(text)
    except SpecError:
        return
    try:
        plan = spec.resolve(depth)
    except SpecError as err:
        assert err.problem in str(err)
        assert "layers" in err.problem or "depth" in err.problem  # resolving fails only on depth
        return
    assert plan.depth == depth and len(plan.stack) == depth
    assert plan.spec == spec


@given(spec_texts())
def test_printed_spellings_of_a_spec_parse_to_it(pair):
    spec, text = pair
    assert parse_spec(text) == spec
    assert str(parse_spec(text)) == str(spec)


def _expand(segments, fill: int) -> list[Kind]:
    return [seg.kind for seg in segments for _ in range(fill if seg.count is None else seg.count)]


@given(spec_texts_with_depth())
def test_resolved_plan_follows_the_spec(triple):
    # Expected layers, written from the spec language's rules, compared with the plan's steps by role.
    spec, text, depth = triple
    plan = parse_spec(text).resolve(depth)
    placed = [
        seg for it in spec.items if not (isinstance(it, Block) and it.op in ("EXTRA", "EXTEND")) for seg in _segs(it)
    ]
    fill = depth - sum(seg.count or 0 for seg in placed)
    stack: list[Kind] = []
    inter: list[tuple[int, Kind]] = []
    extras: list[list[tuple[int, Kind]]] = []
    extend: list[Kind] = []
    for it in spec.items:
        if isinstance(it, Segment):
            stack += _expand([it], fill)
        elif it.op == "INTER":
            kinds = _expand(it.segments, fill)
            inter += [(len(stack) + i, k) for i, k in enumerate(kinds)]
            stack += [Kind("F")] * len(kinds)  # INTER's forward copy runs in the main stack
        elif it.op == "EXTRA":
            extras.append(list(enumerate(_expand(it.segments, fill))))  # from layer 0, the embeddings' branch
        else:
            extend += _expand(it.segments, fill)
    steps = plan.layer_steps
    assert [(s.layer, s.kind) for s in steps if s.role == "stack"] == list(enumerate(stack))
    assert all(s.stream == "main" for s in steps if s.role in ("stack", "extend"))
    assert [(s.layer, s.kind) for s in steps if s.role == "inter"] == inter
    assert all(s.stream == "inter" for s in steps if s.role == "inter")
    extra_streams = sorted({s.stream for s in steps if s.role == "extra"})
    assert len(extra_streams) == len(extras)
    for name, expected in zip(extra_streams, extras, strict=True):
        assert [(s.layer, s.kind) for s in steps if s.stream == name] == expected
    # EXTEND: on the top layer's weights, after every other step on the main stream
    assert [(s.layer, s.kind) for s in steps if s.role == "extend"] == [(depth - 1, k) for k in extend]
    main = [s for s in plan.steps if isinstance(s, LayerStep) and s.stream == "main"]
    assert [s.role for s in main] == ["stack"] * depth + ["extend"] * len(extend)
    # EXTRA branches fork from the embeddings (before any layer) and merge after the last layer
    forks = [i for i, s in enumerate(plan.steps) if isinstance(s, Fork) and s.target.startswith("extra")]
    merges = [i for i, s in enumerate(plan.steps) if isinstance(s, Merge) and s.source.startswith("extra")]
    first_main = min((i for i, s in enumerate(plan.steps) if s in main), default=len(plan.steps))
    last_layer = max(i for i, s in enumerate(plan.steps) if isinstance(s, LayerStep))
    assert all(i < first_main for i in forks) and all(i > last_layer for i in merges)
    assert len(forks) == len(merges) == len(extras)


def _segs(item):
    return item.segments if isinstance(item, Block) else (item,)


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
