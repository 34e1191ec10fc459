"""Front-end processes: the routes in spawned processes, the model in this one, through pipes.

The same tiny chat model as ``test_serve.py``, served with ``workers=2``: answers equal the one-process
server's, a front-end that dies is replaced, and the engine's work is freed when clients go.
"""

import base64
import http.client
import json
import os
import signal
import threading
import time
import urllib.request

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from test_serve import CHAT, KEY, PROMPTS, SPEC, TEXTS, tiny_chat_model  # noqa: E402

from nosink.serve import ApiError, Limits, ServerThread, create_app  # noqa: E402

# With pytest-xdist this file's tests run on one worker (--dist loadgroup): its server processes start once.
pytestmark = pytest.mark.xdist_group("test_serve_processes")


@pytest.fixture(scope="module")
def served():
    lm, tok = tiny_chat_model()
    limits = Limits(max_inputs=4, max_tokens_per_text=12, max_queue=8)
    configs = {"tiny": SPEC, "early": "F* | B @ exit 3"}  # a second embedding configuration, under its own id
    app = create_app(lm, tok, configs, name="tiny", prompts=PROMPTS, api_key=KEY, limits=limits)
    with ServerThread(app, workers=2) as running:
        running.app = app
        yield running


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def _health(server):
    with urllib.request.urlopen(server.url + "/health", timeout=60) as answer:
        return json.loads(answer.read())


def test_embeddings_from_front_ends_equal_encode(served, client):
    encoder = served.app.state.encoder
    for fmt in ("float", "base64"):
        got = client.embeddings.create(model="tiny", input=TEXTS, encoding_format=fmt)
        rows = [r.embedding for r in got.data]
        if fmt == "base64":
            rows = [np.frombuffer(base64.b64decode(row), "<f4") for row in rows]
        vectors = np.array(rows, dtype=np.float32)
        np.testing.assert_allclose(vectors, encoder.encode(TEXTS, normalize_embeddings=True), atol=1e-6, rtol=0)
    got = client.embeddings.create(model="tiny", input=TEXTS[:1], extra_body={"prompt_name": "query"})
    want = encoder.encode(TEXTS[:1], PROMPTS["query"], normalize_embeddings=True)
    np.testing.assert_allclose(np.array(got.data[0].embedding), want[0], atol=1e-6, rtol=0)


def test_a_configuration_named_by_the_request_crosses_to_the_model_process(served, client):
    from nosink import EncoderFromDecoder

    lm, tok = served.app.state.model, served.app.state.served.tokenizer
    early = EncoderFromDecoder.from_model(lm, "F* | B", tok, exit_layer=3)
    got = client.embeddings.create(model="early", input=TEXTS, encoding_format="float")
    vectors = np.array([row.embedding for row in got.data], dtype=np.float32)
    np.testing.assert_allclose(vectors, early.encode(TEXTS, normalize_embeddings=True), atol=1e-5, rtol=0)
    assert not np.allclose(vectors, served.app.state.encoder.encode(TEXTS, normalize_embeddings=True), atol=1e-3)


def test_chat_from_front_ends_equals_generate(served, client):
    lm, tok = served.app.state.model, served.app.state.served.tokenizer
    ids = tok.apply_chat_template(CHAT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = lm.generate(**ids, max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id)
    want = tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    got = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=6, temperature=0)
    assert got.choices[0].message.content == want and got.usage.completion_tokens == 6
    chunks = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=6, temperature=0, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want


