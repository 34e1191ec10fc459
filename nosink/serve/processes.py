"""Front-end processes: HTTP, JSON and tokenizing off the process that runs the model.

One process holds the weights and runs the :class:`~nosink.serve.engine.Engine`; ``workers`` front-end
processes (spawned, each with a copy of :class:`~nosink.serve.served.Served`: the tokenizer and limits,
no weights) accept connections on the same bound sockets, read and check requests, tokenize them and
write the answers. A front-end hands each job to the model's process through its own pipe
(:class:`RemoteEngine`, the routes' engine there) and gets back vectors or chat events. Each side reads
its pipes in the thread that uses what comes: a front-end's event loop, and the engine's thread in the
model's process (:class:`PipeInbox`), which reads every pipe between two units of work. A hand-over
between threads costs up to the interpreter's switch interval (5 ms) per message, which would cap
the server near a few hundred requests a second; there is none here. So the interpreter lock of the
model's process is spent launching kernels, not parsing JSON: one process could not keep a GPU busy
on short requests (see the serving guide's measurements).

Each front-end takes at most ``limits.max_queue // workers`` requests at once (more: 503), so the
engine's queue never overflows, and at most ``limits.max_connections // workers`` open connections, so
the server's cap holds; ``limits.max_connections_per_client`` applies in each front-end. A front-end
that dies is started again; Ctrl-C or SIGTERM stops the
front-ends (open streams get their grace period), then the engine.
"""

import asyncio
import concurrent.futures
import dataclasses
import itertools
import logging
import multiprocessing
import os
import selectors
import signal
import socket
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for
from typing import Any

import numpy as np

from nosink.serve.channel import Channel, Frames
from nosink.serve.engine import Engine, Inbox
from nosink.serve.heap import frozen_heap
from nosink.serve.jobs import ChatJob, EmbedJob, Reply
from nosink.serve.limits import ApiError, Limits
from nosink.serve.served import Served

logger = logging.getLogger(__name__)

_GONE = "the model's process is gone"


