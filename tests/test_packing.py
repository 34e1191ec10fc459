"""Packed batches (``pack_padding``): the layers run on the real tokens only, with the dense path's results.

A padded batch on the fast path can drop its padding before the first layer and run every layer on one
stream of the real tokens (``models.attention.Packed``); attention runs per sequence (on CPU an exact
per-sequence SDPA loop). Every comparison is against the dense-mask reference (``fast_attention=False``),
in float32 on CPU, at the real tokens, to 1e-5 times the largest state (at least 1e-5: the residual stream
of some families grows to ~10 over a few layers, and float32 matrix products of a (1, N) and a (B, T)
batch round differently; in float64 the two paths agree exactly). Padding positions of a packed batch
hold zeros.
"""

import functools
import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import specs_with_depth
from test_fast_attention import KINDS, TOL, padding, qkv, reference
from tiny import CONFIGS, tiny_decoder, tiny_tokenizer

import nosink.models.varlen as varlen
from nosink import EncoderFromDecoder
from nosink.layerspec import Kind
from nosink.models.attention import Packed, Route, attend, fast_route
from nosink.models.batch import PACK_MIN_PADDING


def packed_attend(q, k, v, kind, mask, scale=None):
    """The packed route on the real tokens of (B, H, T, D) inputs, and the reference at the same tokens."""
    packed = Packed(mask)

    def pack(x):  # (B, H, T, D) -> (1, H, N, D)
        return packed.pack(x.transpose(1, 2)).transpose(1, 2)

    fast = attend(pack(q), pack(k), pack(v), Route(kind, packed), scale)  # (1, N, H, D)
    return fast[0], packed.pack(reference(q, k, v, kind, mask, scale))[0]


@pytest.mark.parametrize("kind", [*KINDS, Kind("B", 9), Kind("F", 9), Kind("B", 30)], ids=str)
@pytest.mark.parametrize("side", ["right", "left", "both"])
@pytest.mark.parametrize("lengths", [[9, 9, 9], [9, 4, 1], [7, 9, 2], [0, 5, 9]], ids=["full", "a", "b", "empty-row"])
def test_every_packed_route_equals_the_dense_mask(kind, side, lengths):
    q, k, v = qkv(3, 9)
    fast, want = packed_attend(q, k, v, kind, padding(lengths, 9, side), scale=0.3)
    torch.testing.assert_close(fast, want, atol=TOL, rtol=0)


@settings(deadline=None, max_examples=80)
@given(
    kind=st.one_of(st.sampled_from(KINDS[:3]), st.builds(Kind, st.sampled_from("FB"), st.integers(0, 30))),
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=5),
    extra=st.integers(0, 5),
    side=st.sampled_from(["right", "left", "both"]),
    heads=st.sampled_from([(2, 2), (4, 2), (6, 1)]),
)  # fmt: skip
def test_packed_routes_on_generated_kinds_and_lengths(kind, lengths, extra, side, heads):
    # Lengths up to 40 with M<n> up to 30: heads longer than some rows, and rows shorter than the head.
    seq = max(max(lengths), 1) + extra
    q, k, v = qkv(len(lengths), seq, heads=heads[0], kv_heads=heads[1], seed=seq)
    fast, want = packed_attend(q, k, v, kind, padding(lengths, seq, side))
    torch.testing.assert_close(fast, want, atol=TOL, rtol=0)


def test_a_window_that_cuts_a_packed_batch_is_an_error():
    packed = Packed(padding([6, 3], 8, "right"))
    assert fast_route(Kind("F"), 6, packed) is not None
    with pytest.raises(ValueError, match="cannot run packed"):
        fast_route(Kind("F"), 4, packed)


def test_pack_and_unpack():
    mask = padding([3, 0, 5], 6, "left")
    packed = Packed(mask)
    x = torch.arange(18.0).view(3, 6, 1)
    assert packed.total == 8 and packed.lengths == [3, 0, 5] and packed.max_length == 5
    assert packed.pack(x)[0, :, 0].tolist() == [3, 4, 5, 13, 14, 15, 16, 17]
    back = packed.unpack(packed.pack(x))
    assert torch.equal(back, torch.where(mask.bool()[..., None], x, 0))


# ---------------------------------------------------------------- through the encoder


