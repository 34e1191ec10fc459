"""The fast attention path equals the dense-mask reference, route by route and through the encoder.

Every comparison is fast against dense (``build_mask`` + SDPA, or ``fast_attention=False``), in
float32 on CPU, to 1e-5, over every position (padding positions included) on the padded layout; a
packed batch (``pack_padding``, tests/test_packing.py) holds zeros at padding positions instead.
"""

import functools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import specs_with_depth
from tiny import CONFIGS, tiny_decoder

import nosink.models.attention as attention
from nosink import EncoderFromDecoder
from nosink.layerspec import Kind, build_mask
from nosink.models.attention import Layout, Route, attend, fast_route
from nosink.models.families import FAST_ATTENTION

TOL = 1e-5
FAMILIES = sorted(CONFIGS)
KINDS = [Kind("F"), Kind("B"), Kind("R"), Kind("F", 0), Kind("B", 0), Kind("F", 2), Kind("B", 2), Kind("B", 5)]


def padding(lengths: list[int], seq: int, side: str) -> torch.Tensor:
    """A (B, seq) attention mask with the given real lengths, padded on ``side`` (or split around the text)."""
    mask = torch.zeros(len(lengths), seq, dtype=torch.long)
    for row, n in enumerate(lengths):
        if side == "right":
            mask[row, :n] = 1
        elif side == "left":
            mask[row, seq - n :] = 1
        else:  # "both": padding before and after the real tokens
            start = (seq - n) // 2
            mask[row, start : start + n] = 1
    return mask


