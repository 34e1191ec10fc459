"""The HTTP server around the app (``nosink/serve/http.py``): slow clients timed out, heads over the limit refused,
malformed requests answered with OpenAI's error body, open connections capped, and a response's head written
with its body. A tiny random Llama is served by uvicorn in a thread on a free localhost port; requests go over raw
sockets and ``http.client`` (no openai client needed).
"""

import http.client
import json
import socket
import time
import types

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from plain_http import request_json
from tiny import tiny_chat_model

from nosink.serve import Limits, ServerThread, create_app

SPEC = "F* | M0B*2"
OK_EMBED = {"model": "tiny", "input": ["the cat"]}

# With pytest-xdist this file's tests run on one worker (--dist loadgroup): its server starts once.
pytestmark = pytest.mark.xdist_group("test_serve_http")


def _until(condition, what):
    deadline = time.monotonic() + 120  # a bound on waiting, not a timing assertion
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


SLOW = Limits(header_timeout_s=1.0, body_timeout_s=1.0)


@pytest.fixture(scope="module")
def guarded_server():
    """An embeddings server with 1 s to send headers and 1 s to send a body."""
    lm, tok = tiny_chat_model()
    app = create_app(lm.model, tok, SPEC, name="tiny", chat=False, limits=SLOW)
    with ServerThread(app) as running:
        running.app = app
        yield running


def _closed_after(server, sent, pause=0.0, source="127.0.0.1"):
    """``(what the server answered, seconds until it closed the connection)`` after ``sent`` (bytes, or a list
    of them sent ``pause`` seconds apart); the connection comes from address ``source``."""
    sock = socket.create_connection((server.host, server.port), timeout=30, source_address=(source, 0))
    start, answer = time.monotonic(), b""
    with sock:
        try:
            for piece in [sent] if isinstance(sent, bytes) else sent:
                sock.sendall(piece)
                time.sleep(pause)
            while chunk := sock.recv(65536):  # b"" once the server closes; a 30 s timeout fails the test
                answer += chunk
        except (BrokenPipeError, ConnectionResetError):  # closed while the client was still sending
            pass
    return answer, time.monotonic() - start


def _health(server):
    """The status of ``GET /health``, None if the connection is refused before an answer is read."""
    try:
        return request_json(server, "GET", "/health")[0]
    except (OSError, http.client.HTTPException):
        return None


def _serves(server):
    """The server answers a whole request from the same client."""
    status, body = request_json(server, "POST", "/v1/embeddings", OK_EMBED)
    assert status == 200 and len(body["data"]) == 1


HEAD = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(
    ("sent", "part"),
    [
        (b"", "headers"),  # connected, sends nothing
        (HEAD, "headers"),  # stops half-way through its headers
        (HEAD + b"Content-Length: 100\r\n\r\n", "body"),  # headers, then no body
        (HEAD + b"Content-Length: 100\r\n\r\n" + b'{"model": "tiny", ', "body"),  # part of the body
    ],
    ids=["nothing", "half the headers", "no body", "half the body"],
)
def test_a_request_that_never_finishes_arriving_is_answered_408_and_closed(guarded_server, sent, part):
    answer, seconds = _closed_after(guarded_server, sent)
    assert 0.9 <= seconds < 10, seconds  # the 1 s limit, not never
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer
    error = json.loads(body)["error"]
    assert error["code"] == "request_timeout" and error["message"].startswith(f"the request's {part} did not arrive")
    _serves(guarded_server)


@pytest.mark.parametrize(
    "sent",
    [HEAD + b"Content-Length: many\r\n\r\n", HEAD + b"a header without a colon\r\n\r\n"],
    ids=["a bad content length", "a header without a colon"],
)
def test_a_request_the_http_parser_refuses_gets_an_openai_error_body(guarded_server, sent):
    # uvicorn answers these before the app runs, with a plain-text 400 of its own
    answer, _ = _closed_after(guarded_server, sent)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head.lower(), answer
    error = json.loads(body)["error"]
    assert error["code"] == "invalid_http_request" and error["message"].startswith("malformed HTTP request (")
    _serves(guarded_server)


class _Written:
    """A transport that records its writes and whether it was closed."""

    def __init__(self):
        self.writes, self.closed = [], False

    def write(self, data):
        self.writes.append(bytes(data))

    def close(self):
        self.closed = True

    def is_closing(self):
        return self.closed


def _cycle(method="POST", chunked=False, length=10):
    return types.SimpleNamespace(
        scope={"method": method}, response_started=False, chunked_encoding=chunked, expected_content_length=length
    )


@pytest.mark.parametrize(
    ("method", "chunked", "length", "joined"),
    [("POST", False, 10, True), ("POST", True, 0, False), ("HEAD", False, 10, False), ("POST", False, 0, False)],
    ids=["a declared length", "chunked", "a HEAD request", "an empty body"],
)
def test_a_response_head_goes_out_with_its_body_only_when_a_body_is_sure_to_follow(method, chunked, length, joined):
    from nosink.serve.http import _HeadWithBody

    transport, cycle = _Written(), _cycle(method, chunked, length)
    writer = _HeadWithBody(transport, cycle)
    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # before the response starts: at once
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    cycle.response_started = True
    writer.write(b"head")
    assert transport.writes[1:] == ([] if joined else [b"head"])
    writer.write(b"body")
    writer.write(b"more")
    assert transport.writes[1:] == ([b"headbody", b"more"] if joined else [b"head", b"body", b"more"])
    assert not writer.is_closing() and not transport.closed  # the rest is the transport's own


