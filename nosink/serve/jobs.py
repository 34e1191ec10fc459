"""The work a request hands the engine: an embedding job (tokenized inputs) or a chat job (a prompt to continue).

A job crosses to another process (a front-end hands it to the model's process) as its ``WIRE`` fields
alone: the request's content, never its future, callback or decoding state, which each side keeps its own.
"""

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from nosink.models import texts as _texts


@dataclass
class EmbedJob:
    """One embeddings request: its inputs (sink token, prompt, text), tokenized once by its handler.

    ``config`` names the embedding configuration whose plan runs it; None: the encoder's own spec.
    """

    tokens: _texts.Tokenized
    config: str | None = None
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    cancelled: bool = False
    lengths: list[int] = field(init=False)  # tokens per input: sorts the gathered inputs
    # Filled by the engine's thread, batch by batch.
    vectors: np.ndarray | None = None
    left: int = 0
    arrived: float = 0.0  # when the engine took it (time.monotonic())

    WIRE = ("tokens", "config")  # what crosses to another process (see __reduce__)

    def __post_init__(self) -> None:
        self.lengths = self.tokens.lengths

    def __len__(self) -> int:
        return len(self.tokens)

    def __reduce__(self) -> tuple:
        return _rebuild, (type(self), {name: getattr(self, name) for name in self.WIRE})


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
    """A job from the fields that crossed to this process (its own future, callback and state fresh)."""
    return kind(**fields)


def _nobody(event: tuple) -> None:
    """The callback of a chat job that crossed to another process, until the receiver sets its own."""
    raise RuntimeError("this chat's events have nowhere to go")
