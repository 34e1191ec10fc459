"""The engine's embedding batches in flight: on a GPU a batch is answered after the next one is launched.

On a CPU nothing is ever in flight (a batch's vectors are on the host when it is launched), so the order of
launches and answers is checked with a stand-in for the copy to the host that stays pending until waited on;
on CUDA (skipped elsewhere) the real copy, against ``encode()``.
"""

import contextlib
import time
import typing

import numpy as np
import pytest
import torch
from tiny import tiny_decoder, tiny_tokenizer

import nosink.serve.embedding as embedding
import nosink.serve.engine as engine_module
from nosink import EncoderFromDecoder
from nosink.models import texts as nosink_texts
from nosink.serve.engine import _STOP, FAILURES, Engine
from nosink.serve.jobs import EmbedJob
from nosink.serve.limits import Limits

TEXTS = ["the cat sat on the mat", "a dog ran in the park", "paris is the capital of france", "i like good food"]


class _Pending:
    """Stands in for a CUDA copy to the host (nosink.models.encoding.ToHost): pending until waited on."""

    log: typing.ClassVar[list] = []
    pending = True

    def __init__(self, out):
        self.out = out
        self.log.append("launch")

    def wait(self):
        self.log.append("wait")
        return self.out.cpu()


@pytest.fixture
def encoder():
    return EncoderFromDecoder.from_model(tiny_decoder("llama"), "F* | M0B*2", tiny_tokenizer())


def _engine(encoder, **limits):
    return Engine(encoder, None, encoder.tokenizer, Limits(**limits))


def _job(encoder, texts):
    return EmbedJob(nosink_texts.tokenize(encoder.tokenizer, texts, sink=encoder.sink_ids()))


def _encode(encoder, texts):
    return encoder.encode(texts, normalize_embeddings=True)


def test_on_a_gpu_a_batch_is_answered_after_the_next_is_launched(encoder, monkeypatch):
    monkeypatch.setattr(embedding, "ToHost", _Pending)
    monkeypatch.setattr(_Pending, "log", [])
    worker = _engine(encoder, batch_size=2, batch_wait_ms=0)
    first, second, third = _job(encoder, TEXTS[:2]), _job(encoder, TEXTS[2:4]), _job(encoder, ["a dog"])
    worker.inbox.put(first)
    worker._take()
    assert worker.batches.due()
    worker.batches.step()
    assert worker.batches.in_flight is not None and not first.future.done()  # launched, not answered
    assert worker.batches.wait() == 0.0 and len(worker.batches) == 1  # the engine does not sleep on it
    worker.inbox.put(second)
    worker._take()
    assert worker.batches.due()  # requests wait while a batch is in flight: launch them at once
    worker.batches.step()  # batch 2 (`second`) launched, then batch 1 answered
    assert _Pending.log == ["launch", "launch", "wait"] and first.future.done() and not second.future.done()
    worker.inbox.put(third)
    worker._take()
    worker.batches.step()  # batch 3 (`third`), then batch 2 answered
    assert second.future.done() and not third.future.done()
    assert not worker.batches.due()  # nothing waits: the engine answers the batch in flight (as _loop does)
    worker.batches.finish()
    assert worker.batches.in_flight is None
    assert _Pending.log == ["launch", "launch", "wait", "launch", "wait", "wait"]
    for job, texts in ((first, TEXTS[:2]), (second, TEXTS[2:4]), (third, ["a dog"])):
        np.testing.assert_allclose(job.future.result(), _encode(encoder, texts), atol=1e-5, rtol=0)


def test_the_engine_answers_a_batch_in_flight_when_nothing_follows_it_and_at_stop(encoder, monkeypatch):
    monkeypatch.setattr(embedding, "ToHost", _Pending)
    worker = _engine(encoder, batch_wait_ms=0)
    worker.thread.start()
    try:
        lone = _job(encoder, ["the cat sat"])
        worker.submit(lone)  # one request, nothing behind it: the loop must not leave it in flight
        np.testing.assert_allclose(lone.future.result(timeout=120), _encode(encoder, ["the cat sat"]), atol=1e-5)
    finally:
        worker.stop()
    worker = _engine(encoder, batch_wait_ms=0)
    job = _job(encoder, ["a dog"])
    worker.inbox.put(job)
    worker._take()
    worker.batches.step()
    assert not job.future.done()
    worker.inbox.put(_STOP)  # what stop() hands the engine
    assert not worker._take()
    np.testing.assert_allclose(job.future.result(timeout=5), _encode(encoder, ["a dog"]), atol=1e-5)


def test_a_batch_that_fails_in_flight_runs_each_request_alone(encoder, monkeypatch):
    class Broken(_Pending):
        def wait(self):
            raise RuntimeError("the device failed")

    monkeypatch.setattr(embedding, "ToHost", Broken)
    worker = _engine(encoder, batch_wait_ms=0)
    a, b = _job(encoder, ["the cat"]), _job(encoder, ["a dog ran"])
    worker.inbox.put(a)
    worker.inbox.put(b)
    worker._take()
    worker.batches.step()
    worker.batches.finish()  # every copy fails: each request alone fails too, with the error
    for job in (a, b):
        with pytest.raises(RuntimeError, match="the device failed"):
            job.future.result(timeout=5)
    assert worker.batches.in_flight is None and not worker.batches.jobs()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a batch stays in flight only on a GPU")
