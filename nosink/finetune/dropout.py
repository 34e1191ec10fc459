"""Dropout for SimCSE: decoders are often configured without attention dropout, and SimCSE needs some."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

__all__ = ["attention_dropout"]

logger = logging.getLogger(__name__)


@contextmanager
def attention_dropout(decoder: nn.Module, p: float) -> Iterator[int]:
    """Inside the block, the attention probabilities of ``decoder``'s layers drop out with probability ``p``
    (in training mode; eval mode never drops). Yields how many attention modules took it.

    transformers' attention modules read their ``attention_dropout`` attribute at every call (Llama, Qwen,
    Gemma, Mistral, ...); GPT-2's read their ``attn_dropout`` module. Both are set here and restored after, so the
    model's config (and what a server runs) is untouched. A model with neither logs a warning: its only
    dropout is then LoRA's.
    """
    saved: list[tuple[nn.Module, str, float]] = []
    for module in decoder.modules():
        if isinstance(getattr(module, "attention_dropout", None), (int, float)):
            saved.append((module, "attention_dropout", module.attention_dropout))
            module.attention_dropout = p
        elif isinstance(getattr(module, "attn_dropout", None), nn.Dropout):
            saved.append((module.attn_dropout, "p", module.attn_dropout.p))
            module.attn_dropout.p = p
    if p and not saved:
        logger.warning("%s has no attention dropout to set: its only dropout is LoRA's", type(decoder).__name__)
    try:
        yield len(saved)
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
