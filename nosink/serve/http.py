"""Serving an app over HTTP: binding first, uvicorn with limits on slow clients and open connections.

:func:`bind` binds the address before the model loads; :func:`run` serves until interrupted;
:class:`ServerThread` serves in a background thread (notebooks, tests, benchmarks).
"""

import asyncio
import contextlib
import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from nosink.checks import printable
from nosink.serve.heap import frozen_heap
from nosink.serve.limits import ApiError, Limits

# A request's head (request line and headers) is refused past this many bytes: h11's limit and uvicorn's default,
# kept with httptools too (which takes heads of any size).
MAX_HEAD_BYTES = 16 * 1024


def bind(host: str = "127.0.0.1", port: int = 8000) -> list[socket.socket]:
    """Sockets bound to ``host:port`` now, to serve on later with :func:`run` or :class:`ServerThread`.

    Bound before a model loads, so a taken port fails at once and nothing takes it in between. Every
    address ``host`` names is bound (``"localhost"``: IPv4 and IPv6; ``""``: all interfaces). Close the
    sockets if they are not served.

    Args:
        host: the address to bind (``127.0.0.1``: this machine only).
        port: the port; 0 picks a free one.

    Raises:
        ValueError: for a port that is not an integer from 0 to 65535.
        OSError: ``cannot listen on HOST:PORT: ...`` with the system's reason.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"the port must be an integer from 0 to 65535, got {printable(repr(port))}")
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    sockets: list[socket.socket] = []
    try:
        found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(found):  # without repeats, in order
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            if os.name == "posix":  # as asyncio binds for uvicorn: a port in TIME_WAIT can be taken again
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # IPv6 and IPv4 sockets side by side on one port
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:  # every address on the port the system picked for the first
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
    except OSError as err:
        for sock in sockets:
            sock.close()
        raise OSError(f"cannot listen on {printable(where)}: {printable(str(err))}") from err
    return sockets


def _refusal(status: int, reason: str, error: ApiError) -> bytes:
    """A whole HTTP/1.1 answer with ``error``'s JSON body that closes the connection, written outside the parser."""
    body = json.dumps(error.body()).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


