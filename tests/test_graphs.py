"""CUDA graphs of the layer loop (``models/graphs.py``): buckets on any machine, replays on CUDA.

The bucket arithmetic is checked everywhere. Captures and replays need CUDA and the variable-length flash
kernel (bfloat16): those tests skip elsewhere, and are run on a GPU machine (the benchmark README says how).
A replay is compared with the same encoder without graphs: the same kernels on the same rows, only with
filler rows beside them, so bfloat16 rounding of matrix products of another size is the only difference.
"""

import functools
import math
from typing import ClassVar

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny import CONFIGS, tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder
from nosink.models import batching
from nosink.models import texts as texts_mod
from nosink.models.attention import varlen_ready
from nosink.models.graphs import Bucket, LayerGraphs, _Graph, bucket_of, stream_places
from nosink.models.pooling import POOLINGS, pool, pool_stream, stream_weights
from nosink.models.templates import Template


@settings(deadline=None, max_examples=200)
@given(
    lengths=st.lists(st.integers(0, 700), min_size=1, max_size=300),
    window=st.none() | st.integers(1, 1024),
)
def test_every_batch_fits_its_bucket_with_little_filler(lengths, window):
    window = window if window is None or window >= max(lengths) else None  # a cutting window never packs
    bucket = bucket_of(lengths, window)
    total, longest = sum(lengths), max(lengths)
    assert bucket.tokens >= total and bucket.tokens <= max(total + 64, math.ceil(total * 1.125))
    assert bucket.longest >= max(longest, 1) and (window is None or bucket.longest <= max(window, 16))
    positions, cu = stream_places(lengths, bucket)  # raises if the rows do not fit
    assert cu.shape == (bucket.rows + 1,) and cu.dtype == np.int32 and cu[-1] == bucket.tokens
    assert cu[1 : len(lengths) + 1].tolist() == np.cumsum(lengths).tolist()  # the real rows first, in order
    sizes = np.diff(cu)
    assert (sizes >= 0).all() and (sizes <= bucket.longest).all()
    assert positions.shape == (bucket.tokens,)
    assert positions.tolist() == [p for n in sizes.tolist() for p in range(n)]


def test_buckets_are_few():
    # Sorted batches of 128 short texts, as encode() makes them, fall in few buckets (each one a capture).
    rng = np.random.default_rng(0)
    lengths = np.sort(rng.integers(8, 60, 8192))
    buckets = {bucket_of(lengths[i : i + 128].tolist()) for i in range(0, len(lengths), 128)}
    assert len(buckets) <= 32, buckets
    assert bucket_of([3, 5]) == Bucket(64, 8, 16)


def test_a_bucket_too_small_is_an_error():
    with pytest.raises(ValueError, match="do not fit"):
        stream_places([40, 40], Bucket(256, 2, 64))


def test_cuda_graphs_is_checked():
    with pytest.raises(TypeError, match="cuda_graphs must be True or False"):
        EncoderFromDecoder(tiny_decoder("llama"), "F*", cuda_graphs="yes")
    assert not EncoderFromDecoder(tiny_decoder("llama"), "F*")._graphs_apply(torch.device("cpu"), 10)


@settings(deadline=None, max_examples=150)
@given(
    rows=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 9), st.integers(0, 3)), min_size=1, max_size=12),
    pooling=st.sampled_from(POOLINGS),
    extra=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_a_stream_pooled_by_its_weights_equals_pooling_the_padded_batch(rows, pooling, extra, seed):
    # A pooled graph's arithmetic (stream_weights on the host, pool_stream in the graph) against pool() on the padded
    # batch, for rows of any prefix, text (none too) and suffix, with filler tokens and spare row slots beside them.
    prefix, text, _ = zip(*rows, strict=True)
    lengths = [sum(r) for r in rows]
    width = max(1, max(lengths))
    hidden = torch.randn(len(rows), width, 8, generator=torch.Generator().manual_seed(seed))
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, (a, b, _) in enumerate(rows):
        mask[i, a : a + b] = True
    row, weight = stream_weights(prefix, text, lengths, pooling)
    assert len(row) == len(weight) == sum(lengths) and weight.dtype == np.float32
    stream = torch.cat([hidden[i, :n] for i, n in enumerate(lengths)] + [torch.randn(extra, 8)])  # filler after
    row = torch.from_numpy(np.concatenate([row, np.full(extra, -1)]))
    weight = torch.from_numpy(np.concatenate([weight, np.zeros(extra, dtype=np.float32)]))
    got = pool_stream(stream, row, weight, len(rows) + 2)
    torch.testing.assert_close(got[: len(rows)], pool(hidden, mask, pooling), atol=1e-5, rtol=1e-5)
    assert not got[len(rows) :].any()
    assert not got[[i for i, n in enumerate(text) if n == 0]].any(), "a row without text pools to zeros"