def run_both(model, spec, ids, mask, **fast_kwargs):
    """(dense, packed) outputs with hidden states, and whether the fast encoder packed the batch."""
    dense = EncoderFromDecoder(model, spec, fast_attention=False)(ids, mask, output_hidden_states=True)
    encoder = EncoderFromDecoder(model, spec, fast_attention=True, pack_padding=True, **fast_kwargs)
    fast = encoder(ids, mask, output_hidden_states=True)
    packed = encoder._prepare(ids, mask, plans=[encoder.plan]).packed is not None
    return dense, fast, packed


def assert_close_scaled(got, want, msg=""):
    tol = TOL * max(1.0, float(want.detach().abs().max())) if want.numel() else TOL
    torch.testing.assert_close(got, want, atol=tol, rtol=0, msg=msg)


def assert_packed_equal(dense, fast, mask, msg=""):
    keep = mask.bool()
    states = zip(fast.hidden_states, dense.hidden_states, strict=True)
    pairs = [(fast.last_hidden_state, dense.last_hidden_state), *states]
    for got, want in pairs:
        assert_close_scaled(got[keep], want[keep], msg)
        assert not got[~keep].any(), f"padding positions of a packed batch hold zeros ({msg})"


@functools.cache
def decoder_of_depth(family: str, depth: int, window: int | None = None):
    import transformers as tf

    fields = CONFIGS[family]().to_dict() | {"num_hidden_layers": depth}
    fields.pop("layer_types", None)  # derived from the depth again
    if window is not None:
        fields["sliding_window"] = window
    config = type(CONFIGS[family]())(**fields)
    torch.manual_seed(depth)
    model = tf.AutoModel.from_config(config, attn_implementation="sdpa")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


@settings(deadline=None, max_examples=30)
@given(
    case=specs_with_depth().filter(lambda c: c[1] <= 6),
    family=st.sampled_from(["llama", "qwen3", "gpt2", "phi3", "olmo2", "gemma3_text"]),
    lengths=st.lists(st.integers(0, 14), min_size=1, max_size=4).filter(lambda x: max(x) > 0),
    side=st.sampled_from(["right", "left", "both"]),
)
def test_generated_specs_and_lengths_packed_equals_dense(case, family, lengths, side):
    # Generated specs include INTER/EXTRA blocks and EXTEND; Gemma3 gets a window no batch here reaches.
    spec, depth = case
    model = decoder_of_depth(family, depth, window=16 if family == "gemma3_text" else None)
    seq = max(lengths)
    ids = torch.randint(3, 96, (len(lengths), seq), generator=torch.Generator().manual_seed(seq))
    mask = padding(lengths, seq, side)
    dense, fast, packed = run_both(model, spec, ids, mask)
    assert packed == (min(lengths) < seq)
    assert_packed_equal(dense, fast, mask, msg=str(spec))


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3_text", "gpt2"])
@pytest.mark.parametrize(
    "spec", ["F* | INTER(R*2)", "F* | EXTRA(M0B*2)", "F* | EXTEND(B*2)", "INTER(M1F*2) | B*", "F | EXTRA(M2B) | R*"]
)
@pytest.mark.parametrize("side", ["right", "left"])
def test_inter_extra_extend_streams_packed_equal_dense(family, spec, side):
    model = decoder_of_depth(family, 4, window=16 if family in ("qwen2", "gemma3_text") else None)
    ids = torch.randint(3, 96, (3, 12), generator=torch.Generator().manual_seed(3))
    mask = padding([12, 5, 8], 12, side)
    dense, fast, packed = run_both(model, spec, ids, mask)
    assert packed
    assert_packed_equal(dense, fast, mask, msg=spec)


@pytest.mark.parametrize("family", ["mistral", "gemma3_text", "qwen2"])
@pytest.mark.parametrize("spec", ["F*", "F*2 | M0B*2", "F*3 | R", "B*"])
def test_sliding_windows_pack_only_where_no_window_cuts(family, spec):
    # Window 3 (tests/tiny.py): rows of at most 3 tokens pack; longer ones keep the padded layout (and the
    # dense mask on the windowed forward layers) unless every windowed layer was converted (B*).
    model = tiny_decoder(family)
    for lengths, seq in (([3, 1, 2], 3), ([11, 6, 2], 11)):
        ids = torch.randint(3, 96, (3, seq), generator=torch.Generator().manual_seed(seq))
        mask = padding(lengths, seq, "right")
        dense, fast, packed = run_both(model, spec, ids, mask)
        encoder = EncoderFromDecoder(model, spec)
        cut = any(s.window is not None and s.window < seq for s in encoder.plan.layer_steps)
        assert packed == (not cut)
        if packed:
            assert_packed_equal(dense, fast, mask, msg=spec)
        else:
            torch.testing.assert_close(fast.last_hidden_state, dense.last_hidden_state, atol=TOL, rtol=0)