class _HeadWithBody:
    """A request cycle's transport that sends a response's head in one write with the first piece of its body.

    uvicorn writes a response's head (status line and headers) and then its body, two system calls per
    answer where one does (each is dear under a sandboxing kernel such as gVisor). The head is held only
    when a body is sure to follow: a length was declared (``content-length`` above 0, not chunked) and the
    request is not ``HEAD``. A close sends what is held first; everything else is the transport's own.
    """

    __slots__ = ("cycle", "fresh", "head", "transport")

    def __init__(self, transport: Any, cycle: Any) -> None:
        self.transport, self.cycle, self.head, self.fresh = transport, cycle, None, True

    def write(self, data: bytes) -> None:
        """Write ``data``, holding a response's head back until its body's first piece."""
        head = self.head
        if head is not None:
            self.head = None
            self.transport.write(head + data)
            return
        cycle = self.cycle
        if self.fresh and cycle.response_started:  # the response's first write: its head
            self.fresh = False
            declared = getattr(cycle, "chunked_encoding", None) is False and cycle.expected_content_length > 0
            if declared and cycle.scope["method"] != "HEAD":
                self.head = data
                return
        self.transport.write(data)

    def close(self) -> None:
        """Send what is held, then close the transport."""
        if self.head is not None:
            head, self.head = self.head, None
            self.transport.write(head)
        self.transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def _guarded(base: type, limits: Limits) -> type:
    """uvicorn's HTTP protocol class ``base`` with time limits on slow requests and caps on open connections.

    uvicorn times out only idle keep-alive connections, so a client that stops mid-request would hold its
    connection forever. A late request is answered 408 (headers: ``limits.header_timeout_s`` from the
    connection or the request's first byte; body: ``limits.body_timeout_s`` from the headers), and a
    connection beyond the caps 503; both are closed, as is a request whose head is over ``MAX_HEAD_BYTES``
    (431). Headers are complete when uvicorn starts a request cycle (``self.cycle``), in both its h11 and
    httptools protocols (httptools is used where installed: see :func:`_server`). The counts belong to the
    class: build one class per server.
    """
    open_per_client: dict[str, int] = {}
    open_connections = [0]

    class Guarded(base):  # type: ignore[valid-type, misc]
        _peer: str | None = None  # set once the connection is counted
        _timer: asyncio.TimerHandle | None = None
        _timed: Any = None  # the request cycle whose body is timed
        _headers_due = False  # a request's headers are being waited for, under the header timeout
        _head_bytes = 0  # bytes of the head of the request now arriving, so far
        _head_tail = b""  # its last 3 bytes (the blank line that ends it may be cut between two pieces)

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            peer = self.client[0] if self.client else ""
            if open_connections[0] >= limits.max_connections:
                self._refuse(f"the server has {limits.max_connections} open connections, its limit")
            elif open_per_client.get(peer, 0) >= limits.max_connections_per_client:
                self._refuse(f"{limits.max_connections_per_client} connections from {peer} are open, the limit")
            else:
                self._peer = peer
                open_per_client[peer] = open_per_client.get(peer, 0) + 1
                open_connections[0] += 1
                self._headers_due = True
                self._arm(limits.header_timeout_s)

        def _refuse(self, why: str) -> None:
            error = ApiError(503, f"{why}; retry later", "too_many_connections", kind="server_error")
            self.transport.write(_refusal(503, "Service Unavailable", error))
            self.transport.close()

        def send_400_response(self, msg: str) -> None:
            # A request uvicorn's parser refuses: its answer, with OpenAI's JSON error body.
            error = ApiError(400, f"malformed HTTP request ({msg.rstrip('.')})", "invalid_http_request")
            self.transport.write(_refusal(400, "Bad Request", error))
            self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self._arm(None)
            if self._peer is not None:
                open_connections[0] -= 1
                open_per_client[self._peer] -= 1
                if not open_per_client[self._peer]:
                    del open_per_client[self._peer]
                self._peer = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if not self._headers_due and (self.cycle is None or self.cycle.response_complete):
                self._headers_due = True  # the first bytes of the next request
                self._head_bytes, self._head_tail = 0, b""
                self._arm(limits.header_timeout_s)
            if self._headers_due and self._head_over(data):
                # httptools takes heads of any size: past h11's limit (and uvicorn's default), refused at once
                error = ApiError(431, f"the request's headers are over {MAX_HEAD_BYTES} bytes", "headers_too_large")
                self._arm(None)
                self.transport.write(_refusal(431, "Request Header Fields Too Large", error))
                self.transport.close()
                return
            super().data_received(data)
            cycle = self.cycle
            if cycle is not None and cycle is not self._timed:  # a request's headers are complete
                self._timed, self._headers_due = cycle, False
                if not cycle.response_started:  # its app has not run yet (uvicorn starts it as a task)
                    cycle.transport = _HeadWithBody(cycle.transport, cycle)
                self._arm(limits.body_timeout_s if cycle.more_body else None)
            elif cycle is not None and not cycle.more_body and not self._headers_due:
                self._arm(None)  # its body is complete

        def _head_over(self, data: bytes) -> bool:
            """Whether the head of the request now arriving is over ``MAX_HEAD_BYTES`` with ``data``: counted up to
            the blank line that ends it (a body in the same piece is not head)."""
            joined = self._head_tail + data
            end = joined.find(b"\r\n\r\n")
            size = self._head_bytes + (len(data) if end < 0 else end + 4 - len(self._head_tail))
            self._head_bytes, self._head_tail = size, joined[-3:]
            return size > MAX_HEAD_BYTES

        def _arm(self, seconds: float | None) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None if seconds is None else self.loop.call_later(seconds, self._late)

        def _late(self) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            cycle = self.cycle
            body = cycle is not None and cycle is self._timed and not self._headers_due
            if not (body and cycle.response_started):  # nothing answered yet: say why it is closed
                part, seconds = ("body", limits.body_timeout_s) if body else ("headers", limits.header_timeout_s)
                error = ApiError(408, f"the request's {part} did not arrive within {seconds:g} s", "request_timeout")
                self.transport.write(_refusal(408, "Request Timeout", error))
            if body and not cycle.response_complete:  # the app's handler sees a disconnect; its answer goes nowhere
                cycle.disconnected = True
                cycle.message_event.set()
            self.transport.close()

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{base.__name__}"
    return Guarded