def test_stream_weights_refuse_rows_that_do_not_add_up():
    with pytest.raises(ValueError, match="unknown pooling"):
        stream_weights([0], [1], [1], "max")
    with pytest.raises(ValueError, match="must fit within its length"):
        stream_weights([1], [2], [2])


def test_a_graphs_extra_inputs_are_filled_per_token_with_the_fillers_value():
    bucket = bucket_of([3, 2])
    graph = _Graph(
        bucket, torch.device("cpu"), {"row": (np.zeros(0, np.int64), -1), "weight": (np.zeros(0, np.float32), 0)}
    )
    extras = {"row": (np.array([0, 0, 0, 1, 1]), -1), "weight": (np.arange(5, dtype=np.float32), 0.0)}
    graph.fill([3, 2], torch.arange(5)[None] + 3, extras)
    assert graph.extras["row"].dtype == torch.int64 and graph.extras["weight"].dtype == torch.float32
    assert graph.extras["row"].tolist() == [0, 0, 0, 1, 1] + [-1] * (bucket.tokens - 5)
    assert graph.extras["weight"].tolist() == [0, 1, 2, 3, 4] + [0] * (bucket.tokens - 5)
    assert graph.ids[0, :6].tolist() == [3, 4, 5, 6, 7, 0]


def test_a_stream_of_fp16_or_bf16_states_pools_as_the_padded_batch_and_ignores_what_counts_nowhere():
    # Long texts (an fp16 total of their weights would overflow), states in the model's dtype, and one row whose sink
    # token's state is infinite: it counts nowhere, so no vector sees it.
    lengths, prefix, text = [400, 30, 512], [1, 3, 1], [399, 20, 500]
    for dtype, ulp in ((torch.float16, 2**-10), (torch.bfloat16, 2**-7)):
        hidden = torch.randn(3, 512, 16, generator=torch.Generator().manual_seed(0)).to(dtype)
        hidden[1, 0] = float("inf")
        mask = torch.zeros(3, 512, dtype=torch.bool)
        for i, (a, b) in enumerate(zip(prefix, text, strict=True)):
            mask[i, a : a + b] = True
        stream = torch.cat([hidden[i, :n] for i, n in enumerate(lengths)])
        for pooling in POOLINGS:
            row, weight = stream_weights(prefix, text, lengths, pooling)
            got = pool_stream(stream, torch.from_numpy(row), torch.from_numpy(weight), 4).float()
            want = pool(hidden, mask, pooling).float()
            assert torch.isfinite(got).all() and torch.isfinite(want).all()
            torch.testing.assert_close(got[:3], want, atol=ulp / 4, rtol=ulp)


