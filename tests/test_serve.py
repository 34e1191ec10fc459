"""The OpenAI-compatible server: chat and embeddings from one copy of the weights, called with the openai client.

A tiny random Llama (with its LM head) and the word-level test tokenizer, given a chat template, are served
by uvicorn in a thread on a free localhost port; the real SmolLM2 gets the same checks when it is cached.
"""

import ast
import base64
import http.client
import json
import logging
import math
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

import transformers as tf  # noqa: E402
from plain_http import KEY, request_json  # noqa: E402
from tiny import CHAT_TEMPLATE, tiny_chat_model  # noqa: E402

import nosink.serve  # noqa: E402
from nosink.models import texts as nosink_texts  # noqa: E402
from nosink.serve import ApiError, Limits, ServerThread, create_app  # noqa: E402
from nosink.serve.engine import Engine  # noqa: E402
from nosink.serve.jobs import EmbedJob  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

SPEC = "F* | M0B*2"
PROMPTS = {"query": "what is ", "doc": "i like "}
TEMPLATE = CHAT_TEMPLATE
LIMITS = Limits(max_inputs=4, max_tokens_per_text=12, max_body_bytes=4000, max_new_tokens=2000)
TEXTS = ["the cat sat on the mat", "a dog ran in the park", "paris is the capital of france"]
CHAT = [{"role": "user", "content": "the cat"}]


# With pytest-xdist this file's tests run on one worker (--dist loadgroup): its servers start once.
pytestmark = pytest.mark.xdist_group("test_serve")


