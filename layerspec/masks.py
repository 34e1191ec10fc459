"""Attention masks for each layer kind, for padded batches.

A kind is a predicate ``allowed(q, k) -> bool`` on positions counted from each row's first real token,
so a row's mask does not depend on the padding side or the rest of the batch. :func:`build_mask` turns
it into a tensor: a real query attends the real keys its kind allows, and a padding query attends only
itself, so no row is empty (no NaN) and padding never reaches a real token.

>>> import torch
>>> build_mask(Kind("B", sink=0), torch.tensor([[0, 1, 1, 1]])).int()[0, 0]
tensor([[1, 0, 0, 0],
        [0, 1, 1, 1],
        [0, 0, 1, 1],
        [0, 0, 1, 1]], dtype=torch.int32)
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .items import Kind

__all__ = ["Predicate", "additive_mask", "build_mask", "predicate", "relative_positions"]

Predicate = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _forward(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return k <= q


def _backward(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return k >= q


def _everything(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.ones(torch.broadcast_shapes(q.shape, k.shape), dtype=torch.bool, device=q.device)


def _no_sink(n: int) -> Predicate:
    # M<n>: the first n + 1 tokens are hidden from every later query; a token keeps itself.
    def allowed(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return ~((k <= n) & (k < q))

    return allowed


def _both(a: Predicate, b: Predicate) -> Predicate:
    def allowed(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return a(q, k) & b(q, k)

    return allowed


_BASE: dict[str, Predicate] = {"F": _forward, "B": _everything, "R": _backward}


def predicate(kind: Kind) -> Predicate:
    """The rule of ``kind``: may query position ``q`` attend key position ``k`` (broadcast tensors)?

    >>> import torch
    >>> q, k = torch.arange(3)[:, None], torch.arange(3)[None, :]
    >>> predicate(Kind("F", sink=0))(q, k).int()
    tensor([[1, 0, 0],
            [0, 1, 0],
            [0, 1, 1]], dtype=torch.int32)
    """
    base = _BASE[kind.direction]
    return base if kind.sink is None else _both(base, _no_sink(kind.sink))


def relative_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Each token's position counted from its row's first real token (padding gets -1).

    Args:
        attention_mask: ``(batch, seq)`` with 1 (or True) for real tokens, 0 for padding.

    Raises:
        ValueError: if the mask is not 2-D or holds values other than 0 and 1.
    """
    return _positions(_check_attention_mask(attention_mask))


def _positions(real: torch.Tensor) -> torch.Tensor:
    pos = real.long().cumsum(-1) - 1  # (B, T)
    return pos.masked_fill(~real, -1)


def build_mask(kind: Kind, attention_mask: torch.Tensor, sliding_window: int | None = None) -> torch.Tensor:
    """The boolean ``(batch, 1, query, key)`` mask of ``kind`` for a padded batch; True = attend.

    Args:
        kind: the layer kind.
        attention_mask: ``(batch, seq)``, 1 for real tokens and 0 for padding, on either side.
        sliding_window: if set, a query also ignores keys ``sliding_window`` or more positions before it.

    Raises:
        ValueError: if ``attention_mask`` is malformed or ``sliding_window`` is not positive.
    """
    real = _check_attention_mask(attention_mask)  # (B, T)
    pos = _positions(real)
    q, k = pos[:, :, None], pos[:, None, :]  # (B, T, 1), (B, 1, T)
    allowed = predicate(kind)(q, k)
    if sliding_window is not None:
        if sliding_window < 1:
            raise ValueError(f"sliding_window must be at least 1, got {sliding_window}")
        allowed = allowed & (q - k < sliding_window)
    allowed = allowed & real[:, None, :]
    eye = torch.eye(real.shape[-1], dtype=torch.bool, device=real.device)
    mask = torch.where(real[:, :, None], allowed, eye)  # (B, T, T)
    return mask[:, None]


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The additive form of a boolean mask for eager attention: 0 to attend, the dtype's minimum not to.

    The minimum rather than ``-inf`` keeps ``softmax`` free of NaN even if a row were empty.

    Raises:
        ValueError: if ``mask`` is not boolean or ``dtype`` is not floating point.
    """
    if mask.dtype != torch.bool:
        raise ValueError(f"expected a boolean mask, got dtype {mask.dtype}")
    if not dtype.is_floating_point:
        raise ValueError(f"an additive mask needs a floating-point dtype, got {dtype}")
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return torch.where(mask, zero, torch.finfo(dtype).min)


def _check_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    if not isinstance(attention_mask, torch.Tensor):
        raise ValueError(f"attention_mask must be a torch.Tensor, got {type(attention_mask).__name__}")
    if attention_mask.ndim != 2:
        raise ValueError(
            f"attention_mask must be (batch, seq), got shape {tuple(attention_mask.shape)}; "
            "add a batch dimension with attention_mask[None] for one text"
        )
    if attention_mask.dtype == torch.bool:
        return attention_mask
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise ValueError(f"attention_mask must hold integers or booleans, got dtype {attention_mask.dtype}")
    if ((attention_mask != 0) & (attention_mask != 1)).any():
        raise ValueError("attention_mask must hold only 0 (padding) and 1 (real token)")
    return attention_mask.bool()