def test_a_batchs_stream_on_the_host_is_the_padded_batchs_real_tokens():
    # Prompts, templates whose tokens follow the text (suffix), empty texts: the packed ids, lengths and text spans
    # the pooled graphs take are what pad() lays out, row after row.
    tok = tiny_tokenizer()
    texts = ["the cat sat", "", "a dog ran in the park today", "paris"]
    for tokens in (
        texts_mod.tokenize(tok, texts, "find this:", sink=[1]),
        texts_mod.tokenize(tok, texts, sink=[1], template="this text: {text} means in one word:"),
        texts_mod.tokenize(tok, texts, sink=[1], template="say {text} then {text} again", copy=2),
    ):
        for rows in ([0, 1, 2, 3], [2, 0], np.array([3, 1])):
            packed = batching.stream(tokens, rows)
            padded = batching.pad(tokens, rows, 0)
            real = padded.attention_mask.bool()
            assert packed.ids.tolist() == padded.input_ids[real].tolist()
            assert packed.lengths == real.sum(-1).tolist()
            starts = [int(m.nonzero()[0]) if m.any() else 0 for m in padded.text_mask]
            assert packed.text == padded.text_mask.sum(-1).tolist()
            assert [p for p, t in zip(packed.prefix, packed.text, strict=True) if t] == [
                s for s, t in zip(starts, packed.text, strict=True) if t
            ]


class _Unrolled:
    """LayerGraphs standing in for CUDA: each batch fills a graph's inputs and runs the captured function as it is
    (what a replay computes, without capturing)."""

    made: ClassVar[list] = []

    def __init__(self, device):
        self.device, self.keys, self.replays, self.refused, self.forgotten = device, [], 0, {}, 0
        _Unrolled.made.append(self)

    def run(self, key, lengths, ids, body, take, window=None, extras=None, isolated=False):
        self.keys.append(key)
        graph = _Graph(bucket_of(lengths, window), self.device, extras)
        graph.fill(lengths, ids, extras)
        return take(body(graph.ids, graph.positions, graph.stream(), graph.extras))

    def forget(self, which):
        self.forgotten += 1


@pytest.fixture
def unrolled(monkeypatch):
    """Graphs unrolled on the CPU (see _Unrolled), the variable-length kernel a stand-in written from its
    definition (tests/test_packing.py)."""
    from test_packing import windowed_kernel

    import nosink.models.replaying as module
    from nosink.models import varlen

    monkeypatch.setattr(module, "LayerGraphs", _Unrolled)
    monkeypatch.setattr(varlen, "kernel_applies", lambda q: True)
    monkeypatch.setattr(varlen, "function", lambda: (windowed_kernel, frozenset({"scale", "window_size"})))
    monkeypatch.setattr(varlen, "_flash_takes_used_keys", lambda: False)
    monkeypatch.setattr(varlen, "NATIVE_GQA", [True])
    _Unrolled.made = []
    return _Unrolled


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize(("spec", "prepend"), [("F* | M0B*2", None), ("F* | B*2", 2)])
def test_encode_through_a_pooled_graphs_function_equals_the_dense_path(unrolled, monkeypatch, pooling, spec, prepend):
    # The whole pooled path off CUDA: the host's stream and weights, the graph's inputs, the captured function (loop,
    # then pool_stream) and what is taken from it, against an encoder on the dense masks; templates with text after
    # it, prompts, empty texts, left padding asked for (a stream has none).
    kwargs = {} if prepend is None else {"prepend": prepend}
    model = tiny_decoder("llama")
    graphs = EncoderFromDecoder.from_model(model, spec, tiny_tokenizer(), fast_attention=True, compile=False, **kwargs)
    monkeypatch.setattr(graphs, "_graphs_apply", lambda device, longest: True)
    dense = EncoderFromDecoder.from_model(model, spec, tiny_tokenizer(), fast_attention=False, **kwargs)
    texts = ["the cat sat on the mat", "", "a dog", "paris is the capital of france and more"]
    template = Template("this: {text} in one word:", target="text")  # pooled over the text, tokens after it
    for options in ({}, {"instruction": "find:"}, {"template": template}, {"padding_side": "left"}):
        got = graphs.encode(texts, pooling=pooling, batch_size=3, show_progress_bar=False, **options)
        want = dense.encode(texts, pooling=pooling, batch_size=3, show_progress_bar=False, **options)
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)
        assert not got[1].any(), "a text with no tokens pools to zeros"
    assert [key[1:] for key in unrolled.made[0].keys] == [("pooled",)] * 8