def test_on_cuda_batches_in_flight_answer_what_encode_gives(monkeypatch):
    model = tiny_decoder("llama", dtype=torch.bfloat16).cuda()
    gpu = EncoderFromDecoder.from_model(model, "F* | M0B*2", tiny_tokenizer())
    engine = _engine(gpu, batch_size=4, batch_texts=4, batch_wait_ms=0)
    flying = []
    launch = embedding.Batches._launch

    def spy(self, rows, rider=None):
        flying.append(self.in_flight is not None)
        return launch(self, rows, rider)

    monkeypatch.setattr(embedding.Batches, "_launch", spy)
    texts = [" ".join([TEXTS[i % 4]] * (1 + i % 3)) for i in range(48)]
    jobs = [_job(gpu, texts[i : i + 2]) for i in range(0, 48, 2)]
    engine.start()
    try:
        for job in jobs:
            engine.submit(job)
        got = np.concatenate([job.future.result(timeout=300) for job in jobs])
    finally:
        engine.stop()
    want = gpu.encode(texts, batch_size=4, normalize_embeddings=True)
    np.testing.assert_allclose(got, want, atol=0.03, rtol=0)  # bfloat16; batch companions differ
    assert sum(flying) >= 2  # batches were launched while another was in flight


def test_an_error_that_keeps_escaping_the_engine_fails_its_requests_and_the_engine_goes_on(encoder, monkeypatch):
    calls = []

    def broken(self):
        calls.append(self)
        raise RuntimeError("a bug of the engine, not of a request")

    monkeypatch.setattr(embedding.Batches, "step", broken)
    monkeypatch.setattr(engine_module, "_sleep", lambda seconds: None)
    worker = _engine(encoder, batch_size=2, batch_wait_ms=0)
    first = _job(encoder, TEXTS[:2])
    worker.start()
    try:
        worker.submit(first)
        with pytest.raises(RuntimeError, match="the model engine failed"):
            first.future.result(timeout=60)
        assert len(calls) == FAILURES and not worker.batches.jobs()  # failed after FAILURES tries, not retried for ever
        monkeypatch.setattr(embedding.Batches, "step", _STEP)
        later = _job(encoder, TEXTS[2:])
        worker.submit(later)
        np.testing.assert_allclose(later.future.result(timeout=60), _encode(encoder, TEXTS[2:]), atol=1e-5, rtol=0)
    finally:
        worker.stop()


_STEP = embedding.Batches.step


def _chats_beside_requests(worker, lm, encoder, wave: int, atol: float) -> None:
    """Run ``worker`` with three chats while requests come ``wave`` at a time until the chats end, then check that
    each request got what ``encode()`` gives (within ``atol``) and each chat the tokens it gets decoded alone."""
    from test_serve_chat import alone, chat, prompt

    lengths = [(3, 9), (7, 6), (5, 8)]  # (prompt, max_tokens)
    chats = [chat(prompt(n, i), m) for i, (n, m) in enumerate(lengths)]
    jobs = []
    worker.start()
    try:
        for job in chats:
            worker.submit(job)
        for k in range(0, 60, wave):
            batches = [[TEXTS[(w + j) % 4][: 6 + (w + j) % 9] for j in range(1 + w % 4)] for w in range(k, k + wave)]
            submitted = [(batch, _job(encoder, batch)) for batch in batches]
            for _, job in submitted:
                worker.submit(job)
            jobs += [(batch, job.future.result(timeout=120)) for batch, job in submitted]
            if all(c.events and c.events[-1][0] == "done" for c in chats):
                break
    finally:
        worker.stop()
    for batch, vectors in jobs:
        np.testing.assert_allclose(vectors, _encode(encoder, batch), atol=atol, rtol=0)
    for job, (_, m) in zip(chats, lengths, strict=True):
        assert job.ids == alone(lm, job.prompt_ids, m) and job.events[-1][0] == "done"


def test_with_a_stream_of_their_own_chat_steps_run_beside_the_batch_in_flight(monkeypatch):
    # On a GPU the chats' steps then run on their own CUDA stream; here a stand-in context logs where a chat step
    # runs, and the stand-in copy keeps each batch in flight until it is waited on: a chat step must run while a
    # batch is in flight (not only after it is answered), and every answer must be what each gives alone.
    from test_serve_chat import SEEDS, tiny_lm

    monkeypatch.setattr(embedding, "ToHost", _Pending)
    monkeypatch.setattr(_Pending, "log", [])
    own = object()
    monkeypatch.setattr(engine_module, "_own_stream", lambda lm: own)
    lm, tok = tiny_lm("llama", SEEDS["llama"])
    encoder = EncoderFromDecoder.from_model(lm, "F* | M0B*1", tok)
    worker = Engine(encoder, lm, tok, Limits(batch_size=4, batch_texts=4, max_active_chats=4), chat_stream=True)
    assert worker.chat_stream is own

    class OnStream:
        def __enter__(self):
            _Pending.log.append("chat step")

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(worker, "_on_chat_stream", OnStream)
    _chats_beside_requests(worker, lm, encoder, wave=1, atol=1e-5)
    log = _Pending.log
    flying, beside = 0, []  # batches launched and not yet waited on; chat steps run while one was
    for i, event in enumerate(log):
        flying += {"launch": 1, "wait": -1}.get(event, 0)
        if event == "chat step" and flying > 0:
            beside.append(i)
    assert beside and log.count("chat step") == worker.stats["chat_steps"]
    assert all(log[i + 1] == "wait" for i in beside)  # the batch beside a chat step is answered right after it