class RemoteEngine:
    """The engine of another process, reached through ``conn``: what a front-end's routes hand their work to.

    The front-end's event loop reads and writes the pipe itself (:class:`~nosink.serve.channel.Channel`),
    so an answer reaches its request without a thread handing it over (each hand-over between threads
    waits for the interpreter lock), and a job is sent without ever blocking the loop.

    Args:
        conn: this front-end's end of the pipe to the model's process.
        most: requests this front-end has in flight at most (more: 503).
    """

    def __init__(self, conn: Connection, most: int) -> None:
        self.conn, self.most = conn, most
        self.ids = itertools.count()
        self.jobs: dict[int, EmbedJob | ChatJob] = {}
        self.idents: dict[int, int] = {}  # id(job) -> its number on the pipe
        self.asked: dict[int, concurrent.futures.Future] = {}  # health questions waiting for their answer
        self.loop: asyncio.AbstractEventLoop | None = None
        self.channel: Channel | None = None  # the pipe, read and written by the event loop (see start())

    def start(self) -> None:
        """Read the model's answers in the running event loop (call it from there: the app's start-up)."""
        self.loop = asyncio.get_running_loop()
        self.channel = Channel(self.conn, self.loop, lambda message: self._handle(*message), self._broken)

    def stop(self) -> None:
        """Stop reading and close the pipe (the model's process forgets this front-end's work)."""
        loop, channel = self.loop, self.channel
        if loop is None or channel is None or loop.is_closed():
            return
        done = threading.Event()

        def close() -> None:
            channel.close()
            done.set()

        loop.call_soon_threadsafe(close)
        done.wait(5)

    def submit(self, job: EmbedJob | ChatJob) -> None:
        """Send ``job`` to the model's process.

        Raises:
            ApiError: 503 if this front-end already has its share of the queue in flight.
        """
        if len(self.jobs) >= self.most:
            raise ApiError(503, "the server is overloaded; retry later", "server_overloaded", kind="server_error")
        ident = next(self.ids)
        self.jobs[ident], self.idents[id(job)] = job, ident
        self._send(("job", ident, job))

    def cancel(self, job: EmbedJob | ChatJob) -> None:
        """Stop work on ``job`` (its client is gone); a no-op once it is done."""
        ident = self.idents.pop(id(job), None)
        if ident is not None and self.jobs.pop(ident, None) is not None:
            self._send(("cancel", ident, None))

    def health(self) -> dict[str, int]:
        """The engine's counts (``/health``), asked of the model's process (call it off the event loop)."""
        ident, answer = next(self.ids), concurrent.futures.Future()
        self.asked[ident] = answer
        self._send(("health", ident, None))
        return answer.result(timeout=30)

    def announce(self, why: str | None) -> None:
        """Tell the model's process that this front-end serves (``None``) or could not start (``why``)."""
        try:
            self._send(("ready", 0, why))
        except ApiError:
            pass

    def _send(self, message: tuple) -> None:
        try:
            if self.channel is None:  # before start(): announce() of a front-end that could not start
                self.conn.send(message)
            else:
                self.channel.send(message)
        except (OSError, ValueError):  # the pipe is closed: the model's process is gone
            raise ApiError(503, f"{_GONE}; retry later", "server_unavailable", kind="server_error") from None

    def _done(self, ident: int) -> EmbedJob | ChatJob | None:
        job = self.jobs.pop(ident, None)
        if job is not None:
            self.idents.pop(id(job), None)
        return job

    def _handle(self, kind: str, ident: int, payload: Any) -> None:
        if kind == "many":  # the answers of one unit of the engine's work (vectors stacked last, see _stack)
            for message in payload:
                self._handle(*message)
        elif kind == "stacked":  # several requests' vectors, one array (see _stack)
            idents, counts, stacked = payload
            at = 0
            for ident, count in zip(idents, counts, strict=True):
                self._handle("vectors", ident, stacked[at : at + count])
                at += count
        elif kind == "health":
            asked = self.asked.pop(ident, None)
            if asked is not None:
                asked.set_result(payload)
        elif kind == "event":
            job = self.jobs.get(ident)
            if isinstance(job, ChatJob):
                if payload[0] in ("done", "error"):
                    self._done(ident)
                job.emit(payload)
        else:  # "vectors" or "failed"
            job = self._done(ident)
            if isinstance(job, EmbedJob):
                _settle(job.future, payload, kind == "failed")

    def _broken(self) -> None:
        for job in list(self.jobs.values()):
            if isinstance(job, EmbedJob):
                _settle(job.future, RuntimeError(_GONE), True)
            else:
                job.emit(("error", _GONE))
        self.jobs.clear()
        for asked in self.asked.values():
            _settle(asked, RuntimeError(_GONE), True)


def _settle(future: concurrent.futures.Future, value: Any, failed: bool) -> None:
    """Set ``future``'s result (or exception), unless it is already done (cancelled by a gone client)."""
    try:
        if failed:
            future.set_exception(value)
        else:
            future.set_result(value)
    except concurrent.futures.InvalidStateError:
        pass


class _Peer:
    """One front-end, as the model's process sees it: its pipe, the jobs it has in flight, and the answers held
    back until the engine's unit of work ends (:meth:`flush`: one message for all of them)."""

    def __init__(self, conn: Connection, ready: Callable[[str | None], None]) -> None:
        self.conn, self.ready = conn, ready
        self.jobs: dict[int, EmbedJob | ChatJob] = {}
        self.held: list[tuple] = []
        # The pipe's socket, read in bulk: one call takes every message that has come (a Connection's poll() and
        # recv() are three system calls a message). Writes still go through the Connection, blocking: the socket
        # shares its file description, which must stay blocking (settimeout(None), whatever the default timeout).
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=os.dup(conn.fileno()))
        self.sock.settimeout(None)
        self.frames = Frames()

    def read(self) -> list[tuple]:
        """Every message that has come, without waiting.

        Raises:
            EOFError: once the front-end is gone (and nothing it sent is left).
        """
        try:
            while True:
                chunk = self.sock.recv(1 << 20, socket.MSG_DONTWAIT)
                if not chunk:
                    messages = self.frames.messages()
                    if messages:
                        return messages  # the end is seen again at the next read (only a partial frame is left)
                    raise EOFError
                self.frames.feed(chunk)
        except BlockingIOError:
            pass
        return self.frames.messages()

    def close(self) -> None:
        """Close the pipe."""
        self.sock.close()
        self.conn.close()

    def send(self, message: tuple) -> None:
        """Hold ``message`` back until the next :meth:`flush`."""
        self.held.append(message)

    def flush(self) -> None:
        """Send the held messages: one alone as it is, several as one ``("many", 0, messages)``, in which the
        vectors of several requests travel as one array (:func:`_stack`)."""
        if not self.held:
            return
        held, self.held = _stack(self.held), []
        message = held[0] if len(held) == 1 else ("many", 0, held)
        try:
            self.conn.send(message)
        except (OSError, ValueError):  # the front-end is gone; its jobs are cancelled when its pipe ends
            pass