@pytest.mark.parametrize("spec", ["F* | M0B*2", "F* | B*2", "R*"])
def test_chat_tokens_riding_a_pooled_graphs_function_give_each_its_result_alone(unrolled, monkeypatch, spec):
    # What a pooled graph with a rider computes (models/riding.py), off CUDA: the rider's ids and positions after the
    # graph's stream, its attention over the chats' cache rows, its logits taken beside the pooled vectors.
    from test_riding import clone, started
    from test_riding import texts as token_rows
    from test_serve_chat import tiny_lm

    from nosink.models.replaying import _Carrying

    lm, tok = tiny_lm()
    encoder = EncoderFromDecoder.from_model(lm, spec, tok, fast_attention=True, compile=False)
    monkeypatch.setattr(encoder, "_graphs_apply", lambda device, longest: True)
    chats = started(lm, tok, [3, 9, 5])
    rows, batch, plans = chats.rows, token_rows(6, 1), [encoder.plan]
    with torch.inference_mode():
        want_vectors, _ = encoder.encode_batch(batch, range(6), plans, "mean", "right", False)
        for _ in range(3):
            tokens = [c.ids[-1] for c in chats.active]
            want = clone(rows).step(tokens)
            rider = rows.rider(tokens)
            vectors, _ = encoder.encode_batch(batch, range(6), plans, "mean", "right", False, rider)
            logits = rows.ridden(rider)
            torch.testing.assert_close(vectors, want_vectors, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(logits, want, atol=1e-4, rtol=1e-4)
            for chat, token in zip(chats.active, logits.argmax(-1).tolist(), strict=True):
                chat.ids.append(token)
    keys = unrolled.made[0].keys
    assert len(keys) == 4 and all(isinstance(key[-1], _Carrying) for key in keys[1:])  # the rider's graphs ran
    assert len({key[-1] for key in keys[1:]}) == 1 and unrolled.made[0].forgotten == 1  # one cache: one key


def test_batches_the_padded_path_refuses_or_warns_about_never_take_a_pooled_graph(unrolled, monkeypatch):
    # Past GPT-2's learned positions the padded path refuses the batch; a pad id outside the vocabulary it refuses
    # too where rows differ in length. Neither reaches a pooled graph, so the refusal is the same at every batch.
    gpt2 = EncoderFromDecoder(tiny_decoder("gpt2"), "F*", tiny_tokenizer(), fast_attention=True, compile=False)
    monkeypatch.setattr(gpt2, "_graphs_apply", lambda device, longest: True)
    long = " ".join(["word"] * (gpt2.parts.max_positions + 5))
    for _ in range(2):
        with pytest.raises(ValueError, match="learned positions"):
            gpt2.encode([long], max_length=gpt2.parts.max_positions + 10, show_progress_bar=False)
    assert all(key[1:] != ("pooled",) for made in unrolled.made for key in made.keys)
    llama = EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer(), fast_attention=True, compile=False)
    monkeypatch.setattr(llama, "_graphs_apply", lambda device, longest: True)
    monkeypatch.setattr(batching, "pad_id", lambda tokenizer: 10_000)  # a pad token added, the model not resized
    for _ in range(2):
        with pytest.raises(ValueError, match="vocabulary"):
            llama.encode(["a", "the cat sat"], batch_size=2, show_progress_bar=False)
    assert all(key[1:] != ("pooled",) for made in unrolled.made for key in made.keys)
    assert llama.encode(["the cat", "the dog"], batch_size=2, show_progress_bar=False).shape[0] == 2  # same lengths


# ---------------------------------------------------------------- on CUDA

needs_kernel = pytest.mark.skipif(
    not torch.cuda.is_available() or not varlen_ready(torch.device("cuda"), torch.bfloat16),
    reason="CUDA graphs replay the variable-length flash kernel: CUDA and bfloat16 only",
)
COMPILED_TOL = 0.06  # compiled kernels (fused norms, RoPE, MLP) round bf16 differently from the eager ones
SPECS = ["F*", "B*", "R*", "M0F*", "M0B*", "M2B*", "F* | M0B*2", "F | B | R | M1B", "F* | INTER(R*2)"]


