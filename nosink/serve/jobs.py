"""The work a request hands the engine: an embedding job (tokenized inputs) or a chat job (a prompt to continue)."""

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from nosink.models import texts as _texts


@dataclass
class EmbedJob:
    """One embeddings request: its inputs (sink token, prompt, text), tokenized once by its handler."""

    tokens: _texts.Tokenized
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    cancelled: bool = False
    lengths: list[int] = field(init=False)  # tokens per input: sorts the gathered inputs
    # Filled by the engine's thread, batch by batch.
    vectors: np.ndarray | None = None
    left: int = 0

    def __post_init__(self) -> None:
        self.lengths = self.tokens.lengths

    def __len__(self) -> int:
        return len(self.tokens)


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