def _url(host: str, sockets: Sequence[socket.socket]) -> str:
    """``http://host:port`` of the bound sockets (IPv6 hosts in brackets)."""
    port = sockets[0].getsockname()[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _HeldBack(logging.Filter):
    """Holds back uvicorn's log records from one thread while its server starts.

    A failed start becomes one exception with the errors' messages (uvicorn logs them and exits);
    :meth:`release` logs the records once the server has started.
    """

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger, self.thread = logger, threading.get_ident()
        self.records: list[logging.LogRecord] = []
        logger.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.thread != self.thread:
            return True
        self.records.append(record)
        return False

    def errors(self) -> list[str]:
        """The last line of each error record held (a traceback's last line is its exception)."""
        lines = [[x.strip() for x in r.getMessage().splitlines() if x.strip()] for r in self.records]
        return [text[-1] for text, r in zip(lines, self.records, strict=True) if text and r.levelno >= logging.ERROR]

    def release(self, show: bool) -> None:
        """Stop holding records back, logging those held if ``show``."""
        self.logger.removeFilter(self)
        held, self.records = self.records, []
        for record in held if show else ():
            self.logger.handle(record)


def _server(
    app: Any, host: str, sockets: list[socket.socket], log_level: str, on_started: Callable[[str], None] | None
) -> Any:
    """A uvicorn server of ``app`` on the bound ``sockets``.

    Its ``serve_until_stopped()`` calls ``on_started(url)`` once serving, raises OSError for a failed
    start, and closes the sockets when the server stops.
    """
    import uvicorn

    try:  # httptools parses in C: about 0.2 ms less of a front-end's CPU per request than h11 (pure Python)
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Protocol
    except ImportError:  # the serve extra installs httptools; without it, h11
        from uvicorn.protocols.http.h11_impl import H11Protocol as Protocol

    url = _url(host, sockets)
    limits = getattr(getattr(app, "state", None), "limits", None) or Limits()

    class Server(uvicorn.Server):
        held: _HeldBack | None = None

        def serve_until_stopped(self) -> None:
            self.held = _HeldBack(logging.getLogger("uvicorn.error"))  # in the thread that runs the server
            try:
                self.run(sockets=sockets)
            except SystemExit as exit:
                if self.started:
                    raise
                reason = "; ".join(self.held.errors()) or f"uvicorn exited with status {exit.code}"
                raise OSError(f"the server did not start: {printable(reason)}") from None
            finally:
                self.held.release(show=False)  # a no-op once started
                for sock in sockets:
                    sock.close()

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            try:
                await super().startup(sockets=sockets)
            finally:
                if self.held is not None and self.started:
                    self.held.release(show=True)  # uvicorn's start-up lines, then its log as usual
            if self.started and on_started is not None:
                on_started(url)

    port = sockets[0].getsockname()[1]
    # No WebSockets: an upgraded connection would leave the guarded protocol (and its counts).
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=10,
        http=_guarded(Protocol, limits),
        ws="none",
    )
    return Server(config)