def test_forward_specs_packed_equals_dense():
    model = tiny_decoder("qwen3")
    ids = torch.randint(3, 96, (4, 10), generator=torch.Generator().manual_seed(5))
    mask = padding([10, 3, 7, 1], 10, "left")
    specs = ["F*", "F* | M0B*2", "F* | R*2", "F* | INTER(B*2)"]
    dense = EncoderFromDecoder(model, "F*", fast_attention=False).forward_specs(ids, mask, specs)
    fast = EncoderFromDecoder(model, "F*", fast_attention=True, pack_padding=True).forward_specs(ids, mask, specs)
    keep = mask.bool()
    for name in specs:
        assert_close_scaled(fast[name][keep], dense[name][keep], name)
        assert not fast[name][~keep].any()


@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("family", ["llama", "qwen3", "gpt2"])
def test_encode_gives_the_dense_vectors(family, padding_side):
    texts = ["the cat sat on the mat", "a", "we like paris and london very much not", "", "dog ran", "i"] * 2
    model = tiny_decoder(family)
    tok = tiny_tokenizer()
    spec = "F* | M0B*2"
    dense = EncoderFromDecoder(model, spec, tok, fast_attention=False)
    fast = EncoderFromDecoder(model, spec, tok, fast_attention=True, pack_padding=True)
    for pooling in ("mean", "last", "weighted_mean"):
        kw = dict(pooling=pooling, batch_size=4, padding_side=padding_side)
        with pytest.warns(UserWarning, match="without tokens"):
            want = dense.encode(texts, **kw)
        with pytest.warns(UserWarning, match="without tokens"):
            got = fast.encode(texts, **kw)
        np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    with pytest.warns(UserWarning, match="without tokens"):
        want = dense.encode(texts, output_value="token_embeddings", padding_side=padding_side)
    with pytest.warns(UserWarning, match="without tokens"):
        got = fast.encode(texts, output_value="token_embeddings", padding_side=padding_side)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, atol=TOL, rtol=0)


# ---------------------------------------------------------------- when a batch packs


def packs(encoder, mask) -> bool:
    ids = torch.full(mask.shape, 5)
    return encoder._prepare(ids, mask, plans=[encoder.plan]).packed is not None


def test_when_a_batch_packs():
    model = tiny_decoder("llama")
    seq = 40
    few = padding([seq] * 9 + [seq - 10], seq, "right")  # 2.5% padding: below PACK_MIN_PADDING
    many = padding([seq, seq - 30], seq, "right")  # 37.5% padding
    assert 1 - few.float().mean() < PACK_MIN_PADDING <= 1 - many.float().mean()
    on = EncoderFromDecoder(model, "F* | M0B*2", fast_attention=True)
    assert not packs(on, few) and packs(on, many) and not packs(on, torch.ones(2, seq, dtype=torch.long))
    on.pack_padding = True
    assert packs(on, few) and not packs(on, torch.ones(2, seq, dtype=torch.long))
    on.pack_padding = False
    assert not packs(on, many)
    assert not packs(EncoderFromDecoder(model, "F* | M0B*2"), many)  # the CPU default leaves the fast path off
    assert not packs(EncoderFromDecoder(model, "F*", fast_attention=False, pack_padding=True), many)
    assert not packs(EncoderFromDecoder(model, "F*", fast_attention=True, pack_padding=True).train(), many)
    with pytest.raises(TypeError, match="pack_padding must be None, True or False"):
        EncoderFromDecoder(model, "F*", pack_padding="yes")


