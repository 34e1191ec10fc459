"""Pool token states into one vector per text, over the text tokens only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

__all__ = ["POOLINGS", "Pooling", "pool", "pool_stream", "stream_weights"]

Pooling = Literal["mean", "weighted_mean", "last", "first"]
POOLINGS: tuple[str, ...] = ("mean", "weighted_mean", "last", "first")


def pool(hidden: torch.Tensor, text_mask: torch.Tensor, pooling: Pooling = "mean") -> torch.Tensor:
    """Pool ``(B, T, D)`` token states to ``(B, D)`` over the tokens where ``text_mask`` is true.

    ``weighted_mean`` weights the text's token ``i`` by ``i + 1`` (SGPT); ``last`` and ``first`` take one
    token. A row without text tokens pools to zeros.

    Raises:
        ValueError: for an unknown pooling or mismatched shapes.
    """
    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling {pooling!r}; expected one of {', '.join(POOLINGS)}")
    if text_mask.shape != hidden.shape[:2]:
        raise ValueError(f"text_mask {tuple(text_mask.shape)} does not match hidden states {tuple(hidden.shape)}")
    if pooling in ("mean", "weighted_mean"):
        mask = text_mask.float()  # (B, T); the weights in float32 (in fp16 a long text's total would overflow)
        weights = mask if pooling == "mean" else mask * mask.cumsum(-1)
        total = weights.sum(-1, keepdim=True).clamp(min=1)  # (B, 1)
        counted = torch.where(text_mask[..., None], hidden.float(), 0.0)  # what counts nowhere reaches no vector
        return torch.einsum("btd,bt->bd", counted, weights / total).to(hidden.dtype)
    positions = torch.arange(hidden.shape[1], device=hidden.device).expand_as(text_mask)
    if pooling == "last":
        index = torch.where(text_mask, positions, -1).amax(-1)
    else:
        index = torch.where(text_mask, positions, hidden.shape[1]).amin(-1)
    has_text = text_mask.any(-1)
    index = torch.where(has_text, index, 0).clamp(0, hidden.shape[1] - 1)
    out = hidden[torch.arange(hidden.shape[0], device=hidden.device), index]  # (B, D)
    return out * has_text[:, None].to(out.dtype)


def stream_weights(
    prefix: Sequence[int], text: Sequence[int], length: Sequence[int], pooling: Pooling = "mean"
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pool` as a weighted sum over a packed stream of rows: ``(row (N,) int64, weight (N,) float32)`` of
    each token, row after row.

    Row ``i`` holds ``length[i]`` tokens, its text tokens after the first ``prefix[i]`` (``text[i]`` of them):
    summing each row's tokens' states times their weights gives :func:`pool`'s vector of that row (a row
    without text tokens: zeros).

    Raises:
        ValueError: for an unknown pooling, or rows whose text does not fit their lengths.
    """
    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling {pooling!r}; expected one of {', '.join(POOLINGS)}")
    starts, counts, sizes = (np.asarray(x, dtype=np.int64) for x in (prefix, text, length))
    if (starts < 0).any() or (counts < 0).any() or (starts + counts > sizes).any():
        raise ValueError("each row's prefix and text must fit within its length")
    row = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    first = np.concatenate(([0], np.cumsum(sizes)[:-1])) + starts  # each row's first text token in the stream
    place = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(first, sizes)  # index within the row's text
    text_count = np.repeat(counts, sizes)
    inside = (place >= 0) & (place < text_count)
    # In float32, as pool() divides: each weight is the very float32 value pool() gives that token.
    if pooling == "mean":
        share = np.float32(1) / np.maximum(text_count, 1).astype(np.float32)
    elif pooling == "weighted_mean":
        share = (place + 1).astype(np.float32) / np.maximum(text_count * (text_count + 1) // 2, 1).astype(np.float32)
    else:
        share = (place == (text_count - 1 if pooling == "last" else 0)).astype(np.float32)
    return row, np.where(inside, share, np.float32(0)).astype(np.float32)


def pool_stream(hidden: torch.Tensor, row: torch.Tensor, weight: torch.Tensor, rows: int) -> torch.Tensor:
    """``(rows, D)`` vectors of a packed stream ``hidden`` ``(n, D)``: row ``i``'s is the sum of its tokens' states
    times their ``weight`` (:func:`stream_weights`), in float32, rounded to ``hidden``'s dtype as :func:`pool`'s.

    Tokens whose ``row`` is outside ``0 .. rows - 1`` (a CUDA graph's filler) count nowhere, and tokens of weight 0
    are zeros first, so a token that counts nowhere (a sink token's huge or non-finite state) cannot reach any
    vector. One matrix product (no atomics), so the result is the same at every call; the ``(rows, n)`` weights
    take ``4 * rows * n`` bytes.
    """
    slots = torch.arange(rows, device=hidden.device)[:, None]
    weights = (row[None, :] == slots).float() * weight[None, :].float()  # (rows, n)
    counted = torch.where(weight[:, None] != 0, hidden.float(), 0.0)  # (n, D)
    return (weights @ counted).to(hidden.dtype)
