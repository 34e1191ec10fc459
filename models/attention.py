"""Exact attention for each layer kind without a ``(B, 1, T, T)`` mask: the fast path.

The dense boolean mask of :func:`nosink.layerspec.build_mask` is the reference; every route here
computes the same attention (same keys per query, same softmax) with kernels that need no mask or
only a small one, so SDPA can pick its flash kernels. Pure torch: transformers never appears here
(``models/families.py`` registers :func:`attend` with transformers' attention registry).

Routes, for ``query (B, H, T, D)`` and ``key``/``value`` ``(B, Hkv, T, D)`` after RoPE:

- ``F``: causal kernel (``is_causal=True``).
- ``B``: non-causal kernel; with padding, a variable-length kernel on CUDA, else a ``(B, 1, 1, T)``
  key-padding mask.
- ``R``: the causal kernel on each row's time-reversed real tokens. Reversal comes after RoPE, so
  every token keeps its true position (flipping before RoPE would negate relative offsets).
- ``M<n>F``: queries ``0..n`` attend only themselves, so their output is their own value; the rest
  run the causal kernel over keys ``n+1..``.
- ``M<n>B``: queries ``n+1..`` attend keys ``n+1..`` (non-causal); queries ``0..n`` attend every key
  at or after them, through an ``(n+1, T)`` mask when ``n`` is small, else through the ``R`` route.

Padded batches are first brought to one layout, each row's real tokens at the front (a gather, only
when some row is not already so), where the causal kernel is exact for real queries. A padding query
attends only itself in the reference, so its output is its own value, set at the end.
"""

from __future__ import annotations

import inspect
import logging
from functools import cache
from typing import Any

import torch
import torch.nn.functional as F

from nosink.layerspec import Kind

__all__ = ["Layout", "Route", "attend", "fast_route"]

logger = logging.getLogger(__name__)

# Below this share of the sequence, the head queries of M<n>B use a small (n+1, T) mask; above it,
# the R route over the whole sequence (one causal kernel) is cheaper than a masked kernel.
_SMALL_HEAD = 0.25


class Layout:
    """Where the real tokens of a padded batch lie, worked out once per batch.

    Args:
        attention_mask: ``(B, T)``, 1 (or True) for real tokens, 0 for padding, on either side.
    """

    def __init__(self, attention_mask: torch.Tensor) -> None:
        real = attention_mask.bool()  # (B, T)
        self.real = real
        self.lengths = real.sum(-1)  # (B,)
        self.seq = real.shape[-1]
        bounds = torch.stack([self.lengths.min(), self.lengths.max()]) if real.numel() else None
        shortest, longest = bounds.tolist() if bounds is not None else (self.seq, self.seq)  # one host sync
        self.max_length: int = longest
        self.padded = shortest < self.seq
        pos = real.long().cumsum(-1) - 1  # (B, T), relative positions of real tokens
        pad_rank = (~real).long().cumsum(-1) - 1  # each padding token's rank among its row's padding
        tail = self.lengths[:, None] + pad_rank  # padding goes after the real tokens, in order
        # `packed position of each token`: real tokens first in order (or reversed), then padding.
        self._forward_key = torch.where(real, pos, tail)
        self._reverse_key = torch.where(real, self.lengths[:, None] - 1 - pos, tail)
        arange = torch.arange(self.seq, device=real.device)
        self.front = bool((self._forward_key == arange).all()) if self.padded else True
        self._cache: dict[Any, Any] = {}

    def packing(self, reverse: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(gather, scatter)`` row indices into ``(B * T)`` to the packed layout and back; ``None`` for identity."""
        if not reverse and self.front:
            return None
        name = ("packing", reverse)
        if name not in self._cache:
            key = self._reverse_key if reverse else self._forward_key
            gather = torch.empty_like(key).scatter_(1, key, torch.arange(self.seq, device=key.device).expand_as(key))
            self._cache[name] = (self._flat(gather), self._flat(key))
        return self._cache[name]

    def reversal(self) -> torch.Tensor:
        """Row indices into ``(B * T)`` reversing each row's leading real tokens (its own inverse)."""
        if "reversal" not in self._cache:
            pos = torch.arange(self.seq, device=self.real.device)[None, :]
            lengths = self.lengths[:, None]
            self._cache["reversal"] = self._flat(torch.where(pos < lengths, lengths - 1 - pos, pos))
        return self._cache["reversal"]

    def padding_rows(self) -> torch.Tensor:
        """Row indices into ``(B * T)`` of the padding tokens (in the batch's own layout)."""
        if "padding" not in self._cache:
            self._cache["padding"] = (~self.real).flatten().nonzero().squeeze(-1)
        return self._cache["padding"]

    def _flat(self, index: torch.Tensor) -> torch.Tensor:
        # (B, T) positions within rows -> rows of the flattened (B * T) batch
        return (index + torch.arange(index.shape[0], device=index.device)[:, None] * self.seq).flatten()

    def varlen(self, start: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """For the packed positions ``start..``: flat indices of real tokens, ``cu_seqlens``, max length."""
        if start not in self._cache:
            width = self.seq - start
            lengths = (self.lengths - start).clamp(min=0)  # (B,)
            inside = torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]  # (B, width)
            flat = inside.flatten().nonzero().squeeze(-1)  # (N,)
            cu = torch.zeros(lengths.shape[0] + 1, dtype=torch.int32, device=lengths.device)
            cu[1:] = lengths.cumsum(0)
            self._cache[start] = (flat, cu, max(int(lengths.max()), 1))
        return self._cache[start]


class Route:
    """How one layer kind attends over one batch: the kind and the batch's :class:`Layout`.

    Args:
        kind: the layer kind.
        layout: the batch's layout.
    """

    def __init__(self, kind: Kind, layout: Layout) -> None:
        self.kind = kind
        self.layout = layout

    def __repr__(self) -> str:
        return f"Route({self.kind}, padded={self.layout.padded})"

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float | None) -> torch.Tensor:
        """Attention output ``(B, T, H, D)`` (the layout transformers' attention functions return)."""
        return attend(query, key, value, self, scale)


