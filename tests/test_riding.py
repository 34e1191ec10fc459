"""Chat decode tokens riding an embedding batch's forward (models/riding.py): the batch's vectors are those of the
batch alone, the chats' logits those of their decode step alone, and the chats go on as if they had stepped alone."""

import random

import numpy as np
import pytest
import torch
from test_serve_chat import SEEDS, chat, prompt, tiny_lm

from nosink.models import EncoderFromDecoder
from nosink.models.riding import rides
from nosink.models.texts import Tokenized
from nosink.serve import kv
from nosink.serve.generation import Chats

RIDABLE = ["llama", "qwen3", "phi3", "olmo", "olmo2", "gpt2"]  # tiny configs with no sliding window


def texts(count: int, seed: int) -> Tokenized:
    """``count`` rows of 1 to 12 word ids after a sink token, and no suffix."""
    rng = random.Random(seed)
    vocab = 40
    return Tokenized(
        prefix_ids=[[1]] * count, text_ids=[[rng.randrange(4, vocab) for _ in range(rng.randint(1, 12))]
                                            for _ in range(count)],
    )  # fmt: skip


def started(lm, tok, lengths: list[int], max_active: int = 4) -> Chats:
    """Chats of prompts of ``lengths``, prefilled (each has its first token) and ready to decode."""
    chats = Chats(lm, tok, max_active=max_active, stats={"chat_tokens": 0, "dropped": 0})
    for i, n in enumerate(lengths):
        chats.add(chat(prompt(n, 10 + i), 30))
    with torch.inference_mode():
        chats.step()
    assert len(chats.active) == len(lengths)
    return chats


def clone(rows: kv.Rows) -> kv.Rows:
    """Another :class:`kv.Rows` holding the same chats (copies of their buffers)."""
    other = kv.Rows(rows.lm, graphs=False, rows=rows.mask.shape[0])
    other.join([rows])
    return other


@pytest.mark.parametrize("family", RIDABLE)
@pytest.mark.parametrize("spec", ["F*", "F* | M0B*1", "R*", "F* | B*1"])
def test_a_rider_gives_the_batch_its_own_vectors_and_the_chats_their_decode_step(family, spec):
    lm, tok = tiny_lm(family, SEEDS[family])
    encoder = EncoderFromDecoder.from_model(lm, spec, tok, fast_attention=True)
    plans = [encoder.plan]
    assert encoder.rides(plans)
    chats = started(lm, tok, [3, 9, 5])
    rows = chats.rows
    tokens = [c.ids[-1] for c in chats.active]
    batch = texts(6, 1)
    with torch.inference_mode():
        want_vectors, _ = encoder.encode_batch(batch, range(6), plans, "mean", "right", False)
        alone = clone(rows)
        want_logits = alone.step(tokens)
        rider = rows.rider(tokens)
        vectors, _ = encoder.encode_batch(batch, range(6), plans, "mean", "right", False, rider)
        logits = rows.ridden(rider)
    torch.testing.assert_close(vectors, want_vectors, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits, want_logits, atol=1e-4, rtol=1e-4)
    assert rows.end == alone.end and torch.equal(rows.mask[: rows.n, : rows.end], alone.mask[: alone.n, : alone.end])
    with torch.inference_mode():  # the next step reads the keys and values the rider wrote
        nxt = logits.argmax(-1).tolist()
        torch.testing.assert_close(rows.step(nxt), alone.step(nxt), atol=1e-4, rtol=1e-4)


def test_chats_riding_every_step_decode_the_greedy_tokens_of_each_chat_alone():
    lm, tok = tiny_lm("llama", SEEDS["llama"])
    encoder = EncoderFromDecoder.from_model(lm, "F* | M0B*1", tok, fast_attention=True)
    ridden = Chats(lm, tok, max_active=4, stats={"chat_tokens": 0, "dropped": 0})
    apart = Chats(lm, tok, max_active=4, stats={"chat_tokens": 0, "dropped": 0})
    lengths = [(3, 9), (7, 4), (2, 6), (11, 5), (5, 3), (6, 7)]
    pairs = [(chat(prompt(n, i), m), chat(prompt(n, i), m)) for i, (n, m) in enumerate(lengths)]
    arrivals = {0: pairs[:2], 2: pairs[2:4], 5: pairs[4:]}
    carried = 0
    with torch.inference_mode():
        for step in range(40):
            for a, b in arrivals.get(step, []):
                ridden.add(a)
                apart.add(b)
            rider = ridden.rider()
            if rider is not None:
                encoder.encode_batch(texts(5, step), range(5), [encoder.plan], "mean", "right", False, rider)
                carried += 1
                ridden.ridden(rider)
            else:
                ridden.step()
            apart.step()
            if not len(ridden) and not len(apart) and step > max(arrivals):
                break
    assert carried > 10
    for a, b in pairs:
        assert a.ids == b.ids and a.events == b.events