def test_a_held_response_head_is_sent_before_the_connection_closes():
    from nosink.serve.http import _HeadWithBody

    transport, cycle = _Written(), _cycle()
    writer = _HeadWithBody(transport, cycle)
    cycle.response_started = True
    writer.write(b"head")  # the app fails before its body: what was answered still goes out
    writer.close()
    assert transport.writes == [b"head"] and transport.closed
    writer.close()
    assert transport.writes == [b"head"]


def test_answers_on_one_connection_stay_whole_with_heads_sent_with_bodies(guarded_server):
    # One keep-alive connection: an answer with a body, a HEAD request's (no body), a 100-continue request's, an
    # error's, and one that closes the connection; each parses whole and in order.
    body = json.dumps(OK_EMBED).encode()
    length = f"Content-Length: {len(body)}\r\n".encode()
    with socket.create_connection((guarded_server.host, guarded_server.port), timeout=60) as sock:
        answers = []
        for request in [
            HEAD + length + b"\r\n" + body,
            b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n",
            HEAD + length + b"Expect: 100-continue\r\n\r\n",
            HEAD + b"Content-Length: 2\r\n\r\n{}",
            HEAD + length + b"Connection: close\r\n\r\n" + body,
        ]:
            sock.sendall(request)
            if b"100-continue" in request:  # the go-ahead first (http.client's reader would skip it), then the body
                go = b""
                while not go.endswith(b"\r\n\r\n"):
                    go += sock.recv(1)
                assert go == b"HTTP/1.1 100 Continue\r\n\r\n"
                sock.sendall(body)
            response = http.client.HTTPResponse(sock, method=request.split(b" ", 1)[0].decode())
            response.begin()
            answers.append((response.status, response.read()))
        assert sock.recv(1) == b""  # closed, as the last request asked
    assert [status for status, _ in answers] == [200, 405, 200, 400, 200]
    for _, data in answers[:1] + answers[2:3] + answers[4:]:
        assert len(json.loads(data)["data"]) == 1
    assert answers[1][1] == b"" and json.loads(answers[3][1])["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("chunks", [1, 40], ids=["at once", "trickled"])
def test_headers_over_the_limit_are_refused_431_and_a_large_body_is_not(guarded_server, chunks):
    from nosink.serve.http import MAX_HEAD_BYTES

    sent = HEAD + b"X-a: " + b"y" * (MAX_HEAD_BYTES + 100) + b"\r\n\r\n"
    step = -(-len(sent) // chunks)
    answer, _ = _closed_after(guarded_server, [sent[i : i + step] for i in range(0, len(sent), step)])
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ") and b"content-type: application/json" in head.lower(), answer
    error = json.loads(body)["error"]
    assert error["code"] == "headers_too_large" and str(MAX_HEAD_BYTES) in error["message"]
    # A body larger than the head's limit, arriving with the headers in one piece, is a request like any other.
    body = json.dumps(dict(OK_EMBED, input=["the cat sat on the mat " * 10] * 150)).encode()
    assert len(body) > 2 * MAX_HEAD_BYTES
    request = (
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    with socket.create_connection((guarded_server.host, guarded_server.port), timeout=60) as sock:
        sock.sendall(request)
        response = http.client.HTTPResponse(sock)
        response.begin()
        assert response.status == 200, response.read()
        assert len(json.loads(response.read())["data"]) == 150
    _serves(guarded_server)


def test_trickled_headers_get_one_timeout_and_a_timely_request_is_served(guarded_server):
    # One byte every 0.2 s: the clock runs from the request's first byte, each byte does not restart it.
    _, seconds = _closed_after(guarded_server, [bytes([b]) for b in HEAD], pause=0.2)
    assert seconds < 0.2 * len(HEAD) / 2, seconds  # closed long before the last byte
    # Requests that arrive in time are served, one after another on one connection (keep-alive) too.
    conn = http.client.HTTPConnection(guarded_server.host, guarded_server.port, timeout=30)
    for _ in range(2):
        conn.request("POST", "/v1/embeddings", json.dumps(OK_EMBED), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200 and len(json.loads(response.read())["data"]) == 1
        time.sleep(1.5)  # longer than the header timeout: idle between requests is the keep-alive timeout's
    conn.close()


def test_open_connections_are_capped_per_client_and_in_all():
    lm, tok = tiny_chat_model()
    limits = Limits(max_connections_per_client=3, max_connections=4, header_timeout_s=60)
    app = create_app(lm.model, tok, SPEC, name="tiny", chat=False, limits=limits)
    with ServerThread(app) as server:
        held = [socket.create_connection((server.host, server.port), timeout=30) for _ in range(3)]
        answer, seconds = _closed_after(server, b"")  # a fourth from 127.0.0.1: refused at once
        assert answer.startswith(b"HTTP/1.1 503 ") and seconds < 10, answer
        error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
        assert error["code"] == "too_many_connections" and "3 connections from 127.0.0.1" in error["message"]
        # Another address is another client, up to the limit of all connections.
        other = socket.create_connection((server.host, server.port), timeout=30, source_address=("127.0.0.2", 0))
        answer, _ = _closed_after(server, b"", source="127.0.0.3")
        assert answer.startswith(b"HTTP/1.1 503 ") and b"4 open connections" in answer, answer
        for sock in [*held, other]:
            sock.close()
        _until(lambda: _health(server) == 200, "the closed connections to be counted out")
        _serves(server)