class PipeInbox(Inbox):
    """The engine's inbox in the model's process: the front-ends' pipes, read by the engine's own thread.

    :meth:`take` waits on every pipe at once and reads all that has come: jobs become the engine's work,
    cancellations and health questions are handled on the spot. Answers go back from the engine's thread:
    those of one unit of work (a batch's vectors, a chat step's tokens) as one message per front-end, sent
    when the engine next takes its inbox, right after that unit. No other thread touches the pipes, so no
    message waits for a hand-over.
    """

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self.engine = engine
        self.peers: list[_Peer] = []
        self.added: list[_Peer] = []  # attached by another thread, joined at the next take()
        self.lock = threading.Lock()
        self.wake_r, self.wake_w = multiprocessing.Pipe(duplex=False)
        self.closed = False
        self.selector = selectors.DefaultSelector()  # every pipe, registered once (not per wait)
        self.selector.register(self.wake_r.fileno(), selectors.EVENT_READ, None)

    def attach(self, conn: Connection, ready: Callable[[str | None], None]) -> None:
        """Serve the front-end at the other end of ``conn`` (an end of a duplex ``multiprocessing.Pipe()``: a socket
        pair, read here through its socket); ``ready(None)`` once it serves, ``ready(why)`` if not."""
        with self.lock:
            self.added.append(_Peer(conn, ready))
        self.wake_w.send_bytes(b"")

    def put(self, item: object) -> None:
        super().put(item)
        if not self.closed:  # a stop asked again after close(): the engine's thread is gone already
            self.wake_w.send_bytes(b"")

    def flush(self) -> None:
        for peer in self.peers:
            peer.flush()

    def close(self) -> None:
        """Close every pipe, the wake-up pipe and the selector (once the engine has stopped; again: a no-op)."""
        if self.closed:
            return
        self.closed = True
        with self.lock:
            peers, self.peers, self.added = self.peers + self.added, [], []
        for peer in peers:
            peer.close()
        self.selector.close()
        self.wake_r.close()
        self.wake_w.close()

    def take(self, timeout: float | None) -> list:
        self.flush()  # the last unit of work's answers, before waiting for more
        with self.lock:
            added, self.added = self.added, []
        for peer in added:
            self.peers.append(peer)
            self.selector.register(peer.sock.fileno(), selectors.EVENT_READ, peer)
        items = []
        for key, _ in self.selector.select(timeout):
            peer = key.data
            if peer is None:  # the wake-up pipe
                while self.wake_r.poll():
                    self.wake_r.recv_bytes()
                continue
            try:
                for message in peer.read():
                    try:
                        job = self._handle(peer, *message)
                    except Exception as err:  # one message's fault: the others are still handled
                        logger.exception("model's process: a front-end's message could not be handled")
                        _refuse(peer, message, err)
                        continue
                    if job is not None:
                        items.append(job)
            except (EOFError, OSError):  # the front-end is gone: so are its clients
                for job in peer.jobs.values():
                    self.engine.cancel(job)
                self.peers.remove(peer)
                self.selector.unregister(peer.sock.fileno())
                peer.close()
        self.flush()  # what reading the pipes answered (refused jobs, health)
        return (super().take(0.0) if len(self) else []) + items  # (a stop request, put by another thread)

    def _handle(self, peer: _Peer, kind: str, ident: int, payload: Any) -> EmbedJob | ChatJob | None:
        if kind == "job":
            job = payload
            try:
                self.engine.check(job)
            except ApiError as err:
                chat = isinstance(job, ChatJob)
                peer.send(("event", ident, ("error", err.message)) if chat else ("failed", ident, err))
                return None
            peer.jobs[ident] = job
            if isinstance(job, ChatJob):
                job.emit = _emitter(peer, ident)
            else:
                job.future.add_done_callback(lambda future, ident=ident: _answer(peer, ident, future))
            return job
        if kind == "cancel":
            job = peer.jobs.pop(ident, None)
            if job is not None:
                self.engine.cancel(job)
        elif kind == "health":
            peer.send(("health", ident, self.engine.health()))
        elif kind == "ready":
            peer.ready(payload)
        return None


