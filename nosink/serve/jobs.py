"""The work a request hands the engine: an embedding job (tokenized inputs) or a chat job (a prompt to continue).

A job crosses to another process (a front-end hands it to the model's process) as the request's content alone
(an embedding job's token ids, configuration and lengths; a chat job's ``WIRE`` fields), never its future,
callback or decoding state, which each side keeps its own.
An embedding job that crossed is answered through a :class:`Reply`, not a :class:`concurrent.futures.Future`:
in the model's process one thread reads the pipes, runs the engine and answers, so the future's lock (a
condition and a lock built per request) would be pure cost: 13% of that process's time holding the interpreter
lock on one-text requests (sampled by py-spy, see ``benchmarks/results/serve-gpu-10``).
"""

import concurrent.futures
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from nosink.models import texts as _texts

logger = logging.getLogger(__name__)


@dataclass
class EmbedJob:
    """One embeddings request: its inputs (sink token, prompt, text), tokenized once by its handler.

    ``config`` names the embedding configuration whose plan runs it; None: the encoder's own spec.
    """

    tokens: _texts.Tokenized
    config: str | None = None
    future: "concurrent.futures.Future | Reply" = field(default_factory=concurrent.futures.Future)
    cancelled: bool = False
    lengths: list[int] | None = None  # tokens per input (sorts the gathered inputs); None: counted from tokens
    # Filled by the engine's thread, batch by batch.
    vectors: np.ndarray | None = None
    left: int = 0
    arrived: float = 0.0  # when the engine took it (time.monotonic())

    def __post_init__(self) -> None:
        if self.lengths is None:
            self.lengths = self.tokens.lengths

    def __len__(self) -> int:
        return len(self.tokens)

    def __reduce__(self) -> tuple:
        # Flat, and the tokens without their offsets (the engine reads none): reading a job back took about 10.5 us
        # as the dataclasses themselves, about 5-7 us as this tuple with the job built (the model's process reads
        # every request).
        tokens = self.tokens
        return _arrive, (tokens.prefix_ids, tokens.text_ids, tokens.suffix_ids, self.config, self.lengths)


@dataclass
class Sampling:
    """How a chat request's tokens are drawn and when its answer ends."""

    max_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    seed: int | None


@dataclass
class ChatJob:
    """One chat request: the prompt's token ids, how to sample, and where its events go."""

    prompt_ids: list[int]
    sampling: Sampling
    emit: Callable[[tuple], None]  # thread-safe: hands an event to the request's coroutine
    cancelled: bool = False
    # Decoding state, touched by the engine's thread only.
    ids: list[int] = field(default_factory=list)
    detokenizer: Any = None  # the answer's text so far (a generation.Detokenizer)
    sent: int = 0  # characters of the answer already emitted
    generator: torch.Generator | None = None

    WIRE = ("prompt_ids", "sampling")  # what crosses to another process; its events go back by the receiver's emit

    def __reduce__(self) -> tuple:
        return _rebuild, (type(self), {"emit": _nobody, **{name: getattr(self, name) for name in self.WIRE}})


def _rebuild(kind: type, fields: dict[str, Any]) -> Any:
    """A job from the fields that crossed to this process (its own callback and state fresh)."""
    return kind(**fields)


def _arrive(
    prefix_ids: list[list[int]],
    text_ids: list[list[int]],
    suffix_ids: list[list[int]] | None,
    config: str | None,
    lengths: list[int] | None,
) -> EmbedJob:
    """An embedding job that crossed to this process (see :meth:`EmbedJob.__reduce__`), answered by a :class:`Reply`."""
    tokens = _texts.Tokenized(prefix_ids, text_ids, suffix_ids=suffix_ids)
    return EmbedJob(tokens, config, future=Reply(), lengths=lengths)


class Reply:
    """The answer of a job that one thread alone gives and takes: what the engine uses of
    :class:`concurrent.futures.Future` (the same states, errors and callbacks), without its lock.

    A reply is pending, then running, cancelled or finished (with a result or an exception), as a future is;
    :meth:`result` and :meth:`exception` take no timeout and never wait: asked before the reply is finished,
    they raise :class:`concurrent.futures.InvalidStateError`.
    """

    __slots__ = ("_callbacks", "_error", "_state", "_value")

    def __init__(self) -> None:
        self._state = "pending"
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Reply], None]] = []

    def cancel(self) -> bool:
        """Cancel it unless it is running or finished; True if it is cancelled."""
        if self._state in ("running", "finished"):
            return False
        if self._state == "pending":
            self._state = "cancelled"
            self._call_back()
        return True

    def cancelled(self) -> bool:
        """Whether it was cancelled."""
        return self._state.startswith("cancelled")

    def done(self) -> bool:
        """Whether it was cancelled or finished."""
        return self._state != "pending" and self._state != "running"

    def set_running_or_notify_cancel(self) -> bool:
        """Mark it running (True), or say it was cancelled (False).

        Raises:
            RuntimeError: if it is already running or finished, or was cancelled and said so already.
        """
        if self._state == "cancelled":
            self._state = "cancelled, said"
            return False
        if self._state != "pending":
            raise RuntimeError(f"a reply that is {self._state} cannot start running")
        self._state = "running"
        return True

    def set_result(self, value: Any) -> None:
        """Finish it with ``value``.

        Raises:
            concurrent.futures.InvalidStateError: if it is cancelled or finished.
        """
        self._finish(value, None)

    def set_exception(self, error: BaseException) -> None:
        """Finish it with ``error``.

        Raises:
            concurrent.futures.InvalidStateError: if it is cancelled or finished.
        """
        self._finish(None, error)

    def result(self) -> Any:
        """Its result (raises its exception, or CancelledError if cancelled)."""
        error = self.exception()
        if error is not None:
            raise error
        return self._value

    def exception(self) -> BaseException | None:
        """Its exception, None if it finished with a result.

        Raises:
            concurrent.futures.CancelledError: if it was cancelled.
            concurrent.futures.InvalidStateError: if it is not finished (a reply never waits).
        """
        if self.cancelled():
            raise concurrent.futures.CancelledError()
        if self._state != "finished":
            raise concurrent.futures.InvalidStateError(f"a reply that is {self._state} has no answer yet")
        return self._error

    def add_done_callback(self, fn: Callable[["Reply"], None]) -> None:
        """Call ``fn(reply)`` once it is cancelled or finished (at once if it is)."""
        if self.done():
            self._callbacks.append(fn)
            self._call_back()
        else:
            self._callbacks.append(fn)

    def _finish(self, value: Any, error: BaseException | None) -> None:
        if self.done():
            raise concurrent.futures.InvalidStateError(f"a reply that is {self._state} cannot be answered again")
        self._state, self._value, self._error = "finished", value, error
        self._call_back()

    def _call_back(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn(self)
            except Exception:  # as a future does: a failing callback is logged, the others still run
                logger.exception("a reply's callback failed")


def _nobody(event: tuple) -> None:
    """The callback of a chat job that crossed to another process, until the receiver sets its own."""
    raise RuntimeError("this chat's events have nowhere to go")