def reference(q, k, v, kind, mask, scale=None):
    """SDPA with the dense boolean mask, key heads repeated: the path the fast one replaces."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=build_mask(kind, mask), scale=scale)
    return out.transpose(1, 2)


def qkv(batch, seq, heads=4, kv_heads=2, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, seq, dim, generator=g)
    k = torch.randn(batch, kv_heads, seq, dim, generator=g)
    v = torch.randn(batch, kv_heads, seq, dim, generator=g)
    return q, k, v


@pytest.mark.parametrize("kind", KINDS, ids=str)
@pytest.mark.parametrize("side", ["right", "left", "both"])
@pytest.mark.parametrize("lengths", [[9, 9, 9], [9, 4, 1], [7, 9, 2]], ids=["unpadded", "padded", "padded2"])
def test_every_route_equals_the_dense_mask(kind, side, lengths):
    q, k, v = qkv(3, 9)
    mask = padding(lengths, 9, side)
    fast = attend(q, k, v, Route(kind, Layout(mask)), scale=0.3)
    torch.testing.assert_close(fast, reference(q, k, v, kind, mask, scale=0.3), atol=TOL, rtol=0)


@pytest.mark.parametrize("direction", ["F", "B"])
@pytest.mark.parametrize("seq", [2, 5, 12])
def test_sink_masks_as_deep_as_the_sequence(direction, seq):
    # M<n> with n >= T - 2: for B it is the reverse-causal mask, for F each token keeps only itself.
    q, k, v = qkv(2, seq, seed=seq)
    for n in (seq - 2, seq - 1, seq, seq + 3):
        kind = Kind(direction, max(n, 0))
        for mask in (padding([seq, seq], seq, "right"), padding([seq, max(seq - 1, 1)], seq, "left")):
            fast = attend(q, k, v, Route(kind, Layout(mask)))
            torch.testing.assert_close(fast, reference(q, k, v, kind, mask), atol=TOL, rtol=0)


@settings(deadline=None, max_examples=60)
@given(
    kind=st.one_of(st.sampled_from(KINDS[:3]), st.builds(Kind, st.sampled_from("FB"), st.integers(0, 20))),
    lengths=st.lists(st.integers(0, 24), min_size=1, max_size=4),
    extra=st.integers(0, 5),
    side=st.sampled_from(["right", "left", "both"]),
    heads=st.sampled_from([(2, 2), (4, 2), (6, 1)]),
)  # fmt: skip
def test_routes_on_generated_kinds_and_lengths(kind, lengths, extra, side, heads):
    seq = max(max(lengths), 1) + extra
    q, k, v = qkv(len(lengths), seq, heads=heads[0], kv_heads=heads[1])
    mask = padding(lengths, seq, side)
    fast = attend(q, k, v, Route(kind, Layout(mask)))
    torch.testing.assert_close(fast, reference(q, k, v, kind, mask), atol=TOL, rtol=0)


def test_a_sliding_window_shorter_than_the_batch_takes_the_dense_mask():
    layout = Layout(padding([6, 3], 8, "right"))
    assert fast_route(Kind("F"), 4, layout) is None
    assert fast_route(Kind("F"), 6, layout) is not None  # the window cannot cut a row of 6 tokens
    assert fast_route(Kind("B"), None, layout) is not None


def test_gqa_heads_must_divide():
    q, k, v = qkv(1, 4, heads=3, kv_heads=2)
    with pytest.raises(ValueError, match="not a multiple"):
        attend(q, k, v, Route(Kind("B"), Layout(torch.ones(1, 4))))


# ---------------------------------------------------------------- through the encoder


def assert_same(fast, dense, mask, packed: bool, msg: str = "") -> None:
    """Equal at real tokens; at padding too on the padded layout, while a packed batch holds zeros there."""
    keep = mask.bool()
    torch.testing.assert_close(fast[keep], dense[keep], atol=TOL, rtol=0, msg=msg)
    if packed:
        assert not fast[~keep].any(), msg
    else:
        torch.testing.assert_close(fast, dense, atol=TOL, rtol=0, msg=msg)


def count_routes(monkeypatch) -> list[str]:
    seen: list[str] = []
    original = attention.attend

    def counting(query, key, value, route, scale=None):
        seen.append(str(route.kind))
        return original(query, key, value, route, scale)

    monkeypatch.setattr(attention, "attend", counting)
    return seen


def batch(side: str, seq: int = 11, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 96, (3, seq), generator=g)
    lengths = {"none": [seq] * 3, "right": [seq, 6, 2], "left": [3, seq, 7], "both": [5, 9, seq]}[side]
    return ids, padding(lengths, seq, "both" if side == "both" else ("left" if side == "left" else "right"))


SPECS = ["F*", "B*", "R*", "M0F*", "M0B*", "M2F*", "M2B*", "M9F*", "M9B*", "M20B*", "F | B | R | M1B", "F* | M0B*2"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("side", ["none", "right", "left", "both"])
@pytest.mark.parametrize("pack", [False, True], ids=["padded", "packed"])
def test_encoder_fast_equals_dense_for_every_kind_and_family(family, side, pack, monkeypatch):
    model = tiny_decoder(family)
    ids, mask = batch(side)
    seen = count_routes(monkeypatch)
    for spec in SPECS:
        dense = EncoderFromDecoder(model, spec, fast_attention=False)(ids, mask).last_hidden_state
        encoder = EncoderFromDecoder(model, spec, fast_attention=True, pack_padding=pack)
        fast = encoder(ids, mask).last_hidden_state
        packed = encoder._prepare(ids, mask, plans=[encoder.plan]).packed is not None
        longest = int(mask.sum(-1).max())
        cut = any(step.window is not None and step.window < longest for step in encoder.plan.layer_steps)
        assert packed == (pack and side != "none" and not cut), (family, spec, side)
        assert_same(fast, dense, mask, packed, msg=f"{family} {spec} {side}")
    # Every converted layer took a fast route; stock forward layers did unless a window cuts the batch.
    expected = []
    for spec in SPECS:
        encoder = EncoderFromDecoder(model, spec)
        for step in encoder.plan.layer_steps:
            window = encoder.parts.windows[step.layer]
            if not (step.kind.is_causal and window is not None and window < int(mask.sum(-1).max())):
                expected.append(str(step.kind))
    assert sorted(seen) == sorted(expected)
    assert seen.count("M0B") == 4 + 2


@pytest.mark.parametrize("spec", ["F* | INTER(R*2)", "F* | EXTRA(M0B*2)", "F* | EXTEND(B*2)", "INTER(M1F*2) | B*"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_combinators_fast_equals_dense(spec, side):
    model = tiny_decoder("qwen2")
    ids, mask = batch(side, seed=1)
    dense = EncoderFromDecoder(model, spec, fast_attention=False)(ids, mask).last_hidden_state
    fast = EncoderFromDecoder(model, spec, fast_attention=True, pack_padding=False)(ids, mask).last_hidden_state
    torch.testing.assert_close(fast, dense, atol=TOL, rtol=0)


@pytest.mark.parametrize("family", ["mistral", "gemma3_text"])
def test_sliding_window_layers_fast_equals_dense(family):
    # Window 3: on 11 tokens the forward layers keep the dense mask; on 3 tokens the window cuts nothing.
    model = tiny_decoder(family)
    for seq in (11, 3):
        ids, mask = batch("right", seq=seq)
        mask[1, 2:] = 0
        for spec in ("F*", "F*2 | M0B*2", "F*3 | R"):
            dense = EncoderFromDecoder(model, spec, fast_attention=False)(ids, mask).last_hidden_state
            encoder = EncoderFromDecoder(model, spec, fast_attention=True)
            fast = encoder(ids, mask).last_hidden_state
            # On 3 tokens no window cuts, so the batch runs packed; on 11 the windowed layers keep it padded.
            assert (encoder._prepare(ids, mask, plans=[encoder.plan]).packed is not None) == (seq == 3)
            assert_same(fast, dense, mask, packed=seq == 3)


@settings(deadline=None, max_examples=20)
@given(
    case=specs_with_depth().filter(lambda c: c[1] <= 6),
    family=st.sampled_from(["llama", "qwen3", "gpt2", "phi3"]),
    lengths=st.lists(st.integers(1, 14), min_size=1, max_size=3),
    side=st.sampled_from(["right", "left", "both"]),
)
def test_generated_specs_and_lengths_fast_equals_dense(case, family, lengths, side):
    spec, depth = case
    model = decoder_of_depth(family, depth)
    seq = max(lengths)
    ids = torch.randint(3, 96, (len(lengths), seq), generator=torch.Generator().manual_seed(seq))
    mask = padding(lengths, seq, side)
    dense = EncoderFromDecoder(model, spec, fast_attention=False)(ids, mask).last_hidden_state
    fast = EncoderFromDecoder(model, spec, fast_attention=True, pack_padding=False)(ids, mask).last_hidden_state
    torch.testing.assert_close(fast, dense, atol=TOL, rtol=0, msg=str(spec))


@functools.cache
def decoder_of_depth(family: str, depth: int):
    import transformers as tf

    fields = CONFIGS[family]().to_dict() | {"num_hidden_layers": depth}
    fields.pop("layer_types", None)  # derived from the depth again
    config = type(CONFIGS[family]())(**fields)
    torch.manual_seed(0)
    model = tf.AutoModel.from_config(config, attn_implementation="sdpa")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def test_forward_specs_fast_equals_dense():
    model = tiny_decoder("llama")
    ids, mask = batch("left", seed=2)
    specs = ["F*", "F* | M0B*2", "F* | R*2", "F* | B | M0B"]
    dense = EncoderFromDecoder(model, "F*", fast_attention=False).forward_specs(ids, mask, specs)
    for pack in (False, True):
        fast = EncoderFromDecoder(model, "F*", fast_attention=True, pack_padding=pack).forward_specs(ids, mask, specs)
        for name in dense:
            assert_same(fast[name], dense[name], mask, packed=pack)


# ---------------------------------------------------------------- when the fast path is off


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda m: EncoderFromDecoder(m, "F* | M0B*2", fast_attention=False), 0),
        (lambda m: EncoderFromDecoder(m, "F* | M0B*2"), 0),  # the default is off on CPU
        (lambda m: EncoderFromDecoder(m, "F* | M0B*2", fast_attention=True), 4),
        (lambda m: EncoderFromDecoder(m, "F* | M0B*2", fast_attention=True).train(), 0),  # dropout needs masks
    ],
    ids=["off", "cpu-default", "on", "training"],
)
def test_when_the_fast_path_runs(make, expected, monkeypatch):
    seen = count_routes(monkeypatch)
    make(tiny_decoder("llama"))(*batch("right"))
    assert len(seen) == expected


def test_eager_models_and_attention_weights_keep_the_dense_mask(monkeypatch):
    seen = count_routes(monkeypatch)
    eager = EncoderFromDecoder(tiny_decoder("llama", attn="eager"), "F* | M0B*2", fast_attention=True)
    eager(*batch("right"))
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F* | M0B*2", fast_attention=True)
    weights = encoder.attention_weights(*batch("right"))
    assert seen == []
    assert len(weights) == 4


def test_the_decoder_keeps_its_attention_implementation():
    import transformers as tf

    model = tiny_decoder("llama")
    encoder = EncoderFromDecoder(model, "F* | R*2", fast_attention=True)
    encoder(*batch("left"))
    assert model.config._attn_implementation == "sdpa"
    assert FAST_ATTENTION in tf.AttentionInterface()
    ids, mask = batch("right")
    stock = model(input_ids=ids[:1], attention_mask=mask[:1]).last_hidden_state  # the stock forward still runs
    assert torch.isfinite(stock).all()


def test_a_layer_needs_a_mask_or_a_route():
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F*")
    hidden = torch.zeros(1, 3, 32)
    with pytest.raises(ValueError, match="explicit mask or a fast-attention route"):
        encoder.parts.call_layer(0, hidden, None, None, torch.zeros(1, 3, dtype=torch.long))


def test_the_shared_config_never_changes_during_a_fast_call():
    # Another thread running the stock model (or the dense path) reads the shared config at every layer:
    # the fast path must run on a private view, never by switching the config for the call.
    model = tiny_decoder("llama")
    encoder = EncoderFromDecoder(model, "F* | R*2", fast_attention=True)
    seen = []
    hooks = [
        layer.register_forward_pre_hook(lambda mod, args: seen.append(model.config._attn_implementation))
        for layer in model.layers
    ]
    try:
        ids, mask = batch("left")
        fast = encoder(ids, mask).last_hidden_state
    finally:
        for h in hooks:
            h.remove()
    assert seen == [] or set(seen) == {"sdpa"}  # the views are copies: hooks on the shared layers may not fire
    assert model.config._attn_implementation == "sdpa"
    encoder.fast_attention = False
    keep = mask.bool()
    assert torch.allclose(fast[keep], encoder(ids, mask).last_hidden_state[keep], atol=TOL)


def test_the_fast_path_and_the_stock_model_interleave_across_threads():
    import threading

    model = tiny_decoder("llama")
    encoder = EncoderFromDecoder(model, "F* | M0B*2", fast_attention=True)
    ids, mask = batch("right")
    want_fast = encoder(ids, mask).last_hidden_state
    want_stock = model(input_ids=ids, attention_mask=mask).last_hidden_state
    errors = []

    def run(fn, want):
        for _ in range(30):
            got = fn()
            if not torch.allclose(got, want, atol=TOL):
                errors.append(float((got - want).abs().max()))

    threads = [
        threading.Thread(target=run, args=(lambda: encoder(ids, mask).last_hidden_state, want_fast)),
        threading.Thread(
            target=run, args=(lambda: model(input_ids=ids, attention_mask=mask).last_hidden_state, want_stock)
        ),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
