"""Front-end processes: the routes in spawned processes, the model in this one, through pipes.

The same tiny chat model as ``test_serve.py``, served with ``workers=2``: answers equal the one-process
server's, a front-end that dies is replaced, and the engine's work is freed when clients go.
"""

import base64
import http.client
import json
import os
import signal
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