def test_the_varlen_kernel_call_takes_fewer_key_heads_or_repeats_them(monkeypatch):
    # CUDA-only code path, driven here by a stand-in kernel (exact per-segment SDPA) with torch 2.11's signature:
    # no enable_gqa, causal as window_size. One that refuses fewer key heads gets repeated heads from then on.

    calls = []

    def kernel(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1), refuse=False):
        calls.append(k.shape[1])
        if refuse and k.shape[1] != q.shape[1]:
            raise RuntimeError("number of heads in key/value must equal the query's")
        segments = varlen.Segments(cu_q, max_q, cu_q.tolist())
        return varlen.attend_segments(q, k, v, segments, tuple(window_size), scale)

    params = frozenset({"scale", "window_size"})
    q, k, v = (x[0].transpose(0, 1) for x in qkv(1, 12, heads=4, kv_heads=2))  # (N, h, d)
    packed = Packed(torch.ones(1, 12, dtype=torch.long))
    want = varlen.attend_segments(q, k, v, packed.rows(), (-1, 0), 0.5)
    for refuse, expected in ((False, [2]), (True, [2, 4])):
        monkeypatch.setattr(varlen, "NATIVE_GQA", [True])
        stand_in = functools.partial(kernel, refuse=refuse)
        monkeypatch.setattr(varlen, "function", lambda stand_in=stand_in: (stand_in, params))
        calls.clear()
        got = varlen.call(q, k, v, packed.rows(), (-1, 0), 0.5)
        torch.testing.assert_close(got, want, atol=TOL, rtol=0)
        assert calls == expected and varlen.NATIVE_GQA == ([] if refuse else [True])


@settings(deadline=None, max_examples=40)
@given(
    lengths=st.lists(st.integers(0, 12), min_size=1, max_size=5),
    extra=st.integers(0, 3),
    start=st.integers(0, 6),
    side=st.sampled_from(["right", "left"]),
)
def test_padded_layout_indices_need_no_nonzero(lengths, extra, start, side):
    # The padded layout's varlen indices (CUDA kernels only) and padding rows, built without a host sync,
    # equal the nonzero-based definitions.
    from nosink.models.attention import Layout

    seq = max(lengths) + extra
    if seq == 0:
        return
    mask = padding(lengths, seq, side)
    layout = Layout(mask)
    assert torch.equal(layout.padding_rows(), (mask == 0).flatten().nonzero().squeeze(-1))
    if start >= seq:
        return
    flat, cu, longest = layout.varlen(start)
    width = seq - start
    sizes = (torch.tensor(lengths) - start).clamp(min=0)
    inside = torch.arange(width)[None, :] < sizes[:, None]
    assert torch.equal(flat, inside.flatten().nonzero().squeeze(-1))
    assert cu.tolist() == [0, *sizes.cumsum(0).tolist()]
    assert longest == max(int(sizes.max()), 1)


# ---------------------------------------------------------------- the kernel's formulation, off the GPU