@pytest.fixture(scope="module")
def server():
    lm, tok = tiny_chat_model()
    app = create_app(lm, tok, SPEC, name="tiny", prompts=PROMPTS, api_key=KEY, limits=LIMITS)
    with ServerThread(app) as running:
        running.app = app
        yield running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def _raw_text(server, path, body):
    """``(status, body text)`` of a POST: a stream's body is not one JSON document."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
    conn.request("POST", path, body=body, headers={"Authorization": f"Bearer {KEY}"})
    response = conn.getresponse()
    data = response.read().decode()
    conn.close()
    return response.status, data


def _encode(server, texts, instruction=None):
    return server.app.state.encoder.encode(texts, instruction, normalize_embeddings=True)


def _vectors(response):
    return np.array([d.embedding for d in sorted(response.data, key=lambda d: d.index)], dtype=np.float64)


# ---------------------------------------------------------------------------------------------- embeddings


def test_embeddings_over_http_equal_encode(server, client):
    want = _encode(server, TEXTS)
    floats = client.embeddings.create(model="tiny", input=TEXTS, encoding_format="float")
    assert [d.index for d in floats.data] == [0, 1, 2] and all(d.object == "embedding" for d in floats.data)
    np.testing.assert_allclose(_vectors(floats), want, atol=1e-6, rtol=0)
    # The openai client asks for base64 unless told otherwise, and decodes it.
    np.testing.assert_allclose(_vectors(client.embeddings.create(model="tiny", input=TEXTS)), want, atol=1e-6, rtol=0)
    raw = client.embeddings.create(model="tiny", input=TEXTS, encoding_format="base64")
    decoded = np.stack([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in raw.data])
    np.testing.assert_allclose(decoded, want, atol=1e-6, rtol=0)
    # usage counts what the model reads: the sink token and the text, as the library's pipeline tokenizes them
    tokens = nosink_texts.tokenize(server.app.state.encoder.tokenizer, TEXTS, sink=server.app.state.encoder.sink_ids())
    assert floats.usage.prompt_tokens == floats.usage.total_tokens == sum(tokens.lengths) == 3 * 7


def test_one_string_is_one_input(server, client):
    got = client.embeddings.create(model="tiny", input="a dog ran", encoding_format="float")
    assert len(got.data) == 1
    np.testing.assert_allclose(_vectors(got)[0], _encode(server, ["a dog ran"])[0], atol=1e-6, rtol=0)


def test_dimensions_truncate_and_renormalise(server, client):
    full = _encode(server, TEXTS)
    got = _vectors(client.embeddings.create(model="tiny", input=TEXTS, dimensions=8, encoding_format="float"))
    by_hand = full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True)
    assert got.shape == (3, 8)
    np.testing.assert_allclose(got, by_hand, atol=1e-6, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1, atol=1e-6)


def test_a_named_prompt_is_the_instruction(server, client):
    got = client.embeddings.create(model="tiny", input=TEXTS, extra_body={"prompt_name": "query"})
    np.testing.assert_allclose(_vectors(got), _encode(server, TEXTS, PROMPTS["query"]), atol=1e-6, rtol=0)
    assert np.abs(_vectors(got) - _encode(server, TEXTS)).max() > 1e-3  # the prompt changes the vectors
    # counted with each text, as encode() reads it: sink + "what is" + text
    assert got.usage.prompt_tokens == 3 * (7 + 2)


def test_encoder_and_chat_model_share_their_parameters(server):
    encoder, model = server.app.state.encoder, server.app.state.model
    ptrs = {p.data_ptr() for p in model.parameters()}
    assert {p.data_ptr() for p in encoder.parameters()} <= ptrs
    assert encoder.parts.embed_tokens.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert sum(p.numel() for p in encoder.parameters()) == sum(p.numel() for p in model.model.parameters())


# ---------------------------------------------------------------------------------------------- chat


def _greedy_reference(server, max_tokens):
    lm, tok = server.app.state.model, server.app.state.encoder.tokenizer
    prompt = tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        out = lm.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens, do_sample=False)
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True), ids.shape[1]


def test_chat_greedy_equals_generate_and_streams_the_same_text(server, client):
    want, prompt_tokens = _greedy_reference(server, 8)
    got = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=8, temperature=0)
    assert got.object == "chat.completion" and got.choices[0].message.role == "assistant"
    assert got.choices[0].message.content == want and want
    assert got.choices[0].finish_reason == "length"
    assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (prompt_tokens, 8)
    stream = client.chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=8, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].usage.completion_tokens == 8 and not chunks[-1].choices
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 2  # really streamed, token by token


def test_stop_strings_end_the_answer_before_them(server, client):
    full, _ = _greedy_reference(server, 8)
    stop = full.split()[2]
    want = full[: full.find(stop)]
    got = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=8, temperature=0, stop=[stop])
    assert got.choices[0].message.content == want and got.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=8, temperature=0, stop=stop, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == want


def test_seeded_sampling_repeats_and_top_p_narrows(server, client):
    def ask(**kw):
        return (
            client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=12, **kw).choices[0].message.content
        )

    assert ask(temperature=1.5, seed=7) == ask(temperature=1.5, seed=7)
    assert len({ask(temperature=1.5, seed=s) for s in range(4)}) > 1
    greedy = ask(temperature=0)
    assert ask(temperature=1.5, top_p=1e-6, seed=3) == greedy  # only the most likely token survives


def test_sampling_is_safe_across_the_documented_ranges(server, client):
    def ask(**kw):
        return (
            client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=6, **kw).choices[0].message.content
        )

    greedy = ask(temperature=0)
    # At the small ends of the ranges sampling is greedy, not inf/NaN (a 500 before).
    for tiny in (1e-300, 5e-324):
        assert ask(temperature=tiny, seed=1) == greedy
        assert ask(temperature=2, top_p=tiny, seed=1) == greedy


@settings(max_examples=300, deadline=None)
@given(
    logits=st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False) | st.just(-math.inf), min_size=1),
    temperature=st.just(0.0) | st.floats(0, 2, exclude_min=True),
    top_p=st.floats(0, 1, exclude_min=True),
    seed=st.integers(0, 2**63 - 1),
)
@example(logits=[0.0, 7.31898187916852e-42], temperature=1.0, top_p=3e-219, seed=0)  # a tie in float64
def test_sample_gives_a_possible_token_for_any_temperature_and_top_p(logits, temperature, top_p, seed):
    row = torch.tensor(logits, dtype=torch.float32)
    assume(row.max() > -math.inf)  # a model gives at least one finite logit
    sampling = nosink.serve.jobs.Sampling(max_tokens=1, temperature=temperature, top_p=top_p, stop=(), seed=seed)
    token = nosink.serve.generation.sample(row, sampling, torch.Generator().manual_seed(seed))
    assert 0 <= token < len(logits) and row[token] > -math.inf  # a token that can be sampled at all
    if temperature < 1e-100 or top_p < 1e-100:  # so narrow that only a most likely token is left
        # most likely in float64 after the temperature: logits 0 and 7e-42 at T = 1 are equally likely
        gap = float(row.max()) - float(row[token])
        assert gap == 0 or (temperature > 0 and math.exp(-gap / temperature) == 1.0), (gap, temperature)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), vocab=st.integers(1, 9), n=st.integers(1, 6))
def test_sampling_a_batch_gives_each_row_the_token_it_gets_alone(data, vocab, n):
    # The server samples all chats of a step at once: a row's token must not depend on the rows beside it.
    finite = st.floats(-30, 30, width=32)
    logits = torch.tensor(data.draw(st.lists(st.lists(finite, min_size=vocab, max_size=vocab), min_size=n, max_size=n)))
    temperature, top_p = st.just(0.0) | st.floats(0.01, 2), st.floats(0.05, 1)
    samplings = [nosink.serve.jobs.Sampling(1, data.draw(temperature), data.draw(top_p), (), 0) for _ in range(n)]
    seeds = data.draw(st.lists(st.integers(0, 2**32), min_size=n, max_size=n))
    together = nosink.serve.generation.sample_rows(logits, samplings, [torch.Generator().manual_seed(s) for s in seeds])
    for row, sampling, seed, token in zip(logits, samplings, seeds, together, strict=True):
        assert token == nosink.serve.generation.sample(row, sampling, torch.Generator().manual_seed(seed))


# Every JSON value a client can send in a field: huge integers, floats (NaN, Infinity, 1e-300), bools, ...
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(-(10**400), 10**400)
    | st.floats()
    | st.sampled_from([1e-300, 5e-324, 10.0**300, 10**400, 2**63, -(2**63)])
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=5,
)
CHAT_FIELDS = ["temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "n", "stop", "stream"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=st.dictionaries(st.sampled_from(CHAT_FIELDS), JSON_VALUES, max_size=3))
@example(fields={"temperature": 10**400})
@example(fields={"temperature": 1e-300, "top_p": 5e-324})
def test_any_value_of_a_chat_field_is_served_or_refused_with_400(server, fields):
    body = {**OK_CHAT, "max_tokens": 1, **fields}
    if isinstance(body.get("max_tokens"), int) and not isinstance(body["max_tokens"], bool):
        body["max_tokens"] = min(max(body["max_tokens"], -1), 3)  # keep generations short; 0 and -1 still refused
    status, got = _raw_text(server, "/v1/chat/completions", json.dumps(body).encode())
    assert status in (200, 400), (status, got[:300])
    if status == 400:
        assert json.loads(got)["error"]["type"] == "invalid_request_error"


def test_models_and_health(server, client):
    (card,) = client.models.list().data
    assert card.id == "tiny" and card.owned_by == "nosink"
    assert card.model_extra["spec"] == SPEC and card.model_extra["prompts"] == ["doc", "query"]
    assert card.model_extra["dimensions"] == 32 and card.model_extra["chat"] is True
    status, body = request_json(server, "GET", "/health", headers={"Authorization": None})
    assert status == 200 and body["status"] == "ok"


# ---------------------------------------------------------------------------------------------- bad requests

OK_EMBED = {"model": "tiny", "input": ["the cat"]}
OK_CHAT = {"model": "tiny", "messages": CHAT, "max_tokens": 2}

# (name, path, body (dict or raw bytes), extra headers, status, error code)
# fmt: off
BAD = [
    ("malformed json", "/v1/embeddings", b'{"model": "tiny", "input": [', {}, 400, "invalid_json"),
    ("not utf-8", "/v1/embeddings", b'{"model": "\xff"}', {}, 400, "invalid_json"),
    ("not an object", "/v1/embeddings", b"[1, 2]", {}, 400, "invalid_json"),
    ("nested too deep", "/v1/embeddings", b"[" * 1900 + b"]" * 1900, {}, 400, "invalid_json"),
    ("input a number", "/v1/embeddings", {**OK_EMBED, "input": 3.5}, {}, 400, "invalid_type"),
    ("input missing", "/v1/embeddings", {"model": "tiny"}, {}, 400, "missing_input"),
    ("input item a dict", "/v1/embeddings", {**OK_EMBED, "input": ["a", {"x": 1}]}, {}, 400, "invalid_type"),
    ("token ids", "/v1/embeddings", {**OK_EMBED, "input": [[5, 6, 7]]}, {}, 400, "unsupported_input"),
    ("token id list", "/v1/embeddings", {**OK_EMBED, "input": [5, 6, 7]}, {}, 400, "unsupported_input"),
    ("empty list", "/v1/embeddings", {**OK_EMBED, "input": []}, {}, 400, "empty_input"),
    ("empty string", "/v1/embeddings", {**OK_EMBED, "input": ["the cat", ""]}, {}, 400, "empty_input"),
    ("unknown model", "/v1/embeddings", {**OK_EMBED, "model": "gpt-4"}, {}, 404, "model_not_found"),
    ("model missing", "/v1/embeddings", {"input": "a"}, {}, 400, "invalid_type"),
    ("model a number", "/v1/embeddings", {**OK_EMBED, "model": 3}, {}, 400, "invalid_type"),
    ("too many inputs", "/v1/embeddings", {**OK_EMBED, "input": ["a"] * 5}, {}, 413, "too_many_inputs"),
    ("text too long", "/v1/embeddings", {**OK_EMBED, "input": ["a", "the cat " * 6]}, {}, 400, "context_length_exceeded"),  # noqa: E501
    ("prompt makes it too long", "/v1/embeddings", {**OK_EMBED, "input": ["the cat " * 5], "prompt_name": "query"}, {}, 400, "context_length_exceeded"),  # noqa: E501
    ("body too large", "/v1/embeddings", {**OK_EMBED, "input": ["x" * 5000]}, {}, 413, "request_too_large"),
    ("dimensions 0", "/v1/embeddings", {**OK_EMBED, "dimensions": 0}, {}, 400, "invalid_value"),
    ("dimensions too large", "/v1/embeddings", {**OK_EMBED, "dimensions": 33}, {}, 400, "invalid_value"),
    ("dimensions a string", "/v1/embeddings", {**OK_EMBED, "dimensions": "8"}, {}, 400, "invalid_type"),
    ("dimensions a bool", "/v1/embeddings", {**OK_EMBED, "dimensions": True}, {}, 400, "invalid_type"),
    ("dimensions a float", "/v1/embeddings", {**OK_EMBED, "dimensions": 8.0}, {}, 400, "invalid_type"),
    ("encoding_format", "/v1/embeddings", {**OK_EMBED, "encoding_format": "hex"}, {}, 400, "invalid_value"),
    ("unknown prompt", "/v1/embeddings", {**OK_EMBED, "prompt_name": "passage"}, {}, 400, "unknown_prompt"),
    ("no api key", "/v1/embeddings", OK_EMBED, {"Authorization": None}, 401, "invalid_api_key"),
    ("wrong api key", "/v1/embeddings", OK_EMBED, {"Authorization": "Bearer nope"}, 401, "invalid_api_key"),
    ("key without bearer", "/v1/chat/completions", OK_CHAT, {"Authorization": KEY}, 401, "invalid_api_key"),
    ("unknown route", "/v1/completions", OK_CHAT, {}, 404, "not_found"),
    ("wrong method", "/v1/embeddings", b"", {"method": "GET"}, 405, "method_not_allowed"),
    ("chat: no messages", "/v1/chat/completions", {**OK_CHAT, "messages": []}, {}, 400, "invalid_messages"),
    ("chat: bad role", "/v1/chat/completions", {**OK_CHAT, "messages": [{"role": "root", "content": "a"}]}, {}, 400, "invalid_value"),  # noqa: E501
    ("chat: content a number", "/v1/chat/completions", {**OK_CHAT, "messages": [{"role": "user", "content": 1}]}, {}, 400, "invalid_type"),  # noqa: E501
    ("chat: image part", "/v1/chat/completions", {**OK_CHAT, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, {}, 400, "unsupported_content"),  # noqa: E501
    ("chat: unknown model", "/v1/chat/completions", {**OK_CHAT, "model": "tiny2"}, {}, 404, "model_not_found"),
    ("chat: temperature < 0", "/v1/chat/completions", {**OK_CHAT, "temperature": -1}, {}, 400, "invalid_value"),
    ("chat: temperature NaN", "/v1/chat/completions", b'{"model": "tiny", "messages": [{"role": "user", "content": "a"}], "temperature": NaN}', {}, 400, "invalid_value"),  # noqa: E501
    ("chat: temperature a string", "/v1/chat/completions", {**OK_CHAT, "temperature": "hot"}, {}, 400, "invalid_type"),
    ("chat: top_p 0", "/v1/chat/completions", {**OK_CHAT, "top_p": 0}, {}, 400, "invalid_value"),
    ("chat: max_tokens 0", "/v1/chat/completions", {**OK_CHAT, "max_tokens": 0}, {}, 400, "invalid_value"),
    ("chat: max_tokens over the limit", "/v1/chat/completions", {**OK_CHAT, "max_tokens": 2001}, {}, 400, "invalid_value"),  # noqa: E501
    ("chat: max_tokens past the positions", "/v1/chat/completions", {**OK_CHAT, "max_tokens": 2000, "messages": [{"role": "user", "content": "a " * 100}]}, {}, 400, "context_length_exceeded"),  # noqa: E501
    ("chat: seed too large", "/v1/chat/completions", {**OK_CHAT, "seed": 2**70}, {}, 400, "invalid_value"),
    ("chat: seed negative", "/v1/chat/completions", {**OK_CHAT, "seed": -1}, {}, 400, "invalid_value"),
    ("chat: temperature infinite", "/v1/chat/completions", b'{"model": "tiny", "messages": [{"role": "user", "content": "a"}], "temperature": 1e999}', {}, 400, "invalid_value"),  # noqa: E501
    ("chat: n 2", "/v1/chat/completions", {**OK_CHAT, "n": 2}, {}, 400, "unsupported_value"),
    ("chat: temperature 400 digits", "/v1/chat/completions", {**OK_CHAT, "temperature": 10**400}, {}, 400, "invalid_value"),  # noqa: E501
    ("chat: top_p 400 digits", "/v1/chat/completions", {**OK_CHAT, "top_p": -(10**400)}, {}, 400, "invalid_value"),
    ("chat: top_p a bool", "/v1/chat/completions", {**OK_CHAT, "top_p": True}, {}, 400, "invalid_type"),
    ("chat: max_tokens 400 digits", "/v1/chat/completions", {**OK_CHAT, "max_tokens": 10**400}, {}, 400, "invalid_value"),  # noqa: E501
    ("chat: seed Infinity", "/v1/chat/completions", b'{"model": "tiny", "messages": [{"role": "user", "content": "a"}], "seed": Infinity}', {}, 400, "invalid_type"),  # noqa: E501
    ("dimensions 400 digits", "/v1/embeddings", {**OK_EMBED, "dimensions": 10**400}, {}, 400, "invalid_value"),
    ("chat: five stops", "/v1/chat/completions", {**OK_CHAT, "stop": list("abcde")}, {}, 400, "invalid_value"),
    ("chat: empty stop", "/v1/chat/completions", {**OK_CHAT, "stop": ""}, {}, 400, "invalid_value"),
    ("chat: stream a string", "/v1/chat/completions", {**OK_CHAT, "stream": "yes"}, {}, 400, "invalid_type"),
    ("chat: tools", "/v1/chat/completions", {**OK_CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]}, {}, 400, "unsupported_parameter"),  # noqa: E501
    ("chat: tool_choice", "/v1/chat/completions", {**OK_CHAT, "tool_choice": "auto"}, {}, 400, "unsupported_parameter"),
    ("chat: functions", "/v1/chat/completions", {**OK_CHAT, "functions": [{"name": "f"}]}, {}, 400, "unsupported_parameter"),  # noqa: E501
    ("chat: function_call", "/v1/chat/completions", {**OK_CHAT, "function_call": "auto"}, {}, 400, "unsupported_parameter"),  # noqa: E501
    ("chat: logprobs", "/v1/chat/completions", {**OK_CHAT, "logprobs": True}, {}, 400, "unsupported_parameter"),
    ("chat: top_logprobs", "/v1/chat/completions", {**OK_CHAT, "top_logprobs": 3}, {}, 400, "unsupported_parameter"),
    ("chat: logit_bias", "/v1/chat/completions", {**OK_CHAT, "logit_bias": {"5": 10}}, {}, 400, "unsupported_parameter"),  # noqa: E501
    ("chat: presence_penalty", "/v1/chat/completions", {**OK_CHAT, "presence_penalty": 0.5}, {}, 400, "unsupported_parameter"),  # noqa: E501
    ("chat: json response_format", "/v1/chat/completions", {**OK_CHAT, "response_format": {"type": "json_object"}}, {}, 400, "unsupported_parameter"),  # noqa: E501
    ("chat: audio", "/v1/chat/completions", {**OK_CHAT, "modalities": ["text", "audio"]}, {}, 400, "unsupported_parameter"),  # noqa: E501
]
# fmt: on


@pytest.mark.parametrize(("name", "path", "body", "headers", "status", "code"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_request_gets_its_status_and_error_body_and_the_server_goes_on(
    server, client, name, path, body, headers, status, code
):
    headers = dict(headers)
    got_status, got = request_json(server, headers.pop("method", "POST"), path, body, headers)
    assert got_status == status, got
    assert set(got) == {"error"} and got["error"]["code"] == code
    assert got["error"]["type"] == "invalid_request_error"
    assert isinstance(got["error"]["message"], str) and got["error"]["message"]
    # ... and the server still answers correctly.
    ok = client.embeddings.create(model="tiny", input=["the cat"], encoding_format="float")
    np.testing.assert_allclose(_vectors(ok), _encode(server, ["the cat"]), atol=1e-6, rtol=0)


def _codes_sent() -> set[tuple[str, str]]:
    """``(status, code)`` of every error that the nosink/serve package answers, read from its source."""
    sources = [ast.parse(path.read_text()) for path in sorted(Path(nosink.serve.__file__).parent.glob("*.py"))]
    sent, framework = set(), []
    for node in (node for source in sources for node in ast.walk(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ApiError":
            status, code = node.args[0], node.args[2] if len(node.args) > 2 else None
            if isinstance(status, ast.Constant) and isinstance(code, ast.Constant):
                sent.add((str(status.value), code.value))
            else:
                framework.append(ast.unparse(node))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "_HTTP_ERRORS.get":
            sent.add(("other", node.args[1].value))  # the code of any other status of the web framework
    # The one error whose status and code are not written out: the web framework's, named by _HTTP_ERRORS.
    assert len(framework) == 1 and "err.status_code" in framework[0], framework
    sent |= {(str(status), code) for status, code in nosink.serve.routes._HTTP_ERRORS.items()}
    return sent


def test_the_guide_lists_every_error_the_server_sends():
    page = (ROOT / "docs" / "guides" / "serving.md").read_text()
    table = page[page.index("| status | code | when |") :].split("\n\n")[0].splitlines()[2:]
    listed = set()
    for row in table:
        status, codes = [cell.strip() for cell in row.strip("|").split("|")][:2]
        listed |= {(status, code) for code in re.findall(r"`(\w+)`", codes)}
    sent = _codes_sent()
    assert {"499", "405", "500"} <= {status for status, _ in sent}  # the reading of the source finds them
    assert listed == sent, f"not in the guide: {sorted(sent - listed)}; not sent: {sorted(listed - sent)}"


@pytest.mark.parametrize(
    ("path", "body", "named", "param"),
    [
        ("/v1/embeddings", {**OK_EMBED, "input": ["the cat", "a\ud800b"]}, "input[1]", "input"),
        ("/v1/embeddings", {**OK_EMBED, "input": "\udfff"}, "input", "input"),
        ("/v1/embeddings", {**OK_EMBED, "input": ["x\udc80"], "prompt_name": "query"}, "input[0]", "input"),
        (
            "/v1/chat/completions",
            {**OK_CHAT, "messages": [*CHAT, {"role": "user", "content": "\ud83d"}]},
            "messages[1].content",
            "messages[1]",
        ),
        (
            "/v1/chat/completions",
            {**OK_CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": "a\ud800"}]}]},
            "messages[0].content[0].text",
            "messages[0]",
        ),
        ("/v1/chat/completions", {**OK_CHAT, "stop": ["the", "\ud800"]}, "stop[1]", "stop"),
        ("/v1/chat/completions", {**OK_CHAT, "stop": "\ud800"}, "stop", "stop"),
    ],
    ids=["input item", "input string", "input with a prompt", "message", "content part", "stop item", "stop string"],
)
def test_a_lone_surrogate_is_a_400_naming_the_text(server, path, body, named, param):
    # json.dumps writes "\ud800" escapes, which the server's json.loads decodes to lone surrogates.
    status, got = request_json(server, "POST", path, body)
    assert status == 400, got
    error = got["error"]
    assert (error["code"], error["param"]) == ("invalid_input", param)
    assert error["message"].startswith(f"{named} holds a lone surrogate (U+"), error["message"]


def test_unsupported_chat_fields_are_refused_by_name_and_their_empty_values_served(server):
    status, got = request_json(server, "POST", "/v1/chat/completions", {**OK_CHAT, "logprobs": True, "top_logprobs": 2})
    assert status == 400 and got["error"]["param"] == "logprobs" and "'logprobs' is not supported" in str(got)
    # Values that ask for nothing, and fields that change no answer (user, metadata), are served.
    nothing = {"tools": [], "tool_choice": "none", "logprobs": False, "top_logprobs": 0, "presence_penalty": 0.0}
    more = {"response_format": {"type": "text"}, "modalities": ["text"], "user": "u1", "metadata": {"a": "b"}}
    status, got = request_json(server, "POST", "/v1/chat/completions", {**OK_CHAT, **nothing, **more})
    assert status == 200 and got["choices"][0]["finish_reason"] in ("stop", "length"), got


def test_messages_quote_client_input_without_control_characters(server):
    status, got = request_json(server, "POST", "/v1/embeddings", {**OK_EMBED, "model": "x\x1b]0;pwned\x07"})
    assert status == 404
    message = got["error"]["message"]
    assert "pwned" in message and "\x1b" not in message and "\x07" not in message and "\\x1b" in message


def test_the_openai_client_sees_the_errors_as_openai_errors(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.embeddings.create(model="nope", input="a")
    assert err.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model="tiny", input="a", dimensions=1000)
    assert err.value.param == "dimensions"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=client.base_url, api_key="wrong", max_retries=0).models.list()


# ---------------------------------------------------------------------------------------------- load and isolation


def test_concurrent_clients_each_get_their_own_result(server, client):
    sets = [TEXTS[:1], TEXTS[1:], TEXTS, ["we love good food", "the river bank"], ["i hate bad food"]]
    want = {i: _encode(server, s) for i, s in enumerate(sets)}
    want_prompt = {i: _encode(server, s, PROMPTS["doc"]) for i, s in enumerate(sets)}
    chat_want, _ = _greedy_reference(server, 6)
    results, errors = {}, []

    def embed(k):
        try:
            i = k % len(sets)
            kw = {"extra_body": {"prompt_name": "doc"}} if k % 3 == 0 else {}
            results[k] = (i, bool(kw), _vectors(client.embeddings.create(model="tiny", input=sets[i], **kw)))
        except Exception as err:  # surfaced below, with the others
            errors.append(err)

    def chat(k):
        try:
            kw = {"stream": True} if k % 2 else {}
            got = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=6, temperature=0, **kw)
            text = (
                "".join(c.choices[0].delta.content or "" for c in got if c.choices)
                if kw
                else got.choices[0].message.content
            )
            results[k] = ("chat", text)
        except Exception as err:
            errors.append(err)

    threads = [threading.Thread(target=chat if k % 4 == 3 else embed, args=(k,)) for k in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 24
    for result in results.values():
        if result[0] == "chat":
            assert result[1] == chat_want
        else:
            i, prompted, got = result
            # batch companions change float32 rounding only (encode() promises about 1e-5)
            np.testing.assert_allclose(got, (want_prompt if prompted else want)[i], atol=1e-5, rtol=0)


def _worker(server, **limits):
    app = server.app
    return Engine(app.state.encoder, None, app.state.encoder.tokenizer, Limits(**limits))


def _job(server, texts, instruction=None):
    """An embedding request as the HTTP handler hands it to the worker: its inputs, tokenized once."""
    encoder = server.app.state.encoder
    return EmbedJob(nosink_texts.tokenize(encoder.tokenizer, texts, instruction, sink=encoder.sink_ids()))


def test_an_embedding_request_is_tokenized_once(server, client, monkeypatch):
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[1])
        return tokenize(*args, **kwargs)

    tokenize = nosink_texts.tokenize
    monkeypatch.setattr(nosink_texts, "tokenize", counted)
    got = client.embeddings.create(model="tiny", input=TEXTS, encoding_format="float")
    assert calls == [TEXTS]  # the handler's tokens (counted for the limit) are the ones the worker runs
    monkeypatch.undo()
    np.testing.assert_allclose(_vectors(got), _encode(server, TEXTS), atol=1e-6, rtol=0)


def test_waiting_embedding_requests_are_encoded_together_and_split_back(server):
    worker = _worker(server, batch_texts=64, batch_wait_ms=0)
    jobs = [_job(server, ["the cat sat"]), _job(server, TEXTS), _job(server, ["a dog"], PROMPTS["query"])]
    gone = _job(server, ["we love food"])
    gone.cancelled = True  # its client disconnected while it waited
    for job in [*jobs[:2], gone, jobs[2]]:
        worker.inbox.put(job)
    assert worker._take()
    worker.batches.step()
    assert not worker.batches.chunks
    # one forward pass for all waiting requests, with or without a prompt; the cancelled one is never computed
    assert {k: v for k, v in worker.stats.items() if not k.endswith("_ms")} == {
        "embedding_batches": 1,
        "embedded_texts": 5,
        "chat_tokens": 0,
        "dropped": 1,
        "embedding_requests": 3,
        "chat_steps": 0,
        "ridden_steps": 0,
    }
    assert not gone.future.done()
    np.testing.assert_allclose(jobs[0].future.result(), _encode(server, ["the cat sat"]), atol=1e-5, rtol=0)
    np.testing.assert_allclose(jobs[1].future.result(), _encode(server, TEXTS), atol=1e-5, rtol=0)
    np.testing.assert_allclose(jobs[2].future.result(), _encode(server, ["a dog"], PROMPTS["query"]), atol=1e-6)


def test_a_gathering_runs_once_as_many_requests_wait_as_the_last_batch_answered(server):
    worker = _worker(server, batch_size=8, batch_wait_ms=60_000)  # the window alone would wait a minute
    first = [_job(server, ["the cat sat"]), _job(server, ["a dog"])]
    for job in first:
        worker.batches.add(job)
    assert not worker.batches.due()  # no batch yet: the first gathering waits for companions
    worker.batches.deadline = 0.0  # (its window over)
    worker.batches.step()
    assert all(job.future.done() for job in first) and worker.batches.answered == 2
    worker.batches.settle = float("inf")  # neither timer lets the next gathering go
    worker.batches.add(_job(server, ["we love food"]))
    assert not worker.batches.due()  # one of the two clients is back
    worker.batches.add(_job(server, ["the park"]))
    assert worker.batches.due()  # both are: nothing more to wait for


def test_health_counts_each_answered_request_and_its_time_in_the_engine(server):
    worker = _worker(server, batch_wait_ms=0)
    jobs = [_job(server, ["the cat sat"]), _job(server, TEXTS)]
    for job in jobs:
        worker.inbox.put(job)
    worker._take()
    time.sleep(0.05)  # both wait 50 ms in the engine before their batch runs
    worker.batches.step()
    health = worker.health()
    assert all(job.future.done() for job in jobs)
    assert health["embedding_requests"] == 2 and health["embedding_request_ms"] >= 2 * 50
    assert health["graphs"] == 0 and health["graph_replays"] == 0  # CUDA graphs only run on a GPU
    assert health["chat_graphs"] == health["chat_graph_captures"] == 0


def test_a_batch_is_at_most_batch_texts_and_the_rest_waits_its_turn(server):
    worker = _worker(server, batch_texts=3, batch_size=3, batch_wait_ms=0)
    texts = [TEXTS[:2], TEXTS[:2], TEXTS]
    jobs = [_job(server, t) for t in texts]
    for job in jobs:
        worker.inbox.put(job)
    worker._take()
    worker.batches.step()
    assert [j.future.done() for j in jobs] == [True, False, False]
    worker.batches.step()
    worker.batches.step()
    assert all(j.future.done() for j in jobs) and worker.stats["embedding_batches"] == 3
    for job, t in zip(jobs, texts, strict=True):
        np.testing.assert_allclose(job.future.result(), _encode(server, t), atol=1e-5, rtol=0)


def test_gathered_texts_run_in_length_sorted_batches_and_a_gone_request_stops_between_them(server):
    worker = _worker(server, batch_size=2, batch_wait_ms=0)
    texts = {"short": ["a", "the dog"], "long": ["the cat sat on the mat", "we like food"]}
    short, long = _job(server, texts["short"]), _job(server, texts["long"])
    gone = _job(server, ["i", "you", "we", "the park"])
    for job in (short, long, gone):
        worker.inbox.put(job)
    worker._take()
    worker.batches.step()  # the two longest texts first: here both of `long`
    assert worker.stats["embedded_texts"] == 2 and long.future.done() and not short.future.done()
    gone.cancelled = True  # its client disconnects after its requests were gathered
    while worker.batches.chunks:
        worker.batches.step()
    # then by tokens (ties in arrival order) [the dog, the park], [a, i], [you, we]: without `gone`,
    # 2 batches of one text of `short`
    assert {k: v for k, v in worker.stats.items() if not k.endswith("_ms")} == {
        "embedding_batches": 3,
        "embedded_texts": 4,
        "chat_tokens": 0,
        "dropped": 0,
        "embedding_requests": 2,
        "chat_steps": 0,
        "ridden_steps": 0,
    }
    assert not gone.future.done()  # never finished: none of its texts was computed
    for job, t in ((short, texts["short"]), (long, texts["long"])):
        np.testing.assert_allclose(job.future.result(), _encode(server, t), atol=1e-5, rtol=0)


def test_a_failing_request_does_not_fail_its_batch_companions(server):
    worker = _worker(server, batch_wait_ms=0)
    good = _job(server, ["the cat"])
    bad = EmbedJob(nosink_texts.Tokenized(prefix_ids=[[1]], text_ids=[[10**6]]))  # an id the model does not have
    worker.inbox.put(good)
    worker.inbox.put(bad)
    worker._take()
    worker.batches.step()
    np.testing.assert_allclose(good.future.result(), _encode(server, ["the cat"]), atol=1e-6)
    with pytest.raises(ValueError, match="vocabulary"):
        bad.future.result()


def test_a_disconnected_stream_stops_its_generation(server):
    def health():
        return request_json(server, "GET", "/health")[1]

    before = health()["dropped"]
    conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
    body = {**OK_CHAT, "max_tokens": 2000, "temperature": 0, "stream": True}
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Authorization": f"Bearer {KEY}"})
    response = conn.getresponse()
    assert response.status == 200
    lines = [response.readline() for _ in range(4)]  # the role chunk, a blank line, then the first token's chunk
    assert lines[2].startswith(b"data: ") and "content" in json.loads(lines[2][6:])["choices"][0]["delta"]  # started
    conn.sock.shutdown(2)
    conn.close()
    deadline = time.monotonic() + 120  # a bound on waiting, not a timing assertion
    after = health()
    # /health reads the queue and the counters one after the other, while the engine updates them: wait for both
    while not (after["dropped"] == before + 1 and after["waiting"] == 0) and time.monotonic() < deadline:
        time.sleep(0.05)
        after = health()
    assert after["dropped"] == before + 1 and after["waiting"] == 0


# ------------------------------------------------ setup (the command line's: test_serve_cli.py)


def test_embeddings_only_server_refuses_chat(server):
    lm, tok = tiny_chat_model()
    app = create_app(lm.model, tok, SPEC, name="tiny", chat=False)  # a bare decoder: no LM head, no chat
    with ServerThread(app) as running:
        running.app = app
        status, got = request_json(running, "POST", "/v1/chat/completions", OK_CHAT)
        assert status == 404 and got["error"]["code"] == "chat_disabled"
        c = openai.OpenAI(base_url=running.url + "/v1", api_key="-", max_retries=0)  # no key needed here
        np.testing.assert_allclose(_vectors(c.embeddings.create(model="tiny", input=TEXTS)), _encode(running, TEXTS))
    with pytest.raises(ValueError, match="causal LM with its head"):
        create_app(lm.model, tok, SPEC)


def test_a_server_thread_starts_its_engine_outside_its_timeout_and_an_engine_never_started_stops(monkeypatch):
    # The engine's warm-up (minutes with chat_compile on a GPU) is not the server's start: a slow one is waited for.
    lm, tok = tiny_chat_model()
    app = create_app(lm.model, tok, SPEC, name="tiny", chat=False)
    warm = app.state.encoder.warm_up
    monkeypatch.setattr(app.state.encoder, "warm_up", lambda: (time.sleep(1.5), warm()))
    started, running = time.monotonic(), ServerThread(app)
    try:
        running.start(timeout=1.0)
        assert time.monotonic() - started >= 1.5
        status, got = request_json(running, "POST", "/v1/embeddings", {"model": "tiny", "input": TEXTS[:2]})
        assert status == 200 and len(got["data"]) == 2
    finally:
        running.stop()
    unused = create_app(lm.model, tok, SPEC, name="tiny", chat=False).state.engine
    unused.stop()  # its thread never started: nothing to wait for, and no error
    assert unused.thread.ident is None


def test_create_app_refuses_what_cannot_serve():
    lm, tok = tiny_chat_model()
    tok.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        create_app(lm, tok, SPEC)
    create_app(lm, tok, SPEC, chat=False)  # embeddings need no template
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        create_app(lm, None, SPEC, chat=False)
    with pytest.raises(ValueError, match="api_key must be a non-empty string"):
        create_app(lm, tok, SPEC, chat=False, api_key=" ")
    for unmatchable in (" key", "key\n", "ke\ty", "clé"):  # no client could ever send it: refused, not a locked server
        with pytest.raises(ValueError, match="which no Authorization header can carry"):
            create_app(lm, tok, SPEC, chat=False, api_key=unmatchable)
    with pytest.raises(ValueError, match="prompts must map names to strings"):
        create_app(lm, tok, SPEC, chat=False, prompts={"q": None})
    with pytest.raises(ValueError, match=r"Limits\.batch_texts must be a positive integer"):
        Limits(batch_texts=0)
    for bad in (0, -1, math.inf, math.nan):
        with pytest.raises(ValueError, match=r"Limits\.header_timeout_s must be a (positive|non-negative) number"):
            Limits(header_timeout_s=bad)
    with pytest.raises(ValueError, match=r"Limits\.max_connections_per_client must be a positive integer"):
        Limits(max_connections_per_client=0.5)
    for bad in (0, 1, 1.5, -0.1, math.nan):
        with pytest.raises(ValueError, match=r"Limits\.chat_share must be (above 0 and below 1|a non-negative)"):
            Limits(chat_share=bad)
    assert Limits(chat_share=0.01).chat_share == 0.01
    assert ApiError(400, "m", "c").body() == {
        "error": {"message": "m", "type": "invalid_request_error", "param": None, "code": "c"}
    }


# ---------------------------------------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def smollm2_server(smollm2_path):
    from nosink.serve import load_model

    model, tok = load_model(smollm2_path, dtype="float32")
    app = create_app(model, tok, "F* | M0B*10", name="smollm2", prompts={"sts": "Instruct: Retrieve semantically similar text.\nQuery: "})  # fmt: skip  # noqa: E501
    with ServerThread(app) as running:
        running.app = app
        yield running


def test_real_smollm2_serves_both_from_one_copy(smollm2_server):
    server = smollm2_server
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="-", max_retries=0, timeout=300)
    texts = ["A man is playing a guitar.", "Someone is strumming a guitar.", "The stock market fell sharply today."]
    got = _vectors(client.embeddings.create(model="smollm2", input=texts, extra_body={"prompt_name": "sts"}))
    want = _encode(server, texts, "Instruct: Retrieve semantically similar text.\nQuery: ")
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
    assert got[0] @ got[1] > got[0] @ got[2]  # the paraphrase is the closer one
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    answer = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=12, temperature=0)
    tok, lm = server.app.state.encoder.tokenizer, server.app.state.model
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        out = lm.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    assert answer.choices[0].message.content == tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer.choices[0].message.content
    encoder = server.app.state.encoder
    assert encoder.parts.embed_tokens.weight.data_ptr() == lm.lm_head.weight.data_ptr()  # tied, and shared
    assert {p.data_ptr() for p in encoder.parameters()} <= {p.data_ptr() for p in lm.parameters()}


def test_a_request_whose_client_went_away_is_forgotten():
    import asyncio

    from nosink.serve.requests import until_done as _until_done

    class Gone:  # what uvicorn's receive() says once the client has closed the connection
        async def receive(self):
            return {"type": "http.disconnect"}

    forgotten = []

    async def go():
        never = asyncio.get_running_loop().create_future()
        with pytest.raises(ApiError) as err:
            await _until_done(Gone(), never, lambda: forgotten.append(True))
        return err.value, never

    err, never = asyncio.run(go())
    assert forgotten == [True] and never.cancelled() and err.status == 499


def test_load_model_loads_the_lm_once_or_says_how_to_serve_a_bare_decoder(tmp_path):
    from nosink.serve import load_model

    lm, tok = tiny_chat_model()
    assert not lm.config.tie_word_embeddings  # a head of its own: a bare save lacks it
    lm.save_pretrained(tmp_path / "chat")
    lm.model.save_pretrained(tmp_path / "bare")
    for folder in ("chat", "bare"):
        tok.save_pretrained(tmp_path / folder)
    model, tokenizer = load_model(tmp_path / "chat")
    assert isinstance(model, tf.LlamaForCausalLM) and tokenizer.chat_template == TEMPLATE
    torch.testing.assert_close(model.lm_head.weight, lm.lm_head.weight)
    with pytest.raises(OSError, match=r"has no LM head .* --no-chat"):
        load_model(tmp_path / "bare")
    bare, _ = load_model(tmp_path / "bare", chat=False)
    assert isinstance(bare, tf.LlamaModel)
    with pytest.raises(OSError, match="no model folder"):
        load_model(tmp_path / "missing")


def _until(condition, what):
    deadline = time.monotonic() + 120  # a bound on waiting, not a timing assertion
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def test_an_embedding_request_whose_client_left_is_not_computed(server, client):
    engine = server.app.state.engine
    worker = engine.batches
    release, held = threading.Event(), []

    def hold(rows, start, rider=None):  # the first batch keeps the worker busy until released
        held.append(rows)
        release.wait(120)
        return type(worker)._queue(worker, rows, start, rider)

    worker._queue = hold
    try:
        first = []
        busy = threading.Thread(target=lambda: first.append(client.embeddings.create(model="tiny", input="the cat")))
        busy.start()
        _until(lambda: held, "the first request to reach the worker")
        del worker._queue
        before = dict(worker.stats)
        conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
        conn.request(
            "POST",
            "/v1/embeddings",
            json.dumps({**OK_EMBED, "input": ["a dog ran"]}),
            {"Authorization": f"Bearer {KEY}"},
        )
        jobs = lambda: [j for j in list(engine.inbox.queue.queue) if isinstance(j, EmbedJob)]  # noqa: E731
        _until(jobs, "the second request to wait for the worker")
        conn.sock.shutdown(2)
        conn.close()
        _until(lambda: jobs()[0].cancelled, "the server to notice the disconnect")
    finally:
        release.set()
    busy.join()
    _until(lambda: worker.stats["dropped"] == before["dropped"] + 1, "the worker to drop the request")
    # only "the cat" (held at the snapshot, counted once released) was encoded; "a dog ran" never was
    assert worker.stats["embedded_texts"] == before["embedded_texts"] + 1
    np.testing.assert_allclose(_vectors(first[0]), _encode(server, ["the cat"]), atol=1e-6, rtol=0)


def test_the_direct_embeddings_route_keeps_the_apps_error_bodies_and_later_middleware(caplog):
    # POST /v1/embeddings skips FastAPI's routing (routes.Direct): an unexpected failure still gets the app's 500
    # body, other methods the framework's 405, and middleware a user adds to the app still wraps the route.
    lm, tok = tiny_chat_model()
    app = create_app(lm, tok, SPEC, name="tiny", limits=LIMITS)
    assert [m.cls for m in app.user_middleware] == [nosink.serve.routes.Direct]

    @app.middleware("http")
    async def mark(request, call_next):
        response = await call_next(request)
        response.headers["x-seen"] = request.url.path
        return response

    def send(method, body):
        conn = http.client.HTTPConnection(running.host, running.port, timeout=120)
        conn.request(method, "/v1/embeddings", json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        answer = (response.status, response.getheader("x-seen"), json.loads(response.read()))
        conn.close()
        return answer

    with ServerThread(app) as running:
        status, seen, body = send("POST", OK_EMBED)
        assert status == 200 and seen == "/v1/embeddings" and len(body["data"][0]["embedding"]) == 32
        assert send("GET", OK_EMBED)[::2] == (405, ApiError(405, "Method Not Allowed", "method_not_allowed").body())

        def refuse(job):
            raise RuntimeError("the engine broke")

        app.state.engine.submit = refuse
        with caplog.at_level(logging.ERROR, logger="nosink.serve.routes"):
            status, seen, body = send("POST", OK_EMBED)
        assert (status, seen) == (500, "/v1/embeddings")
        assert body == ApiError(500, "internal server error", "internal_error", kind="server_error").body()
        assert "the engine broke" in caplog.text
        del app.state.engine.submit
        assert send("POST", OK_EMBED)[0] == 200