def _refuse(peer: _Peer, message: tuple, err: Exception) -> None:
    """Answer a job whose message could not be handled with an error (a message of another kind needs none)."""
    kind, ident, payload = message if isinstance(message, tuple) and len(message) == 3 else (None, None, None)
    if kind != "job":
        return
    why = f"the model's process could not take this request ({type(err).__name__})"
    chat = isinstance(payload, ChatJob)
    peer.send(("event", ident, ("error", why)) if chat else ("failed", ident, RuntimeError(why)))


def _stack(messages: list[tuple]) -> list[tuple]:
    """``messages`` with their ``("vectors", ident, array)`` answers of one width as one
    ``("stacked", 0, (idents, counts, arrays stacked))``: one array pickled rather than one per request (about
    10 us each, the model's process's largest cost per short request after reading it)."""
    vectors = [m for m in messages if m[0] == "vectors"]
    if len(vectors) < 2 or len({m[2].shape[1:] for m in vectors}) > 1 or len({m[2].dtype for m in vectors}) > 1:
        return messages
    rest = [m for m in messages if m[0] != "vectors"]
    idents, counts = [m[1] for m in vectors], [len(m[2]) for m in vectors]
    return [*rest, ("stacked", 0, (idents, counts, np.concatenate([m[2] for m in vectors])))]


def _answer(peer: _Peer, ident: int, future: concurrent.futures.Future | Reply) -> None:
    """Send an embedding job's vectors (or its error) back to its front-end."""
    peer.jobs.pop(ident, None)
    if not future.cancelled():
        error = future.exception()
        peer.send(("failed", ident, error) if error is not None else ("vectors", ident, future.result()))


def _emitter(peer: _Peer, ident: int) -> Callable[[tuple], None]:
    """A chat job's ``emit`` in the model's process: its events go back to its front-end."""

    def emit(event: tuple) -> None:
        if event[0] in ("done", "error"):
            peer.jobs.pop(ident, None)
        peer.send(("event", ident, event))

    return emit


