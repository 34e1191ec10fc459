"""Front-end processes: HTTP, JSON and tokenizing off the process that runs the model.

One process holds the weights and runs the :class:`~nosink.serve.engine.Engine`; ``workers`` front-end
processes (spawned, each with a copy of :class:`~nosink.serve.served.Served`: the tokenizer and limits,
no weights) accept connections on the same bound sockets, read and check requests, tokenize them and
write the answers. A front-end hands each job to the model's process through its own pipe
(:class:`RemoteEngine`, the routes' engine there) and gets back vectors or chat events; the model's
process reads every pipe in a thread of its own (:class:`EngineHost`). So the interpreter lock of the
model's process is spent launching kernels, not parsing JSON: one process could not keep a GPU busy
on short requests (see the serving guide's measurements).

Each front-end takes at most ``limits.max_queue // workers`` requests at once (more: 503), so the
engine's queue never overflows. A front-end that dies is started again; Ctrl-C or SIGTERM stops the
front-ends (open streams get their grace period), then the engine.
"""

import concurrent.futures
import itertools
import logging
import multiprocessing
import signal
import socket
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for
from typing import Any

from nosink.serve.engine import Engine
from nosink.serve.jobs import ChatJob, EmbedJob
from nosink.serve.limits import ApiError
from nosink.serve.served import Served

logger = logging.getLogger(__name__)

_GONE = "the model's process is gone"


class RemoteEngine:
    """The engine of another process, reached through ``conn``: what a front-end's routes hand their work to.

    Args:
        conn: this front-end's end of the pipe to the model's process.
        most: requests this front-end has in flight at most (more: 503).
    """

    def __init__(self, conn: Connection, most: int) -> None:
        self.conn, self.most = conn, most
        self.lock = threading.Lock()  # one message at a time on the pipe
        self.ids = itertools.count()
        self.jobs: dict[int, EmbedJob | ChatJob] = {}
        self.idents: dict[int, int] = {}  # id(job) -> its number on the pipe
        self.asked: dict[int, concurrent.futures.Future] = {}  # health questions waiting for their answer
        self.thread = threading.Thread(target=self._receive, name="nosink-remote", daemon=True)

    def start(self) -> None:
        """Start reading the model's answers."""
        self.thread.start()

    def stop(self) -> None:
        """Close the pipe (the model's process forgets this front-end's work)."""
        self.conn.close()

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
        """The engine's counts (``/health``), asked of the model's process."""
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
            with self.lock:
                self.conn.send(message)
        except (OSError, ValueError):  # the pipe is closed: the model's process is gone
            raise ApiError(503, f"{_GONE}; retry later", "server_unavailable", kind="server_error") from None

    def _done(self, ident: int) -> EmbedJob | ChatJob | None:
        job = self.jobs.pop(ident, None)
        if job is not None:
            self.idents.pop(id(job), None)
        return job

    def _receive(self) -> None:
        while True:
            try:
                kind, ident, payload = self.conn.recv()
            except (EOFError, OSError):
                break
            if kind == "health":
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
        for job in list(self.jobs.values()):  # the pipe broke: nothing more will come
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


class EngineHost:
    """Serves one engine to front-end processes: a thread per pipe reads their jobs and sends back results."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def attach(self, conn: Connection, ready: Callable[[str | None], None]) -> None:
        """Serve the front-end at the other end of ``conn``; ``ready(None)`` once it serves, ``ready(why)`` if not."""
        threading.Thread(target=self._serve, args=(conn, ready), name="nosink-host", daemon=True).start()

    def _serve(self, conn: Connection, ready: Callable[[str | None], None]) -> None:
        lock, jobs = threading.Lock(), {}

        def send(message: tuple) -> None:
            try:
                with lock:
                    conn.send(message)
            except (OSError, ValueError):  # the front-end is gone; its jobs are cancelled below
                pass

        def answer(ident: int, future: concurrent.futures.Future) -> None:
            jobs.pop(ident, None)
            if not future.cancelled():
                error = future.exception()
                send(("failed", ident, error) if error is not None else ("vectors", ident, future.result()))

        def emitter(ident: int) -> Callable[[tuple], None]:
            def emit(event: tuple) -> None:
                if event[0] in ("done", "error"):
                    jobs.pop(ident, None)
                send(("event", ident, event))

            return emit

        while True:
            try:
                kind, ident, payload = conn.recv()
            except (EOFError, OSError):
                break
            except Exception:  # a message that does not unpickle here: a bug, logged; the pipe goes on
                logger.exception("a front-end sent a message the model's process cannot read")
                continue
            if kind == "job":
                job = payload
                jobs[ident] = job
                if isinstance(job, ChatJob):
                    job.emit = emitter(ident)
                else:
                    job.future.add_done_callback(lambda future, ident=ident: answer(ident, future))
                try:
                    self.engine.submit(job)
                except ApiError as err:
                    jobs.pop(ident, None)
                    send(
                        ("failed", ident, err)
                        if isinstance(job, EmbedJob)
                        else ("event", ident, ("error", err.message))
                    )
            elif kind == "cancel":
                job = jobs.pop(ident, None)
                if job is not None:
                    self.engine.cancel(job)
            elif kind == "health":
                send(("health", ident, self.engine.health()))
            elif kind == "ready":
                ready(payload)
        for job in list(jobs.values()):  # the front-end is gone: so are its clients
            self.engine.cancel(job)
        conn.close()


def _front_end(served: Served, conn: Connection, sockets: list[socket.socket], host: str, log_level: str) -> None:
    """A front-end process: the routes over a :class:`RemoteEngine`, served by uvicorn on the shared sockets."""
    from nosink.serve.http import _server
    from nosink.serve.routes import build_app

    logging.basicConfig(level=logging.WARNING)
    workers = max(1, served.workers)
    engine = RemoteEngine(conn, max(1, served.limits.max_queue // workers))
    app = build_app(served, engine)
    server = _server(app, host, sockets, log_level, lambda url: engine.announce(None))
    try:
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
        self.host_side = EngineHost(self.engine)
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
        self.host_side.attach(mine, ready)
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
    """Serve ``app`` with ``workers`` front-end processes until SIGINT or SIGTERM (in the main thread)."""
    from nosink.serve.http import _url

    ends = FrontEnds(app, workers, host, sockets, log_level)
    previous = {sig: signal.signal(sig, lambda *_: ends.stopping.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        ends.start()
        if on_started is not None:
            on_started(_url(host, sockets))
        ends.wait()
    finally:
        ends.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