def run(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    *,
    sockets: list[socket.socket] | None = None,
    on_started: Callable[[str], None] | None = None,
    workers: int = 0,
) -> None:
    """Serve ``app`` with uvicorn until interrupted (binds to localhost unless told otherwise).

    On Ctrl-C, open streams get 10 s to finish before they are cut.

    Args:
        app: the app from :func:`create_app`.
        host: the address to serve on.
        port: the port.
        log_level: uvicorn's log level.
        sockets: sockets already bound to ``host:port`` by :func:`bind`, else bound here; closed when the
            server stops.
        on_started: called with the server's URL (``http://host:port``) once it accepts connections.
        workers: front-end processes that read requests and write answers while this process runs the
            model (:mod:`nosink.serve.processes`); 0 serves everything from this process. Call it from the
            main thread (it handles SIGINT and SIGTERM).

    Raises:
        ImportError: if uvicorn is not installed.
        ValueError: for a port that is not an integer from 0 to 65535, or a negative ``workers``.
        OSError: if ``host:port`` cannot be bound, or the server does not start (one message).
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"workers must be a non-negative integer, got {printable(repr(workers))}")
    sockets = bind(host, port) if sockets is None else sockets
    if workers:
        from nosink.serve.processes import serve_front_ends

        serve_front_ends(app, workers, host, sockets, log_level, on_started)
        return
    with contextlib.ExitStack() as frozen:

        def started(url: str) -> None:
            frozen.enter_context(frozen_heap())  # the model, warmed up: out of every full collection while serving
            if on_started is not None:
                on_started(url)

        try:
            server = _server(app, host, sockets, log_level, started)
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        server.serve_until_stopped()
    if not server.started:  # stopped before it started (uvicorn.run exits with status 3 here)
        raise OSError("the server did not start")


class ServerThread:
    """``app`` served by uvicorn in a background thread, for notebooks, tests and benchmarks.

    ``with ServerThread(app) as server:`` serves until the block ends; ``server.url + "/v1"`` is the
    ``base_url`` of an ``openai.OpenAI`` client.

    Args:
        app: the app from :func:`create_app`.
        host: the address to bind.
        port: the port; 0 picks a free one (see :attr:`port`).
        workers: front-end processes (as for :func:`run`); 0 serves from this process.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, workers: int = 0) -> None:
        self.app, self.host, self._port, self.workers = app, host, port, workers
        self.front_ends: Any = None
        self.server: Any = None
        self.thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._sockets: list[socket.socket] = []

    @property
    def port(self) -> int:
        """The port the server listens on (the one asked for until it is started)."""
        return int(self._sockets[0].getsockname()[1]) if self._sockets else self._port

    @property
    def url(self) -> str:
        """``http://host:port``."""
        return f"http://[{self.host}]:{self.port}" if ":" in self.host else f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> "ServerThread":
        """Start serving; returns once the server accepts connections.

        The model's engine starts first, its warm-up (minutes with ``chat_compile``) outside ``timeout``.

        Raises:
            OSError: if the address cannot be bound, or the server does not start (uvicorn's message).
            RuntimeError: if the server does not start within ``timeout`` seconds.
        """
        self._sockets = bind(self.host, self._port)
        if self.workers:  # FrontEnds.start starts the engine (its inbox reads the front-ends' pipes) before waiting
            from nosink.serve.processes import FrontEnds

            self.front_ends = FrontEnds(self.app, self.workers, self.host, self._sockets, "warning")
            self.front_ends.start(timeout)
            self.thread = threading.Thread(target=self.front_ends.wait, name="nosink-front-ends", daemon=True)
            self.thread.start()
            return self
        engine = getattr(self.app.state, "engine", None)
        if engine is not None:
            try:
                engine.start()
            except BaseException:
                for sock in self._sockets:
                    sock.close()
                raise
        self.server = _server(self.app, self.host, self._sockets, "warning", lambda url: self._started.set())

        def serve() -> None:
            try:
                self.server.serve_until_stopped()
            except BaseException as err:  # handed to start()
                self._error = err
            finally:
                self._started.set()  # start() waits for this or for the server to start

        self.thread = threading.Thread(target=serve, name="nosink-server", daemon=True)
        self.thread.start()
        if not self._started.wait(timeout):
            self.stop()
            self._error = RuntimeError(f"the server did not start within {timeout:g} s")
        if self._error is not None:
            if engine is not None:  # started above; uvicorn's lifespan may not have run to stop it
                engine.stop()
            raise self._error
        return self

    def stop(self) -> None:
        """Stop serving and wait for the server (and its model worker) to finish."""
        if self.front_ends is not None:
            self.front_ends.stop()
        if self.server is not None:
            self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=60)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