def test_bad_requests_are_answered_by_the_front_ends(served, client):
    with pytest.raises(openai.NotFoundError) as err:
        client.embeddings.create(model="other", input=TEXTS)
    assert err.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model="tiny", input=["word " * 40])
    assert err.value.body["code"] == "context_length_exceeded"
    bad = openai.OpenAI(base_url=served.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.embeddings.create(model="tiny", input=TEXTS)


def test_each_front_end_takes_its_share_of_the_server_caps():
    from nosink.serve.processes import share_of

    limits = Limits(max_queue=1024, max_connections=512, max_connections_per_client=64)
    share = share_of(limits, 4)
    assert (share.max_queue, share.max_connections, share.max_connections_per_client) == (256, 128, 64)
    assert share_of(Limits(max_queue=3, max_connections=2), 4).max_connections == 1  # never 0: it could serve none
    assert share_of(limits, 1) == limits


def test_errors_cross_between_processes_whole():
    import pickle

    err = pickle.loads(pickle.dumps(ApiError(503, "busy", "server_overloaded", "input", kind="server_error")))
    got = (err.status, err.message, err.code, err.param, err.kind)
    assert got == (503, "busy", "server_overloaded", "input", "server_error")


def test_a_disconnected_stream_stops_its_generation_in_the_model_process(served):
    before = _health(served)["dropped"]
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=120)
    body = {"model": "tiny", "messages": CHAT, "max_tokens": 1000, "temperature": 0, "stream": True}
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Authorization": f"Bearer {KEY}"})
    response = conn.getresponse()
    assert response.status == 200
    lines = [response.readline() for _ in range(4)]  # the role chunk, a blank line, the first token's chunk
    assert "content" in json.loads(lines[2][6:])["choices"][0]["delta"]  # the generation has started
    conn.sock.shutdown(2)
    conn.close()
    deadline = time.monotonic() + 120  # a bound on waiting, not a timing assertion
    while _health(served)["dropped"] == before and time.monotonic() < deadline:
        time.sleep(0.05)
    after = _health(served)
    assert after["dropped"] == before + 1 and after["waiting"] == 0


def test_a_front_end_that_dies_is_replaced(served, client):
    ends = served.front_ends
    before = [p.pid for p in ends.processes]
    os.kill(before[0], signal.SIGKILL)
    deadline = time.monotonic() + 120  # a bound on waiting, not a timing assertion
    while ends.processes[0].pid == before[0] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ends.processes[0].pid != before[0]
    for _ in range(6):  # the kernel hands connections to whichever front-end accepts: all must answer
        got = client.embeddings.create(model="tiny", input=TEXTS[:1])
        assert len(got.data[0].embedding) == served.app.state.encoder.config.hidden_size
    assert _health(served)["waiting"] == 0


def test_one_unit_of_work_answers_each_front_end_in_one_message():
    # The model's process holds back what one batch (or chat step) answers a front-end and sends it as one message
    # when the engine next takes its inbox; the front-end settles each request from it, in order.
    import multiprocessing

    from nosink.models.texts import Tokenized
    from nosink.serve.jobs import EmbedJob
    from nosink.serve.processes import PipeInbox, RemoteEngine

    class Engine:
        def check(self, job):
            pass

        def cancel(self, job):
            job.cancelled = True

    inbox = PipeInbox(Engine())
    model_end, front_end = multiprocessing.Pipe()
    inbox.attach(model_end, lambda why: None)
    jobs = [EmbedJob(Tokenized(prefix_ids=[[1]], text_ids=[[5 + i]], suffix_ids=None)) for i in range(3)]
    remote = RemoteEngine(front_end, most=8)
    for i, job in enumerate(jobs):
        remote.jobs[i], remote.idents[id(job)] = job, i
        front_end.send(("job", i, job))
    taken = []
    deadline = time.monotonic() + 60  # a bound on waiting, not a timing assertion
    while len(taken) < 3 and time.monotonic() < deadline:
        taken += inbox.take(1.0)
    assert [job.tokens.text_ids for job in taken] == [[[5]], [[6]], [[7]]]
    for k, job in enumerate(taken):  # what a batch does: each request's vectors, one after another
        job.future.set_running_or_notify_cancel()
        job.future.set_result(np.full((1, 2), k, dtype=np.float32))
    assert not front_end.poll()  # held back until the unit of work is over ...
    inbox.take(0.0)
    message = front_end.recv()  # ... then one message for the three, their vectors one array
    assert message[0] == "stacked" and message[2][:2] == ([0, 1, 2], [1, 1, 1])
    assert message[2][2].tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    assert not front_end.poll()
    remote._handle(*message)
    assert [job.future.result()[0, 0] for job in jobs] == [0.0, 1.0, 2.0] and remote.jobs == {}
    inbox.peers[0].send(("health", 9, {"waiting": 0}))  # a lone message goes as it is, not wrapped
    inbox.flush()
    assert front_end.recv() == ("health", 9, {"waiting": 0})


