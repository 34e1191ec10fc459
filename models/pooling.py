"""Pool token states into one vector per text, over the text tokens only."""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["POOLINGS", "Pooling", "pool"]

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
    mask = text_mask.to(hidden.dtype)  # (B, T)
    if pooling in ("mean", "weighted_mean"):
        weights = mask if pooling == "mean" else mask * mask.cumsum(-1)
        total = weights.sum(-1, keepdim=True).clamp(min=1)  # (B, 1)
        return torch.einsum("btd,bt->bd", hidden.float(), (weights / total).float()).to(hidden.dtype)
    positions = torch.arange(hidden.shape[1], device=hidden.device).expand_as(text_mask)
    if pooling == "last":
        index = torch.where(text_mask, positions, -1).amax(-1)
    else:
        index = torch.where(text_mask, positions, hidden.shape[1]).amin(-1)
    has_text = text_mask.any(-1)
    index = torch.where(has_text, index, 0).clamp(0, hidden.shape[1] - 1)
    out = hidden[torch.arange(hidden.shape[0], device=hidden.device), index]  # (B, D)
    return out * has_text[:, None].to(out.dtype)