def windowed_kernel(
    q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1), enable_gqa=False, seqused_k=None
):
    """A stand-in for flash attention's variable-length kernel, written from its definition: query ``i`` of
    segment ``b`` of ``cu_q`` attends key ``j`` of segment ``b`` of ``cu_k`` when ``i + d - left <= j <= i + d + right``
    (-1: no bound; ``d`` = keys - queries of the segment: windows align bottom-right); no key: a zero output.
    With ``seqused_k``, segment ``b``'s keys are the ``seqused_k[b]`` tokens from ``cu_k[b]`` on."""
    assert cu_q.dtype == cu_k.dtype == torch.int32 and cu_q.shape == cu_k.shape
    qb, kb = cu_q.tolist(), cu_k.tolist()
    keys = list(itertools.pairwise(kb))
    if seqused_k is not None:
        assert seqused_k.dtype == torch.int32 and seqused_k.shape == (len(kb) - 1,)
        keys = [(c, c + n) for c, n in zip(kb, seqused_k.tolist(), strict=False)]
        assert all(e <= k.shape[0] for _, e in keys), "a segment's keys end inside the stream"
    assert max_q >= max(b - a for a, b in itertools.pairwise(qb)), "max_q bounds every query segment"
    assert max_k >= max(e - c for c, e in keys), "max_k bounds every key segment"
    left, right = window_size
    out = q.new_zeros(q.shape[0], q.shape[1], v.shape[-1])
    k, v = (x.repeat_interleave(q.shape[1] // x.shape[1], 1) for x in (k, v))
    for (a, b), (c, e) in zip(itertools.pairwise(qb), keys, strict=True):
        if b <= a or e <= c:
            continue
        i, j = torch.arange(b - a)[:, None] + (e - c) - (b - a), torch.arange(e - c)[None, :]
        allowed = ((j >= i - left) | (left < 0)) & ((j <= i + right) | (right < 0))
        res = F.scaled_dot_product_attention(
            q[a:b].transpose(0, 1), k[c:e].transpose(0, 1), v[c:e].transpose(0, 1), attn_mask=allowed, scale=scale
        )
        out[a:b] = res.transpose(0, 1)
    return out


@settings(deadline=None, max_examples=60)
@given(
    kind=st.one_of(st.sampled_from(KINDS[:3]), st.builds(Kind, st.sampled_from("FB"), st.integers(0, 12))),
    lengths=st.lists(st.integers(0, 14), min_size=1, max_size=5),
    side=st.sampled_from(["right", "left"]),
    slack=st.integers(0, 6),
    used_keys=st.booleans(),
)
def test_a_stream_from_device_bounds_runs_every_kind_on_the_kernel(kind, lengths, side, slack, used_keys):
    # What a CUDA graph runs: a Packed.stream built from the bounds and places alone (no host lengths), its
    # segmentations computed on the device, every kind through the variable-length kernel's windows (a
    # stand-in written from the kernel's definition), with max_length only an upper bound. Equals the dense mask.
    # M0B runs as one call whose segments share keys where the kernel takes seqused_k, else as two calls.
    on_stand_in(kind, lengths, side, slack, used_keys)


@pytest.mark.parametrize("used_keys", [True, False])
@pytest.mark.parametrize("lengths", [[3, 0, 5, 1], [1], [7, 7], [0, 2]])
def test_m0b_on_the_kernel_in_one_call_or_two(lengths, used_keys):
    on_stand_in(Kind("B", 0), lengths, "right", 2, used_keys)


def on_stand_in(kind, lengths, side, slack, used_keys):
    params = frozenset({"scale", "window_size", *(["seqused_k"] if used_keys else [])})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(varlen, "kernel_applies", lambda q: True)
        patch.setattr(varlen, "function", lambda: (windowed_kernel, params))
        patch.setattr(varlen, "_flash_takes_used_keys", lambda: False)
        patch.setattr(varlen, "NATIVE_GQA", [True])
        calls = []
        patch.setattr(varlen, "call", lambda *a, call=varlen.call, **kw: calls.append(kw) or call(*a, **kw))
        check_stream(kind, lengths, side, slack)
    if kind == Kind("B", 0) and sum(lengths):  # M0B: one call sharing keys, or the rest and then the first queries
        assert [sorted(kw) for kw in calls] == ([["used_keys"]] if used_keys else [[], ["queries"]])


def check_stream(kind, lengths, side, slack):
    seq = max(max(lengths), 1)
    q, k, v = qkv(len(lengths), seq, heads=4, kv_heads=2, seed=seq)
    mask = padding(lengths, seq, side)
    packed = Packed(mask)
    stream = Packed.stream(packed.cu, packed.positions, packed.max_length + slack)

    def pack(x):
        return packed.pack(x.transpose(1, 2)).transpose(1, 2)

    fast = attend(pack(q), pack(k), pack(v), Route(kind, stream), 0.3)[0]
    want = packed.pack(reference(q, k, v, kind, mask, 0.3))[0]
    torch.testing.assert_close(fast, want, atol=TOL, rtol=0)


@settings(deadline=None, max_examples=60)
@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=6), head=st.integers(0, 6), singles=st.booleans())
def test_segmentations_on_the_device_equal_the_hosts(lengths, head, singles):
    packed = Packed(padding(lengths, max(max(lengths), 1), "right"))
    split = packed.split(head, singles)
    assert split.cu.tolist() == split.bounds
    assert split.bounds[0] == 0 and split.bounds[-1] == sum(lengths)
    assert all(b >= a for a, b in itertools.pairwise(split.bounds))
    # Every row's places 0..head-1 and the rest lie in segments of their own, as the kind asks.
    at, want = 0, [0]
    for n in lengths:
        cuts = range(1, head + 1) if singles else ([head] if head else [])
        want += [at + min(c, n) for c in cuts] + [at + n]
        at += n
    assert split.bounds == want