def encoders(family, spec, **kwargs):
    """An encoder replaying graphs (of uncompiled layers unless ``compile`` is given: the very kernels of the eager
    path) and one that never does, over one model."""
    model = tiny_decoder(family, dtype=torch.bfloat16).cuda()
    make = EncoderFromDecoder.from_model
    graphs = make(model, spec, tiny_tokenizer(), **({"compile": False} | kwargs))
    return graphs, make(model, spec, tiny_tokenizer(), cuda_graphs=False)


def batch(rows, seq, seed):
    """Random ids on rows of random lengths (the same lengths for every seed: batches of one bucket)."""
    ids = torch.randint(3, 96, (rows, seq), generator=torch.Generator().manual_seed(seed))
    lengths = torch.randint(1, seq + 1, (rows,), generator=torch.Generator().manual_seed(rows * seq))
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    return ids.cuda(), mask.cuda()


def close(got, want, mask, tol=0.03):
    real = mask.bool()
    scale = max(1.0, float(want[real].float().abs().max()))
    torch.testing.assert_close(got[real].float(), want[real].float(), atol=tol * scale, rtol=0)


def cuts(encoder):
    """Whether a layer of the plan keeps the tiny model's sliding window (3), shorter than these rows: such batches
    run padded (the dense mask for those layers), never packed, never through a graph."""
    return any(step.window is not None for step in encoder.plan.layer_steps)


@needs_kernel
@pytest.mark.parametrize("family", sorted(CONFIGS))
@pytest.mark.parametrize("spec", SPECS)
def test_replays_equal_the_eager_fast_path(family, spec):
    graphs, eager = encoders(family, spec)
    for seed in range(4):  # one bucket: captured at its first batch, every batch replayed
        ids, mask = batch(6, 20, seed)
        with torch.inference_mode():
            got = graphs(ids, mask).last_hidden_state
            want = eager(ids, mask).last_hidden_state
        close(got, want, mask)
        if not cuts(graphs):
            assert not got[~mask.bool()].any(), "padding positions hold zeros, as on the packed path"
    if cuts(graphs):  # such batches run padded, on the dense mask for the windowed layers
        assert graphs._graphs is None
    else:
        assert graphs._graphs is not None and graphs._graphs.broken is None
        assert graphs._graphs.replays == 4 and len(graphs._graphs.graphs) == 1


@needs_kernel
@pytest.mark.parametrize("family", ["llama", "gemma3_text", "gpt2"])
def test_replays_with_token_prepending_equal_the_eager_fast_path(family):
    # The placeholder's places come from the graph's own stream bounds (filler rows of one token included).
    graphs, eager = encoders(family, "F* | M0B*2", prepend=2)
    eager = EncoderFromDecoder.from_model(eager.decoder, "F* | M0B*2", cuda_graphs=False, prepend=2)
    for seed in range(4):
        ids, mask = batch(6, 20, seed)
        with torch.inference_mode():
            close(graphs(ids, mask).last_hidden_state, eager(ids, mask).last_hidden_state, mask)
    if not cuts(graphs):
        assert graphs._graphs.replays == 4 and graphs._graphs.broken is None


@needs_kernel
def test_forward_specs_and_encode_replay_and_equal_the_eager_path():
    graphs, eager = encoders("llama", "F* | M0B*2")
    specs = ["F*", "F* | M0B*2", "F* | B*2"]
    for seed in range(3):
        ids, mask = batch(8, 24, seed)
        with torch.inference_mode():
            got, want = graphs.forward_specs(ids, mask, specs), eager.forward_specs(ids, mask, specs)
        for name in want:
            close(got[name], want[name], mask)
    texts = ["the cat sat on the mat", "a dog ran in the park", "paris is the capital of france"] * 20
    for _ in range(3):
        got, want = graphs.encode(texts, batch_size=16), eager.encode(texts, batch_size=16)
        np.testing.assert_allclose(got, want, atol=0.03 * np.abs(want).max())
    assert graphs._graphs.replays > 0 and graphs._graphs.broken is None