def test_answers_of_one_unit_keep_every_request_apart():
    # Requests of several inputs, one that failed and a chat's event in one unit of work: the vectors of the
    # requests that have them travel as one array, the rest beside it, and each request gets exactly its own.
    import multiprocessing

    from nosink.models.texts import Tokenized
    from nosink.serve.jobs import ChatJob, EmbedJob, Reply, Sampling
    from nosink.serve.processes import PipeInbox, RemoteEngine

    class Engine:
        def check(self, job):
            pass

        def cancel(self, job):
            job.cancelled = True

    inbox = PipeInbox(Engine())
    model_end, front_end = multiprocessing.Pipe()
    inbox.attach(model_end, lambda why: None)
    sizes = [2, 1, 3, 1]
    jobs = [
        EmbedJob(Tokenized(prefix_ids=[[1]] * n, text_ids=[[5 + i]] * n, suffix_ids=None)) for i, n in enumerate(sizes)
    ]
    events = []
    chat = ChatJob([1, 5], Sampling(4, 0.0, 1.0, (), None), events.append)
    remote = RemoteEngine(front_end, most=8)
    for i, job in enumerate([*jobs, chat]):
        remote.jobs[i], remote.idents[id(job)] = job, i
        front_end.send(("job", i, job))
    taken = []
    deadline = time.monotonic() + 60  # a bound on waiting, not a timing assertion
    while len(taken) < 5 and time.monotonic() < deadline:
        taken += inbox.take(1.0)
    crossed = [job for job in taken if isinstance(job, EmbedJob)]
    assert [type(job.future) for job in crossed] == [Reply] * 4  # answered without a future's lock
    assert [job.lengths for job in crossed] == [[2] * n for n in sizes]  # counted by the front-end, sent along
    for k, job in enumerate(crossed):
        job.future.set_running_or_notify_cancel()
        if k == 2:
            job.future.set_exception(RuntimeError("no room"))
        else:
            job.future.set_result(np.arange(len(job) * 3, dtype=np.float32).reshape(len(job), 3) + 100 * k)
    next(job for job in taken if isinstance(job, ChatJob)).emit(("token", "hi"))
    inbox.take(0.0)
    message = front_end.recv()
    assert message[0] == "many" and sorted(m[0] for m in message[2]) == ["event", "failed", "stacked"]
    remote._handle(*message)
    for k, job in enumerate(jobs):
        if k == 2:
            with pytest.raises(RuntimeError, match="no room"):
                job.future.result()
        else:
            expected = np.arange(sizes[k] * 3, dtype=np.float32).reshape(sizes[k], 3) + 100 * k
            assert np.array_equal(job.future.result(), expected)
    assert events == [("token", "hi")] and list(remote.jobs) == [4]  # the chat goes on


def test_a_front_end_whose_pipe_ends_has_its_jobs_cancelled_after_its_last_messages():
    # Messages read in bulk: those sent just before the front-end went are still taken, then its jobs are cancelled.
    import multiprocessing

    from nosink.models.texts import Tokenized
    from nosink.serve.jobs import EmbedJob
    from nosink.serve.processes import PipeInbox

    cancelled = []

    class Engine:
        def check(self, job):
            pass

        def cancel(self, job):
            cancelled.append(job)

    inbox = PipeInbox(Engine())
    model_end, front_end = multiprocessing.Pipe()
    inbox.attach(model_end, lambda why: None)
    long = EmbedJob(Tokenized(prefix_ids=[[1]], text_ids=[list(range(200_000))], suffix_ids=None))  # > one read

    def send():  # in a thread: the long message fills the pipe until the inbox reads it
        front_end.send(("job", 0, long))
        front_end.send(("job", 1, EmbedJob(Tokenized(prefix_ids=[[1]], text_ids=[[7]], suffix_ids=None))))
        front_end.close()

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    taken = []
    deadline = time.monotonic() + 60  # a bound on waiting, not a timing assertion
    while (inbox.peers or not taken) and time.monotonic() < deadline:
        taken += inbox.take(1.0)
    sender.join(timeout=60)
    assert [len(job.tokens.text_ids[0]) for job in taken] == [200_000, 1]
    assert cancelled == taken and inbox.peers == []