def fast_route(kind: Kind, sliding_window: int | None, layout: Layout) -> Route | None:
    """The fast route of a layer, or ``None`` where only the dense mask applies.

    Only a sliding window shorter than the batch's longest row needs the dense mask.
    """
    if sliding_window is not None and sliding_window < layout.max_length:
        return None
    return Route(kind, layout)


def attend(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, route: Route, scale: float | None = None
) -> torch.Tensor:
    """Attention of ``query (B, H, T, D)`` over ``key``/``value`` ``(B, Hkv, T, D)`` along ``route``.

    Equal (to rounding) to SDPA with ``build_mask(route.kind, attention_mask)``, for any padding.

    Returns:
        ``(B, T, H, Dv)``, contiguous (what transformers' attention functions return).

    Raises:
        ValueError: if the heads of ``query`` are not a multiple of those of ``key``.
    """
    if query.shape[1] % key.shape[1]:
        raise ValueError(f"{query.shape[1]} query heads are not a multiple of {key.shape[1]} key heads")
    b, heads, seq, _ = query.shape
    dv = value.shape[-1]
    layout, kind = route.layout, route.kind
    own_value = value
    reverse = kind.direction == "R"
    packing = layout.packing(reverse) if layout.padded else None
    if packing is not None:
        query, key, value = (_rows(x, packing[0]) for x in (query, key, value))
    elif reverse:
        query, key, value = query.flip(2), key.flip(2), value.flip(2)

    out = _route(kind, query, key, value, layout, scale).transpose(1, 2)  # (B, T, H, Dv)
    if packing is not None:
        out = out.reshape(b * seq, heads, dv).index_select(0, packing[1])
    else:
        out = (out.flip(1) if reverse else out).reshape(b * seq, heads, dv)
    if layout.padded:
        # A padding query attends only itself in the reference mask: its output is its own value.
        rows = layout.padding_rows()
        own = _rows_of(own_value).index_select(0, rows)  # (Npad, Hkv, Dv)
        out.index_copy_(0, rows, own.repeat_interleave(heads // own.shape[1], dim=1))  # out is our own tensor
    return out.view(b, seq, heads, dv)


def _route(
    kind: Kind, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: Layout, scale: float | None
) -> torch.Tensor:
    # In the packed layout: each row's real tokens first (reversed for R). Returns (B, H, T, Dv).
    if kind.sink is None and kind.direction in "FR":
        return _causal(query, key, value, scale)
    if kind.sink is None:
        return _full(query, key, value, layout, 0, scale)
    if kind.direction == "B":
        return _no_sink_bidirectional(query, key, value, layout, kind.sink + 1, scale)
    head = min(kind.sink + 1, query.shape[2])  # these queries attend only themselves
    out = _buffer(query, value)
    out[:, :head] = _repeat(value[:, :, :head], query.shape[1]).transpose(1, 2)
    out[:, head:] = _causal(query[:, :, head:], key[:, :, head:], value[:, :, head:], scale).transpose(1, 2)
    return out.transpose(1, 2)


def _buffer(query: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """An output ``(B, T, H, Dv)`` to fill in parts (the layout attention functions return)."""
    b, h, t, _ = query.shape
    return query.new_empty(b, t, h, value.shape[-1])


def _rows_of(x: torch.Tensor) -> torch.Tensor:
    """``(B, H, T, D) -> (B * T, H, D)``, one row per token: free for the layout the projections give."""
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b * t, h, d)


def _rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The tokens of ``x (B, H, T, D)`` reordered by row indices into ``(B * T)``; a ``(B, H, T, D)`` view."""
    b, h, t, d = x.shape
    return _rows_of(x).index_select(0, index).view(b, t, h, d).transpose(1, 2)


def _no_sink_bidirectional(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: Layout, head: int, scale: float | None
) -> torch.Tensor:
    # Packed layout. Queries >= head attend keys >= head; queries < head attend every key after them.
    seq = query.shape[2]
    head = min(head, seq)
    small = head < _SMALL_HEAD * seq
    if small and not layout.padded:
        # Every query over keys head..; the few head rows are replaced below (no slice of the queries).
        gqa = query.shape[1] != key.shape[1]
        rest = F.scaled_dot_product_attention(query, key[:, :, head:], value[:, :, head:], scale=scale, enable_gqa=gqa)
        out = rest.transpose(1, 2)
        if not out.is_contiguous():
            out = out.contiguous()
    else:
        out = _buffer(query, value)
        tail = _full(query[:, :, head:], key[:, :, head:], value[:, :, head:], layout, head, scale)
        out[:, head:] = tail.transpose(1, 2)
    if head == 1:
        first = _full(query[:, :, :1], key, value, layout, 0, scale, keys_only=True)
    elif small:
        qpos = torch.arange(head, device=query.device)[:, None]
        kpos = torch.arange(seq, device=query.device)[None, :]
        mask = (kpos >= qpos)[None, None]  # (1, 1, head, T)
        if layout.padded:
            mask = mask & (kpos < layout.lengths[:, None])[:, None, None]  # (B, 1, head, T)
        first = _masked(query[:, :, :head], key, value, mask, scale)
    else:
        flip = layout.reversal() if layout.padded else None
        flipped = [x.flip(2) if flip is None else _rows(x, flip) for x in (query, key, value)]
        both = _causal(*flipped, scale)
        first = (both.flip(2) if flip is None else _rows(both, flip))[:, :, :head]
    out[:, :head] = first.transpose(1, 2)
    return out.transpose(1, 2)


def _causal(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float | None) -> torch.Tensor:
    gqa = query.shape[1] != key.shape[1]
    return F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scale, enable_gqa=gqa)


def _full(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layout: Layout,
    start: int,
    scale: float | None,
    keys_only: bool = False,
) -> torch.Tensor:
    # Non-causal attention over packed positions start.. of every row's real keys.
    gqa = query.shape[1] != key.shape[1]
    if not layout.padded:
        return F.scaled_dot_product_attention(query, key, value, scale=scale, enable_gqa=gqa)
    if query.is_cuda and query.dtype in _VARLEN_DTYPES and not keys_only and _varlen() is not None:
        try:
            return _full_varlen(query, key, value, layout, start, scale)
        except (RuntimeError, TypeError) as err:  # a torch build whose varlen kernel refuses these inputs
            logger.warning("variable-length attention failed (%s); using a key-padding mask from now on", err)
            _VARLEN_BROKEN.append(err)
    kpos = torch.arange(key.shape[2], device=key.device)
    mask = (kpos[None, :] < (layout.lengths - start)[:, None])[:, None, None]  # (B, 1, 1, Tk)
    return _masked(query, key, value, mask, scale)


def _masked(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor, scale: float | None
) -> torch.Tensor:
    # A mask shared by all heads: fold each key head's query heads into its query rows, so key and
    # value need no copy per query head (masked kernels take no enable_gqa on every device).
    b, h, t, d = query.shape
    groups = h // key.shape[1]
    if groups > 1:
        query = query.reshape(b, key.shape[1], groups * t, d)
        if mask.shape[2] > 1:
            mask = mask.repeat(1, 1, groups, 1)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale)
    return out.reshape(b, h, t, value.shape[-1])


def _full_varlen(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: Layout, start: int, scale: float | None
) -> torch.Tensor:
    fn, params = _varlen()  # type: ignore[misc]
    b, h, t, d = query.shape
    flat, cu, longest = layout.varlen(start)

    def pack(x: torch.Tensor) -> torch.Tensor:  # (B, h, t, d) -> (N, h, d), real tokens only
        return x.transpose(1, 2).reshape(b * t, x.shape[1], x.shape[-1])[flat]

    q, k, v = pack(query), pack(key), pack(value)
    kwargs: dict[str, Any] = {}
    if h != key.shape[1]:
        if "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        else:
            k, v = (x.repeat_interleave(h // key.shape[1], dim=1) for x in (k, v))
    if scale is not None:
        if "scale" in params:
            kwargs["scale"] = scale
        else:
            q = q * (scale * d**0.5)
    packed = fn(q, k, v, cu, cu, longest, longest, **kwargs)  # (N, h, d)
    out = packed.new_zeros(b * t, h, value.shape[-1]).index_copy_(0, flat, packed)
    return out.view(b, t, h, -1).transpose(1, 2)


_VARLEN_BROKEN: list[Exception] = []
_VARLEN_DTYPES = (torch.float16, torch.bfloat16)  # the flash kernel behind varlen_attn takes these only


def _varlen() -> tuple[Any, frozenset[str]] | None:
    return None if _VARLEN_BROKEN else _varlen_function()


@cache
def _varlen_function() -> tuple[Any, frozenset[str]] | None:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn, frozenset(inspect.signature(varlen_attn).parameters)


def _repeat(value: torch.Tensor, heads: int) -> torch.Tensor:
    """Key heads ``(B, Hkv, T, D)`` to query heads ``(B, H, T, D)``, head h reading key head h // (H/Hkv)."""
    groups = heads // value.shape[1]
    return value if groups == 1 else value.repeat_interleave(groups, dim=1)