@needs_kernel
def test_a_failed_capture_turns_graphs_off_and_runs_eagerly(caplog):
    graphs, eager = encoders("llama", "F* | M0B*2")
    original = torch.cuda.CUDAGraph

    class Refused(original):
        def capture_begin(self, *args, **kwargs):
            raise RuntimeError("no graphs here")

    torch.cuda.CUDAGraph = Refused
    try:
        ids, mask = batch(4, 16, 0)
        with torch.inference_mode():
            for _ in range(3):
                close(graphs(ids, mask).last_hidden_state, eager(ids, mask).last_hidden_state, mask)
    finally:
        torch.cuda.CUDAGraph = original
    assert isinstance(graphs._graphs.broken, RuntimeError) and graphs._graphs.replays == 0
    assert "CUDA graphs are off for this encoder" in caplog.text


@needs_kernel
def test_past_the_limit_new_buckets_run_as_they_are(monkeypatch):
    import nosink.models.replaying as module

    # the encoder makes its graphs at its first batch (and again for moved weights): give it ones of limit 2
    monkeypatch.setattr(module, "LayerGraphs", functools.partial(LayerGraphs, limit=2))
    graphs, eager = encoders("llama", "F*")
    with torch.inference_mode():
        for seq in (16, 40, 100):  # three buckets, each seen twice: the first two are captured at their first
            ids, mask = batch(4, seq, 0)
            mask = torch.ones_like(mask)
            for _ in range(2):
                close(graphs(ids, mask).last_hidden_state, eager(ids, mask).last_hidden_state, mask)
    assert [bucket.longest for _, bucket in graphs._graphs.graphs] == [16, 64]
    assert graphs._graphs.replays == 4


def test_graphs_are_made_again_for_moved_weights_and_never_replayed_with_grad(monkeypatch):
    # Off CUDA, with the graphs themselves replaced by a recorder: which batches reach them, and when the encoder
    # makes new ones (graphs hold the weights' addresses: moved or cast weights must never replay stale ones).
    import nosink.models.replaying as module

    made = []

    class Recorder:
        def __init__(self, device):
            made.append(self)
            self.batches = 0

        def run(self, key, lengths, ids, body, take, window=None):
            self.batches += 1
            return None  # "run it as it is"

    monkeypatch.setattr(module, "LayerGraphs", Recorder)
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F* | M0B*2", fast_attention=True, compile=False)
    monkeypatch.setattr(encoder, "_graphs_apply", lambda device, longest: True)
    ids, mask = torch.randint(3, 96, (2, 9)), torch.ones(2, 9, dtype=torch.long)
    encoder(ids, mask)  # grad enabled: no replay
    assert made == []
    with torch.no_grad():
        encoder(ids, mask)
        encoder(ids, mask)
        assert len(made) == 1 and made[0].batches == 2
        encoder.double()  # new storage for every weight
        encoder(ids, mask)
    assert len(made) == 2 and made[1].batches == 1


# ---------------------------------------------------------------- compile=None: the replayed layer loop compiled


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()  # one compiled function serves every layer class: no recompile limit carried over
    yield
    torch._dynamo.reset()


def test_the_default_compiles_nothing_off_the_graphs(monkeypatch):
    # On CPU no batch replays a graph, so nothing compiles; where torch cannot compile, the graphs' layers run
    # uncompiled with a warning (not an error: the user asked for nothing).
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F* | M0B*2", tiny_tokenizer())
    encoder.encode(["a few words", "and a few more"], show_progress_bar=False)
    assert encoder.warm_up() is False  # no graph replays here: nothing to compile ahead
    assert not encoder.parts.compiled
    monkeypatch.setattr(encoder, "_graphs_apply", lambda device, longest: True)  # as on a GPU
    monkeypatch.setattr(torch._dynamo, "is_dynamo_supported", lambda: False)
    assert encoder.warm_up() is False and encoder.warm_up() is False  # tried once
    assert not encoder.parts.compiled
    with pytest.raises(RuntimeError, match=r"torch\.compile is not available"):  # asked for: an error
        EncoderFromDecoder(tiny_decoder("llama"), "F*", compile=True)