def test_a_chat_step_that_fails_beside_a_batch_in_flight_still_answers_the_batch(monkeypatch):
    from test_serve_chat import SEEDS, chat, prompt, tiny_lm

    from nosink.serve.generation import Chats

    monkeypatch.setattr(embedding, "ToHost", _Pending)
    monkeypatch.setattr(engine_module, "_own_stream", lambda lm: object())
    monkeypatch.setattr(engine_module, "_sleep", lambda seconds: None)

    def broken(self):
        raise RuntimeError("a bug of the chat step, not of a request")

    monkeypatch.setattr(Chats, "step", broken)
    lm, tok = tiny_lm("llama", SEEDS["llama"])
    encoder = EncoderFromDecoder.from_model(lm, "F* | M0B*1", tok)
    worker = Engine(encoder, lm, tok, Limits(batch_wait_ms=0), chat_stream=True)
    monkeypatch.setattr(worker, "_on_chat_stream", contextlib.nullcontext)
    talk, job = chat(prompt(5, 0), 4), _job(encoder, TEXTS[:2])
    worker.inbox.put(talk)
    worker.inbox.put(job)  # both taken at once: the batch launches first, then the chat steps fail beside it
    worker.start()
    try:
        # Answered by the first failing step's engine, before FAILURES of them fail every request the engine holds.
        np.testing.assert_allclose(job.future.result(timeout=60), _encode(encoder, TEXTS[:2]), atol=1e-5, rtol=0)
        for _ in range(600):
            if talk.events:
                break
            time.sleep(0.05)
        assert talk.events and talk.events[-1][0] == "error"  # the chat fails with the engine's reset
    finally:
        worker.stop()


def test_chat_steps_cannot_both_ride_batches_and_run_beside_them(encoder):
    with pytest.raises(ValueError, match="exclude each other"):
        Engine(encoder, None, encoder.tokenizer, Limits(), chat_riding=True, chat_stream=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a stream of their own needs a GPU")
def test_on_cuda_chat_steps_on_their_own_stream_answer_as_each_alone(monkeypatch):
    from test_serve_chat import SEEDS, tiny_lm

    from nosink.serve import kv

    lm, tok = tiny_lm("llama", SEEDS["llama"])
    lm = lm.cuda()
    encoder = EncoderFromDecoder.from_model(lm, "F* | M0B*1", tok)
    worker = Engine(encoder, lm, tok, Limits(batch_size=4, batch_texts=4, max_active_chats=4), chat_stream=True)
    streams = []
    run = kv.Rows._run

    def spy(self, fed, length):
        streams.append((torch.cuda.current_stream(), worker.batches.in_flight is not None))
        return run(self, fed, length)

    monkeypatch.setattr(kv.Rows, "_run", spy)
    _chats_beside_requests(worker, lm, encoder, wave=3, atol=1e-4)
    assert isinstance(worker.chat_stream, torch.cuda.Stream) and streams
    assert all(stream == worker.chat_stream for stream, _ in streams)  # every chat forward ran on the chats' stream
    assert any(flying for _, flying in streams)  # and some while an embedding batch was in flight
    assert worker.chats.rows.broken is None and worker.chats.rows.graphs  # and replayed CUDA graphs there


def test_rotary_frequencies_that_follow_the_batchs_longest_position_keep_chat_steps_on_the_models_stream(
    monkeypatch,
):
    # transformers' dynamic and longrope types rewrite the one rotary module's frequencies in each forward: the chats
    # and the embeddings must not do that on two streams with nothing ordering them.
    import transformers as tf
    from test_serve_chat import tiny_lm
    from tiny import COMMON

    own = object()
    monkeypatch.setattr(engine_module, "_own_stream", lambda lm: own)
    tok = tiny_lm()[1]
    for rope in ({"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}, None):
        config = tf.LlamaConfig(**COMMON, num_key_value_heads=2, rope_parameters=rope)
        config.vocab_size = len(tok)
        lm = tf.AutoModelForCausalLM.from_config(config).eval()
        encoder = EncoderFromDecoder.from_model(lm, "F*", tok)
        worker = Engine(encoder, lm, tok, Limits(), chat_stream=True)
        assert worker.chat_stream is (None if rope is not None else own)