@pytest.mark.parametrize(
    ("spec", "exit_layer", "prepend", "why"),
    [
        ("F* | M0B*1", 1, None, "an early exit leaves layers out"),
        ("F* | INTER(R*1)", None, None, "INTER runs a layer twice"),
        ("F* | M0B*1", None, 1, "Token Prepending"),
    ],
)
def test_a_plan_that_does_not_walk_every_layer_once_carries_no_rider(spec, exit_layer, prepend, why):
    lm, tok = tiny_lm()
    encoder = EncoderFromDecoder.from_model(lm, "F*", tok, fast_attention=True)
    plan = encoder.plan_for(spec, exit_layer=exit_layer, prepend=prepend)
    assert not rides([plan], encoder.depth), why
    assert rides([encoder.plan], encoder.depth) and not rides([encoder.plan, plan], encoder.depth)


def test_a_rider_is_refused_where_the_batch_cannot_carry_it():
    lm, tok = tiny_lm()
    chats = started(lm, tok, [4])
    slow = EncoderFromDecoder.from_model(lm, "F*", tok)  # on a CPU the fast path is off by default
    assert not slow.rides([slow.plan])
    with torch.inference_mode():
        rider = chats.rows.rider([chats.active[0].ids[-1]])
        with pytest.raises(ValueError, match="rides"):
            slow.encode_batch(texts(2, 0), range(2), [slow.plan], "mean", "right", False, rider)
        with pytest.raises(ValueError, match="not carried"):
            chats.rows.ridden(rider)
    windowed, wtok = tiny_lm("mistral")  # a sliding window on every layer
    encoder = EncoderFromDecoder.from_model(windowed, "F*", wtok, fast_attention=True)
    assert not encoder.rides([encoder.plan])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_on_a_gpu_a_rider_replays_in_the_pooled_graph_and_its_buffers_grown_are_captured_anew(family):
    from nosink.models.replaying import _Carrying

    lm, tok = tiny_lm(family, SEEDS[family])
    lm = lm.to("cuda", torch.float16)
    encoder = EncoderFromDecoder.from_model(lm, "F* | M0B*1", tok)  # on CUDA: the fast path, packed, graphs
    plans = [encoder.plan]
    assert encoder.rides(plans)
    chats = started(lm, tok, [3, 9, 5])
    rows = chats.rows

    def carrying() -> list:
        return [name for name in encoder._graphs.graphs if isinstance(name[0][-1], _Carrying)]

    batch = texts(6, 1)  # the same bucket every step: captured at its first batch, then replayed
    with torch.inference_mode():
        want_vectors, _ = encoder.encode_batch(batch, range(6), plans, "mean", "right", False)
        for step in range(6):
            if step == 3:  # wider buffers (as a long chat makes): a new key, the old graph forgotten
                rows._fit(rows.mask.shape[0], 2 * rows.mask.shape[1])
            tokens = [c.ids[-1] for c in chats.active]
            alone = clone(rows)
            want = alone.step(tokens)
            replays = encoder.graph_counts()["graph_replays"]
            rider = rows.rider(tokens)
            vectors, _ = encoder.encode_batch(batch, range(6), plans, "mean", "right", False, rider)
            logits = rows.ridden(rider)
            torch.testing.assert_close(vectors, want_vectors, atol=1e-2, rtol=1e-2)
            torch.testing.assert_close(logits, want, atol=2e-2, rtol=2e-2)
            # A key's first batch is captured and replayed; new buffers, a new key (the old one's graph forgotten).
            assert encoder.graph_counts()["graph_replays"] - replays == 1, step
            assert len(carrying()) == 1, step
            for chat, token in zip(chats.active, logits.argmax(-1).tolist(), strict=True):
                chat.ids.append(token)
    assert rows.generation >= 1