def test_only_a_call_that_repays_it_compiles_the_graphs_loop(monkeypatch):
    # encode() asks before its first batch; warm_up() (which compiles where graphs apply) only for a call of
    # COMPILE_REPAID_TEXTS texts or more (prompts counted), once, and never with compile=False or compile=True.
    import nosink.models.replaying as module

    monkeypatch.setattr(module, "COMPILE_REPAID_TEXTS", 6)
    encoders = {
        option: EncoderFromDecoder(tiny_decoder("llama"), "F* | M0B*2", tiny_tokenizer(), compile=option)
        for option in (None, False)
    }
    calls = {option: [] for option in encoders}
    for option, encoder in encoders.items():
        monkeypatch.setattr(encoder, "warm_up", lambda option=option: calls[option].append(1) or True)
        encoder.encode(["a few words"] * 5, show_progress_bar=False)
        assert calls[option] == []  # 5 texts: under the bound
        encoder.encode(["a few words"] * 3, template="PromptEOL", show_progress_bar=False)
        assert calls[option] == []
    encoders[None].encode(["a few words"] * 6, show_progress_bar=False)
    assert calls[None] == [1] and encoders[None].compile_if_repaid(10**9) is True  # the stand-in says compiled
    encoders[False].encode(["a few words"] * 6, show_progress_bar=False)
    assert calls[False] == [] and encoders[False].compile_if_repaid(10**9) is False
    encoder = encoders[None]
    encoder._compile_later = False  # what warm_up sets once it has tried
    assert encoder.compile_if_repaid(10**9) is False and calls[None] == [1, 1]


def test_a_bucket_is_captured_at_its_first_batch(monkeypatch):
    # Off CUDA, with torch's capture replaced by a recorder: the first batch of a bucket is captured and replayed (a
    # second call on the same texts then only replays), every later one replayed; a capture that fails turns the
    # graphs off, and past the limit new buckets run as they are.
    import nosink.models.graphs as module

    captured = []

    class Replayable:
        def replay(self):
            pass

    def capture(run, device, pool):
        if captured and captured[-1] == "fail":
            raise RuntimeError("not capturable")
        captured.append("ok")
        return Replayable(), run()

    monkeypatch.setattr(module, "capture", capture)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: object())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    graphs = LayerGraphs(torch.device("cpu"), limit=3)

    def body(ids, positions, stream, extras):
        return {"x": ids.float()}

    def run(n):
        return graphs.run("k", [n], torch.zeros(1, n, dtype=torch.long), body, take=lambda out: out)

    assert run(4) is not None and graphs.captures == 1 and graphs.replays == 1  # captured at once, replayed
    assert run(4) is not None and graphs.captures == 1 and graphs.replays == 2
    assert run(100) is not None and run(300) is not None and graphs.captures == 3
    assert run(600) is None and graphs.captures == 3 and graphs.broken is None  # past the limit: as it is
    graphs.limit = 10
    captured.append("fail")
    assert run(1200) is None and isinstance(graphs.broken, RuntimeError)
    assert run(4) is None and graphs.replays == 4  # off for every bucket now
    assert graphs.capture_seconds >= 0


@needs_kernel
@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2", "olmo2"])  # not gemma3: its window cuts these rows
def test_the_default_replays_compiled_layers_after_warm_up(family, fresh_dynamo):
    graphs, eager = encoders(family, "F* | M0B*2", compile=None)

    def four() -> None:
        for seed in range(4):
            ids, mask = batch(6, 20, seed)
            with torch.inference_mode():
                close(graphs(ids, mask).last_hidden_state, eager(ids, mask).last_hidden_state, mask, tol=COMPILED_TOL)

    four()
    assert not graphs.parts.compiled and graphs._graphs.replays == 4  # a short job: uncompiled graphs, no compiler
    uncompiled = graphs._graphs
    assert graphs.warm_up() is True and graphs.parts.compiled and not graphs.parts._compiled_everywhere
    assert graphs._graphs is not uncompiled and graphs.graph_counts() == {"graphs": 1, "graph_replays": 1}
    four()  # captured again, compiled
    assert eager.parts._compiled is None  # an encoder that replays no graph compiles nothing
    assert graphs._graphs.replays == 5 and graphs._graphs.broken is None
    assert EncoderFromDecoder.from_model(eager.decoder, "F*", compile=False).warm_up() is False


