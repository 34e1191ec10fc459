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
        shortest, longest = torch.stack([self.lengths.min(), self.lengths.max()]).tolist()  # one host sync
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
        """``(gather, scatter)`` indices ``(B, T)`` to the packed layout and back; ``None`` for identity."""
        if not reverse and self.front:
            return None
        name = ("packing", reverse)
        if name not in self._cache:
            key = self._reverse_key if reverse else self._forward_key
            gather = torch.empty_like(key).scatter_(1, key, torch.arange(self.seq, device=key.device).expand_as(key))
            self._cache[name] = (gather, key)
        return self._cache[name]

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
        ``(B, T, H, D)``, contiguous.

    Raises:
        ValueError: if the heads of ``query`` are not a multiple of those of ``key``.
    """
    if query.shape[1] % key.shape[1]:
        raise ValueError(f"{query.shape[1]} query heads are not a multiple of {key.shape[1]} key heads")
    layout, kind = route.layout, route.kind
    own_value = value
    reverse = kind.direction == "R"
    packing = layout.packing(reverse) if layout.padded else None
    if packing is not None:
        query, key, value = (_take(x, packing[0]) for x in (query, key, value))
    elif reverse:
        query, key, value = query.flip(2), key.flip(2), value.flip(2)

    if kind.direction in "FR" and kind.sink is None:
        out = _causal(query, key, value, scale)
    elif kind.direction == "F":
        head = min(kind.sink + 1, query.shape[2])  # these queries attend only themselves
        tail = _causal(query[:, :, head:], key[:, :, head:], value[:, :, head:], scale)
        out = torch.cat([_repeat(value[:, :, :head], query.shape[1]), tail], dim=2)
    elif kind.sink is None:
        out = _full(query, key, value, layout, 0, scale)
    else:
        out = _no_sink_bidirectional(query, key, value, layout, kind.sink + 1, scale)

    if packing is not None:
        out = _take(out, packing[1])
    elif reverse:
        out = out.flip(2)
    if layout.padded:
        out = _own_value_on_padding(out, own_value, layout.real)
    return out.transpose(1, 2).contiguous()


def _no_sink_bidirectional(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: Layout, head: int, scale: float | None
) -> torch.Tensor:
    # Packed layout. Queries >= head attend keys >= head; queries < head attend every key after them.
    seq = query.shape[2]
    head = min(head, seq)
    tail = _full(query[:, :, head:], key[:, :, head:], value[:, :, head:], layout, head, scale)
    if head == 1:
        first = _full(query[:, :, :1], key, value, layout, 0, scale, keys_only=True)
    elif head < _SMALL_HEAD * seq:
        qpos = torch.arange(head, device=query.device)[:, None]
        kpos = torch.arange(seq, device=query.device)[None, :]
        mask = (kpos >= qpos)[None, None]  # (1, 1, head, T)
        if layout.padded:
            mask = mask & (kpos < layout.lengths[:, None])[:, None, None]  # (B, 1, head, T)
        first = _masked(query[:, :, :head], key, value, mask, scale)
    else:
        flipped = _reversed_rows(layout, query, key, value)
        first = _reversed_rows(layout, _causal(*flipped, scale))[:, :, :head]
    return torch.cat([first, tail], dim=2)


def _reversed_rows(layout: Layout, *xs: torch.Tensor) -> Any:
    # Within the packed layout, reverse each row's real tokens (padding stays behind them).
    if not layout.padded:
        out = tuple(x.flip(2) for x in xs)
    else:
        seq = xs[0].shape[2]
        pos = torch.arange(seq, device=xs[0].device)[None, :]
        lengths = layout.lengths[:, None]
        index = torch.where(pos < lengths, lengths - 1 - pos, pos)  # an involution: its own inverse
        out = tuple(_take(x, index) for x in xs)
    return out if len(out) > 1 else out[0]


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


def _take(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Reorder ``x (B, H, T, D)`` along T by ``index (B, T)``."""
    return torch.take_along_dim(x, index[:, None, :, None], dim=2)


def _repeat(value: torch.Tensor, heads: int) -> torch.Tensor:
    """Key heads ``(B, Hkv, T, D)`` to query heads ``(B, H, T, D)``, head h reading key head h // (H/Hkv)."""
    groups = heads // value.shape[1]
    return value if groups == 1 else value.repeat_interleave(groups, dim=1)


def _own_value_on_padding(out: torch.Tensor, value: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    # A padding query attends only itself in the reference mask: its output is its own value.
    b, h, t, d = out.shape
    kv = value.shape[1]
    grouped = out.view(b, kv, h // kv, t, d)
    return torch.where(real[:, None, None, :, None], grouped, value[:, :, None]).view(b, h, t, d)