@pytest.mark.parametrize("in_flight", [False, True], ids=["answered-at-once", "in-flight"])
def test_an_engine_whose_chats_ride_the_batches_answers_both_as_each_alone(in_flight, monkeypatch):
    # On a CPU a batch is answered when it is launched; with the stand-in for the GPU's copy to the host it stays in
    # flight (as on a GPU) while the chats take the tokens of the batch they rode.
    from test_serve_batches import _Pending
    from test_serve_chat import alone

    import nosink.serve.embedding as embedding
    from nosink.models import texts as nosink_texts
    from nosink.serve.embedding import Batches
    from nosink.serve.engine import Engine
    from nosink.serve.generation import Chats
    from nosink.serve.jobs import EmbedJob
    from nosink.serve.limits import Limits

    if in_flight:
        monkeypatch.setattr(embedding, "ToHost", _Pending)
    log = []
    step, ridden = Batches.step, Chats.ridden
    monkeypatch.setattr(
        Batches, "step", lambda self, rider=None: (log.append(("step", rider is not None)), step(self, rider))
    )
    monkeypatch.setattr(Chats, "ridden", lambda self, rider: (log.append("ridden"), ridden(self, rider)))
    lm, tok = tiny_lm("llama", SEEDS["llama"])
    encoder = EncoderFromDecoder.from_model(lm, "F* | M0B*1", tok, fast_attention=True)
    # A job of 4 texts makes a batch due at once (batch_texts 4): while one waits, the chats ride its batch.
    engine = Engine(encoder, lm, tok, Limits(batch_size=4, batch_texts=4, max_active_chats=4), chat_riding=True)
    lengths = [(3, 9), (7, 6), (5, 8)]  # (prompt, max_tokens)
    chats = [chat(prompt(n, i), m) for i, (n, m) in enumerate(lengths)]
    words = ["the cat sat", "a dog ran far", "we love food", "on the mat", "birds sing"]
    jobs = []
    engine.start()
    try:
        for job in chats:
            engine.submit(job)
        for k in range(0, 60, 3):  # three requests at a time (so batches queue behind one another) until chats end
            wave = []
            for w in range(k, k + 3):
                batch = [" ".join(words[(w + j) % 5].split()[: 1 + (w + j) % 3]) for j in range(4)]
                job = EmbedJob(nosink_texts.tokenize(tok, batch, sink=encoder.sink_ids()))
                engine.submit(job)
                wave.append((batch, job))
            jobs += [(batch, job.future.result(timeout=60)) for batch, job in wave]
            if all(job.events and job.events[-1][0] == "done" for job in chats):
                break
    finally:
        engine.stop()
    assert engine.stats["ridden_steps"] > 0
    rode = [i for i, event in enumerate(log) if event == ("step", True)]
    assert rode and all(log[i + 1] == "ridden" for i in rode)  # the chats take their tokens before the next launch
    for batch, vectors in jobs:
        torch.testing.assert_close(
            torch.from_numpy(vectors), torch.from_numpy(encoder.encode(batch, normalize_embeddings=True)),
            atol=1e-5, rtol=1e-5,
        )  # fmt: skip
    for job, (_, m) in zip(chats, lengths, strict=True):
        assert job.ids == alone(lm, job.prompt_ids, m) and job.events[-1][0] == "done"


def test_forgetting_an_encoders_last_graph_lets_the_next_capture_take_a_new_pool():
    from nosink.models.graphs import LayerGraphs

    graphs = LayerGraphs(torch.device("cpu"))
    graphs.graphs = {("a", 1): object(), ("b", 1): object()}
    graphs._pool = pool = object()
    graphs.forget(lambda name: name[0] == "a")
    assert list(graphs.graphs) == [("b", 1)] and graphs._pool is pool
    graphs.forget(lambda name: True)  # the pool's memory went with its last graph: a capture into it would fail
    assert not graphs.graphs and graphs._pool is None