@needs_kernel
def test_a_failed_compilation_leaves_the_graphs_uncompiled(monkeypatch, fresh_dynamo, caplog):
    def broken(graph, example_inputs):
        raise RuntimeError("no compiler here")

    graphs, eager = encoders("llama", "F* | M0B*2", compile=None)
    compile_layers = graphs.parts.compile_layers
    monkeypatch.setattr(graphs.parts, "compile_layers", lambda options, everywhere=True: compile_layers(
        {"backend": broken}, everywhere))  # fmt: skip
    assert graphs.warm_up() is False
    for seed in range(4):
        ids, mask = batch(6, 20, seed)
        with torch.inference_mode():
            close(graphs(ids, mask).last_hidden_state, eager(ids, mask).last_hidden_state, mask)
    assert "the CUDA graphs' layers run uncompiled" in caplog.text and "no compiler here" in caplog.text
    assert not graphs.parts.compiled and graphs._graphs.replays == 5 and graphs._graphs.broken is None


# ---------------------------------------------------------------- encode(): graphs that pool


@needs_kernel
@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize(("spec", "prepend"), [("F* | M0B*2", None), ("B*", None), ("F* | M0B*2", 2)])
def test_encode_through_pooled_graphs_equals_the_padded_path(pooling, spec, prepend):
    # encode() goes from tokens to pooled vectors through graphs that pool (no padded batch); an encoder without
    # graphs pads, runs and pools. Texts of several lengths, an instruction (prefix tokens that do not pool), batches
    # of one bucket seen three times (captured at the second), and a text with no tokens.
    kwargs = {} if prepend is None else {"prepend": prepend}
    graphs, _ = encoders("llama", spec, **kwargs)
    eager = EncoderFromDecoder.from_model(graphs.decoder, spec, tiny_tokenizer(), cuda_graphs=False, **kwargs)
    texts = ["the cat sat on the mat", "a dog", "paris is the capital of france and more", ""] * 4
    for _ in range(3):
        for instruction in (None, "find:"):
            got = graphs.encode(texts, instruction, pooling=pooling, batch_size=8, normalize_embeddings=True)
            want = eager.encode(texts, instruction, pooling=pooling, batch_size=8, normalize_embeddings=True)
            np.testing.assert_allclose(got, want, atol=0.03)
    pooled = [key for key, _ in graphs._graphs.graphs if "pooled" in key]
    assert pooled and graphs._graphs.broken is None and graphs._graphs.replays > 0
    empty = graphs.encode(texts, pooling=pooling, batch_size=8)[3::4]  # in batches of a bucket seen before
    assert not np.abs(empty).any(), "a text with no tokens pools to zeros"


@needs_kernel
def test_encode_specs_and_token_embeddings_still_equal_the_padded_path():
    graphs, eager = encoders("llama", "F* | M0B*2")
    texts = ["the cat sat on the mat", "a dog ran in the park", "paris is the capital of france"] * 6
    specs = ["F*", "F* | M0B*2", "F* | B*2"]
    for _ in range(3):
        got, want = graphs.encode_specs(specs, texts, batch_size=8), eager.encode_specs(specs, texts, batch_size=8)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], atol=0.03 * np.abs(want[name]).max())
        got = graphs.encode(texts[:4], output_value="token_embeddings", convert_to_numpy=False)
        want = eager.encode(texts[:4], output_value="token_embeddings", convert_to_numpy=False)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g.float().cpu(), w.float().cpu(), atol=0.03 * float(w.abs().max()), rtol=0)
    assert any("pooled" in key for key, _ in graphs._graphs.graphs)