def share_of(limits: Limits, workers: int) -> Limits:
    """One front-end's limits among ``workers``: its share of the waiting requests and open connections.

    Each front-end counts only its own, so shares keep the server's totals; a client's own connection cap
    stays whole in each (the kernel may hand all of one client's connections to one front-end).
    """
    workers = max(1, workers)
    return dataclasses.replace(
        limits,
        max_queue=max(1, limits.max_queue // workers),
        max_connections=max(1, limits.max_connections // workers),
    )


def _front_end(served: Served, conn: Connection, sockets: list[socket.socket], host: str, log_level: str) -> None:
    """A front-end process: the routes over a :class:`RemoteEngine`, served by uvicorn on the shared sockets."""
    import torch

    from nosink.serve.http import _server
    from nosink.serve.routes import build_app

    torch.set_num_threads(1)  # a front-end runs no model: torch's thread pool would only take cores
    logging.basicConfig(level=logging.WARNING)
    limits = share_of(served.limits, served.workers)
    engine = RemoteEngine(conn, limits.max_queue)
    app = build_app(dataclasses.replace(served, limits=limits), engine)
    server = _server(app, host, sockets, log_level, lambda url: engine.announce(None))
    try:
        with frozen_heap():  # torch, transformers and the tokenizer: out of every full collection while serving
            server.serve_until_stopped()
    except OSError as err:
        engine.announce(str(err))
        raise SystemExit(1) from None


class FrontEnds:
    """``workers`` front-end processes serving ``app``'s description, with ``app``'s engine in this process.

    Args:
        app: an app from :func:`~nosink.serve.app.create_app` (its engine and :class:`Served` are used).
        workers: how many front-end processes.
        host: the address the sockets are bound to (for the URL).
        sockets: bound sockets (:func:`~nosink.serve.http.bind`), shared by every front-end.
        log_level: uvicorn's log level in the front-ends.
    """

    def __init__(self, app: Any, workers: int, host: str, sockets: list[socket.socket], log_level: str) -> None:
        self.engine: Engine = app.state.engine
        self.served: Served = app.state.served
        self.served.workers = workers
        self.workers, self.host, self.sockets, self.log_level = workers, host, sockets, log_level
        self.context = multiprocessing.get_context("spawn")  # no fork after CUDA or threads
        self.inbox = PipeInbox(self.engine)
        self.engine.inbox = self.inbox
        self.processes: list[Any] = []
        self.stopping = threading.Event()

    def start(self, timeout: float = 300.0) -> None:
        """Start the engine and the front-ends; returns once every front-end serves.

        Raises:
            OSError: if a front-end does not start (its reason), or not within ``timeout`` seconds.
        """
        self.engine.start()
        answers: list[str | None] = []
        told = threading.Condition()

        def ready(why: str | None) -> None:
            with told:
                answers.append(why)
                told.notify_all()

        for _ in range(self.workers):
            self.processes.append(self._spawn(ready))
        with told:
            told.wait_for(lambda: len(answers) == self.workers or any(answers), timeout)
        failed = [why for why in answers if why]
        if failed or len(answers) < self.workers:
            self.stop()
            raise OSError(failed[0] if failed else f"the front-end processes did not start within {timeout:g} s")

    def _spawn(self, ready: Callable[[str | None], None]) -> Any:
        mine, theirs = self.context.Pipe()
        process = self.context.Process(
            target=_front_end,
            args=(self.served, theirs, self.sockets, self.host, self.log_level),
            name="nosink-http",
        )
        process.start()
        theirs.close()
        self.inbox.attach(mine, ready)
        return process

    def wait(self) -> None:
        """Serve until :meth:`stop` (or a signal handled by the caller) sets ``stopping``; restart dead front-ends."""
        while not self.stopping.is_set():
            wait_for([p.sentinel for p in self.processes], timeout=0.5)
            for i, process in enumerate(self.processes):
                if process.exitcode is not None and not self.stopping.is_set():
                    logger.error(
                        "front-end process %s exited (code %s); starting another", process.pid, process.exitcode
                    )
                    self.processes[i] = self._spawn(lambda why: None)

    def stop(self) -> None:
        """Stop the front-ends (SIGTERM: uvicorn's graceful shutdown), then the engine."""
        self.stopping.set()
        for process in self.processes:
            if process.exitcode is None:
                process.terminate()
        for process in self.processes:
            process.join(timeout=20)
            if process.exitcode is None:
                process.kill()
                process.join(timeout=5)
        self.engine.stop()
        if not self.engine.thread.is_alive():  # (an engine that did not stop in time keeps its pipes)
            self.inbox.close()
        for sock in self.sockets:
            sock.close()


def serve_front_ends(
    app: Any,
    workers: int,
    host: str,
    sockets: list[socket.socket],
    log_level: str,
    on_started: Callable[[str], None] | None,
) -> None:
    """Serve ``app`` with ``workers`` front-end processes until SIGINT or SIGTERM (in the main thread).

    Raises:
        KeyboardInterrupt: after a clean stop on SIGINT (Ctrl-C), as uvicorn does in one process.
        OSError: if a front-end does not start.
    """
    from nosink.serve.http import _url

    ends = FrontEnds(app, workers, host, sockets, log_level)
    got: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        got.append(signum)
        ends.stopping.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        ends.start()
        with frozen_heap():  # the model and its warm-up: out of every full collection while serving
            if on_started is not None:
                on_started(_url(host, sockets))
            ends.wait()
    finally:
        ends.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if signal.SIGINT in got:  # as uvicorn does in one process: Ctrl-C ends the program as an interrupt
        raise KeyboardInterrupt