def test_an_unpadded_batch_carries_a_rider_too():
    lm, tok = tiny_lm()
    encoder = EncoderFromDecoder.from_model(lm, "F* | M0B*1", tok, fast_attention=True)
    chats = started(lm, tok, [3, 9])
    rows, tokens = chats.rows, [c.ids[-1] for c in chats.active]
    batch = Tokenized(prefix_ids=[[1]] * 3, text_ids=[[5, 6, 7, 8]] * 3)  # no padding: it packs for the rider
    with torch.inference_mode():
        want_vectors, _ = encoder.encode_batch(batch, range(3), [encoder.plan], "mean", "right", False)
        want = clone(rows).step(tokens)
        rider = rows.rider(tokens)
        vectors, _ = encoder.encode_batch(batch, range(3), [encoder.plan], "mean", "right", False, rider)
        logits = rows.ridden(rider)
    torch.testing.assert_close(vectors, want_vectors, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits, want, atol=1e-4, rtol=1e-4)


def test_a_rider_that_fails_fails_no_embedding_request_and_its_chats_step_alone(monkeypatch):
    from test_serve_chat import alone

    from nosink.models import texts as nosink_texts
    from nosink.models.riding import Rider
    from nosink.serve.engine import Engine
    from nosink.serve.jobs import EmbedJob
    from nosink.serve.limits import Limits

    lm, tok = tiny_lm()
    encoder = EncoderFromDecoder.from_model(lm, "F* | M0B*1", tok, fast_attention=True)
    engine = Engine(encoder, lm, tok, Limits(batch_size=4, batch_texts=4), chat_riding=True)
    job_chat = chat(prompt(5, 3), 3)
    engine.chats.add(job_chat)
    with torch.inference_mode():
        engine.chats.step()  # prefilled: its first token
        job = EmbedJob(nosink_texts.tokenize(tok, ["the cat sat"], sink=encoder.sink_ids()))  # one request alone
        engine.batches.add(job)

        def broken(*args, **kwargs):
            raise RuntimeError("the rider's attention failed")

        monkeypatch.setattr(Rider, "attend", broken)
        rider = engine.chats.rider()
        engine.batches.step(rider)
        engine.batches.finish()
        assert rider.logits is None  # not carried: the batch ran again without it
        engine.chats.ridden(rider)  # so the chats' step runs alone
        monkeypatch.undo()
        while len(engine.chats):
            engine.chats.step()
    want = encoder.encode(["the cat sat"], normalize_embeddings=True)
    np.testing.assert_allclose(job.future.result(), want, atol=1e-5)
    assert job_chat.ids == alone(lm, job_chat.prompt_ids, 3)


def test_rotary_frequencies_that_follow_the_batchs_longest_position_carry_no_rider():
    import transformers as tf
    from tiny import COMMON

    tok = tiny_lm()[1]
    for rope in ({"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}, None):
        config = tf.LlamaConfig(**COMMON, num_key_value_heads=2, rope_parameters=rope)
        config.vocab_size = len(tok)
        lm = tf.AutoModelForCausalLM.from_config(config).eval()
        encoder = EncoderFromDecoder.from_model(lm, "F*", tok, fast_attention=True)
        # A chat's positions would change the texts' frequencies (and the texts' a chat's): no riding then.
        assert encoder.parts.batch_wide_rotary is (rope is not None)
        assert encoder.rides([encoder.plan]) is (rope is None)


def test_cache_buffers_never_share_a_riders_key_with_earlier_ones():
    lm, tok = tiny_lm()
    keys = set()
    for _ in range(3):  # a Rows made after another is gone may get its id(): never its key
        chats = started(lm, tok, [4])
        with torch.inference_mode():
            keys.add(chats.rows.rider([chats.active[0].ids[-1]]).key)
        del chats
    assert len(keys) == 3


def test_a_riders_graph_that_fails_to_capture_turns_off_only_its_own_key(monkeypatch):
    from nosink.models.graphs import LayerGraphs

    # On a CPU every capture fails (it needs CUDA streams): the failure the isolated key stands for.
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    graphs = LayerGraphs(torch.device("cpu"))
    ids = torch.zeros(1, 4, dtype=torch.long)

    def body(ids, positions, stream, extras):
        return {"x": ids.float()}

    assert graphs.run("rider", [4], ids, body, take=lambda out: out, isolated=True) is None
    assert "rider" in graphs.refused and graphs.broken is None  # the other graphs stay on
    assert graphs.run("plain", [4], ids, body, take=lambda out: out) is None
    assert graphs.broken is not None
