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

Padded batches are first brought to the *front layout*, each row's real tokens at the front (a gather,
only when some row is not already so: :meth:`Layout.front_order`), where the causal kernel is exact for
real queries. A padding query attends only itself in the reference, so its output is its own value, set
at the end.

A padded batch can also run *packed* (:class:`Packed`): the encoder drops the padding tokens once before
the first layer and runs every layer on one stream ``(1, N)`` of the real tokens, sequences one after
another, each token with its true position. Attention then runs per sequence with ``cu_seqlens``: the
variable-length flash kernel on CUDA (fp16/bf16), an exact per-sequence SDPA loop elsewhere. Every kind
has a packed route (``R`` reverses each sequence inside the stream; ``M<n>`` kinds split each sequence at
``n``), so neither the MLP nor the projections ever see a padding token.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from functools import cache
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange, repeat

from nosink.layerspec import Kind

__all__ = ["Layout", "Packed", "Route", "attend", "fast_route"]

logger = logging.getLogger(__name__)

# Below this share of the sequence, the head queries of M<n>B use a small (n+1, T) mask; above it,
# the R route over the whole sequence (one causal kernel) is cheaper than a masked kernel.
_SMALL_HEAD = 0.25


class Layout:
    """Where the real tokens of a padded batch lie, worked out once per batch.

    Args:
        attention_mask: ``(B, T)``, 1 (or True) for real tokens, 0 for padding, on either side.
        lengths: the rows' real lengths, when already known on the host (then nothing here syncs).
        front: whether every row's real tokens come first, when known on the host (else worked out on first use).
    """

    def __init__(
        self, attention_mask: torch.Tensor, lengths: list[int] | None = None, front: bool | None = None
    ) -> None:
        real = attention_mask.bool()  # (B, T)
        self.real = real
        self.lengths = real.sum(-1)  # (B,)
        self.seq = real.shape[-1]
        # One host sync unless the caller knows the lengths; the layer loop needs none.
        self.lengths_host: list[int] = self.lengths.tolist() if lengths is None else list(lengths)
        shortest, longest = (min(self.lengths_host), max(self.lengths_host)) if real.numel() else (self.seq, self.seq)
        self.max_length: int = longest
        self.total: int = sum(self.lengths_host)  # real tokens in the batch
        self.padded = shortest < self.seq
        pos = real.long().cumsum(-1) - 1  # (B, T), relative positions of real tokens
        pad_rank = (~real).long().cumsum(-1) - 1  # each padding token's rank among its row's padding
        tail = self.lengths[:, None] + pad_rank  # padding goes after the real tokens, in order
        # Each token's place in the front layout: real tokens first in order (or reversed), then padding.
        self._forward_key = torch.where(real, pos, tail)
        self._reverse_key = torch.where(real, self.lengths[:, None] - 1 - pos, tail)
        self._cache: dict[Any, Any] = {} if front is None else {"front": bool(front)}

    @property
    def front(self) -> bool:
        """Whether every row's real tokens already come first (right padding); worked out on first use."""
        if "front" not in self._cache:
            arange = torch.arange(self.seq, device=self.real.device)
            self._cache["front"] = bool((self._forward_key == arange).all()) if self.padded else True  # a sync
        return self._cache["front"]

    def front_order(self, reverse: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(gather, scatter)`` row indices into ``(B * T)`` to the front layout and back; ``None`` for identity."""
        if not reverse and self.front:
            return None
        name = ("front_order", reverse)
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
            # A stable sort puts the padding first, in order; its count is known on the host (nonzero would sync).
            order = torch.argsort(self.real.flatten().to(torch.uint8), stable=True)
            self._cache["padding"] = order[: self.real.numel() - self.total]
        return self._cache["padding"]

    def _flat(self, index: torch.Tensor) -> torch.Tensor:
        # (B, T) positions within rows -> rows of the flattened (B * T) batch
        return (index + torch.arange(index.shape[0], device=index.device)[:, None] * self.seq).flatten()

    def varlen(self, start: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """For the front layout's places ``start..``: flat indices of real tokens, ``cu_seqlens``, max length."""
        if start not in self._cache:
            width = self.seq - start
            lengths = (self.lengths - start).clamp(min=0)  # (B,)
            count = sum(max(n - start, 0) for n in self.lengths_host)  # on the host: no sync
            cu = torch.zeros(lengths.shape[0] + 1, dtype=torch.int32, device=lengths.device)
            cu[1:] = lengths.cumsum(0)
            rows = torch.repeat_interleave(torch.arange(len(self.lengths_host), device=lengths.device), lengths,
                                           output_size=count)  # fmt: skip
            flat = rows * width + torch.arange(count, device=lengths.device) - cu[:-1].long()[rows]  # (N,)
            self._cache[start] = (flat, cu, max(self.max_length - start, 1))  # no host sync
        return self._cache[start]


class Packed:
    """A padded batch's real tokens packed into one stream ``(1, N)``, its rows one after another.

    Built once per batch with one host sync (the row lengths); every index a layer needs is then
    computed on the device from them, with no further sync.

    Args:
        attention_mask: ``(B, T)``, 1 (or True) for real tokens, 0 for padding, on either side.
        lengths: the rows' real lengths, when already known on the host (then nothing here syncs).
    """

    def __init__(self, attention_mask: torch.Tensor, lengths: list[int] | None = None) -> None:
        real = attention_mask.bool()
        self.batch, self.seq = real.shape
        self.device = real.device
        counts = real.sum(-1)  # (B,)
        self.lengths: list[int] = counts.tolist() if lengths is None else list(lengths)  # the one host sync
        self.total = sum(self.lengths)
        self.max_length = max(self.lengths, default=0)
        self.padded = self.total < self.batch * self.seq
        # (N,) rows of (B * T) holding real tokens, in order: a stable sort puts them first (nonzero would sync)
        self.index = torch.argsort((~real).flatten().to(torch.uint8), stable=True)[: self.total]
        self._lengths = counts
        self._starts = counts.cumsum(0) - counts  # (B,) where each row starts in the stream
        self._row = torch.repeat_interleave(
            torch.arange(self.batch, device=self.device), counts, output_size=self.total
        )  # (N,) the row of each token
        self._pos = torch.arange(self.total, device=self.device) - self._starts[self._row]  # (N,) place in its row
        self._cache: dict[Any, Any] = {}

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, ...) -> (1, N, ...)``: the real tokens, row after row."""
        return rearrange(x, "b t ... -> (b t) ...").index_select(0, self.index)[None]

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """``(1, N, ...) -> (B, T, ...)``, zeros at the padding positions."""
        out = x.new_zeros(self.batch * self.seq, *x.shape[2:])
        out.index_copy_(0, self.index, x[0])
        return rearrange(out, "(b t) ... -> b t ...", b=self.batch)

    def segments(self, start: int) -> _Segments:
        """The tokens at places ``start..`` of their rows, as sequences of their own (cached)."""
        key = ("segments", start)
        if key not in self._cache:
            self._cache[key] = _Segments(self, start)
        return self._cache[key]

    def reversal(self) -> torch.Tensor:
        """``(N,)`` indices reversing each row inside the stream (its own inverse)."""
        if "reversal" not in self._cache:
            self._cache["reversal"] = self._starts[self._row] + self._lengths[self._row] - 1 - self._pos
        return self._cache["reversal"]

    def heads(self, count: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """For places ``0..count-1`` of every row: a padded gather of queries and keys, and the mask.

        Returns ``(query_index (B, count), key_index (B, L), mask (B, 1, count, L), out_index (B * count))``
        with ``L`` the longest row. Places past a row's end are clamped onto its last token (the same
        computation as that token's, so writing it twice is harmless); rows without tokens write to row
        ``N`` of a buffer one row longer than the stream.
        """
        key = ("heads", count)
        if key not in self._cache:
            longest = max(self.max_length, 1)
            lengths, starts = self._lengths[:, None], self._starts[:, None]
            places = torch.arange(count, device=self.device)[None, :]  # (1, count)
            qplace = torch.minimum(places, (lengths - 1).clamp(min=0))  # (B, count)
            kplace = torch.arange(longest, device=self.device)[None, :]  # (1, L)
            mask = (kplace[:, None, :] >= qplace[:, :, None]) & (kplace < lengths)[:, None, :]  # (B, count, L)
            empty = lengths == 0
            query_index = torch.where(empty, 0, starts + qplace)
            key_index = torch.where(kplace < lengths, starts + kplace, 0)
            out_index = torch.where(empty, self.total, starts + qplace).flatten()
            self._cache[key] = (query_index, key_index, mask[:, None], out_index)
        return self._cache[key]


class _Segments:
    """The tokens at places ``start..`` of each row: their indices in the stream and ``cu_seqlens``.

    Rows with no such token keep an empty segment (a repeated bound), so nothing here syncs.
    """

    def __init__(self, packed: Packed, start: int) -> None:
        sizes_host = [max(n - start, 0) for n in packed.lengths]
        self.total = sum(sizes_host)
        self.max_length = max(sizes_host, default=0)
        self.bounds = [0]  # host cu_seqlens
        for n in sizes_host:
            self.bounds.append(self.bounds[-1] + n)
        sizes = (packed._lengths - start).clamp(min=0)  # (B,) on the device
        self.cu = torch.zeros(packed.batch + 1, dtype=torch.int32, device=packed.device)
        self.cu[1:] = sizes.cumsum(0)
        if start == 0:
            self.index: torch.Tensor | None = None  # every token: no gather
        else:
            rows = torch.repeat_interleave(
                torch.arange(packed.batch, device=packed.device), sizes, output_size=self.total
            )
            within = torch.arange(self.total, device=packed.device) - self.cu[:-1].long()[rows]
            self.index = packed._starts[rows] + start + within


class Route:
    """How one layer kind attends over one batch: the kind and the batch's :class:`Layout`.

    Args:
        kind: the layer kind.
        layout: the batch's padded :class:`Layout`, or its :class:`Packed` stream of real tokens.
    """

    def __init__(self, kind: Kind, layout: Layout | Packed) -> None:
        self.kind = kind
        self.layout = layout

    def __repr__(self) -> str:
        return f"Route({self.kind}, padded={self.layout.padded})"

    @torch.compiler.disable  # a compiled layer breaks its graph here: the kernels and indexing run as they are
    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float | None) -> torch.Tensor:
        """Attention output ``(B, T, H, D)`` (the layout transformers' attention functions return)."""
        return attend(query, key, value, self, scale)


def fast_route(kind: Kind, sliding_window: int | None, layout: Layout | Packed) -> Route | None:
    """The fast route of a layer, or ``None`` where only the dense mask applies.

    Only a sliding window shorter than the batch's longest row needs the dense mask.

    Raises:
        ValueError: for such a window on a packed batch, which has no dense layout to fall back on (the
            encoder packs only batches that no window cuts).
    """
    if sliding_window is not None and sliding_window < layout.max_length:
        if isinstance(layout, Packed):
            raise ValueError(
                f"a sliding window of {sliding_window} cuts rows of {layout.max_length} tokens: such a batch "
                "cannot run packed (run it padded, pack_padding=False)"
            )
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
    if isinstance(route.layout, Packed):
        return _attend_packed(query, key, value, route.kind, route.layout, scale)
    b, heads = query.shape[:2]
    layout, kind = route.layout, route.kind
    own_value = value
    reverse = kind.direction == "R"
    order = layout.front_order(reverse) if layout.padded else None
    if order is not None:
        query, key, value = (_rows(x, order[0]) for x in (query, key, value))
    elif reverse:
        query, key, value = query.flip(2), key.flip(2), value.flip(2)

    out = _route(kind, query, key, value, layout, scale)
    if order is None and reverse:
        out = out.flip(2)
    out = rearrange(out, "b h t d -> (b t) h d")
    if order is not None:
        out = out.index_select(0, order[1])
    if layout.padded:
        # A padding query attends only itself in the reference mask: its output is its own value.
        rows = layout.padding_rows()
        own = rearrange(own_value, "b hkv t d -> (b t) hkv d").index_select(0, rows)
        out.index_copy_(0, rows, repeat(own, "n hkv d -> n (hkv g) d", g=heads // own.shape[1]))  # our own tensor
    return rearrange(out, "(b t) h d -> b t h d", b=b)


def _attend_packed(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kind: Kind, packed: Packed, scale: float | None
) -> torch.Tensor:
    # The stream (1, H, N, D): every sequence attends within itself, by kind. Returns (1, N, H, Dv).
    if query.shape[0] != 1 or query.shape[2] != packed.total:
        raise ValueError(f"a packed route takes one stream of {packed.total} tokens, got {tuple(query.shape)}")
    # Free for the layout the projections give (they make (1, N, H, D) and transpose it).
    q, k, v = (rearrange(x, "1 h n d -> n h d") for x in (query, key, value))
    n, heads, dv = q.shape[0], q.shape[1], v.shape[-1]
    if kind.sink is None and kind.direction == "R":
        flip = packed.reversal()
        out = _varlen_rows(q[flip], k[flip], v[flip], packed.segments(0), True, scale)[flip]
    elif kind.sink is None:
        out = _varlen_rows(q, k, v, packed.segments(0), kind.direction == "F", scale)
    else:
        head = kind.sink + 1  # places 0..sink of each row
        tail = packed.segments(head)
        out = q.new_zeros(n + 1, heads, dv)  # one spare row: see Packed.heads
        if tail.total:
            idx = tail.index
            part = _varlen_rows(q[idx], k[idx], v[idx], tail, kind.direction == "F", scale)
            out.index_copy_(0, idx, part)
        in_head = (packed._pos < head)[:, None, None]  # (N, 1, 1)
        if kind.direction == "F":
            # A head query attends only itself: its output is its own value.
            own = repeat(v, "n hkv d -> n (hkv g) d", g=heads // v.shape[1])
            out = torch.where(in_head, own, out[:n])
        elif head < _SMALL_HEAD * packed.max_length:
            # Head queries attend every key at or after them: a small masked kernel over padded rows.
            q_index, k_index, mask, out_index = packed.heads(head)
            qh = rearrange(q[q_index], "b t h d -> b h t d")
            kh, vh = (rearrange(x[k_index], "b t h d -> b h t d") for x in (k, v))
            first = rearrange(_masked(qh, kh, vh, mask, scale), "b h t d -> (b t) h d")
            out.index_copy_(0, out_index, first)
            out = out[:n]
        else:
            # Many head queries: the reverse-causal route over each whole row gives them exactly.
            flip = packed.reversal()
            both = _varlen_rows(q[flip], k[flip], v[flip], packed.segments(0), True, scale)[flip]
            out = torch.where(in_head, both, out[:n])
    return out[None]  # (1, N, H, Dv)


def _varlen_rows(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: _Segments, causal: bool, scale: float | None
) -> torch.Tensor:
    """Attention within each segment of ``q (N, h, d)``, ``k``/``v (N, hkv, d)``: ``(N, h, dv)``."""
    if q.is_cuda and q.dtype in _VARLEN_DTYPES and _varlen() is not None:
        try:
            return _varlen_kernel(q, k, v, segments, causal, scale)
        except (RuntimeError, TypeError) as err:  # a torch build whose varlen kernel refuses these inputs
            logger.warning("variable-length attention failed (%s); using a per-sequence loop from now on", err)
            _VARLEN_BROKEN.append(err)
    # Exact everywhere: one SDPA call per sequence (the CPU path, and float32 on CUDA).
    out = q.new_empty(q.shape[0], q.shape[1], v.shape[-1])
    gqa = q.shape[1] != k.shape[1]
    bounds = segments.bounds
    for a, b in itertools.pairwise(bounds):
        if a == b:
            continue
        qs, ks, vs = (rearrange(x[a:b], "t h d -> 1 h t d") for x in (q, k, v))
        res = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=scale, enable_gqa=gqa)
        out[a:b] = rearrange(res, "1 h t d -> t h d")
    return out


def _varlen_kernel(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: _Segments, causal: bool, scale: float | None
) -> torch.Tensor:
    fn, params = _varlen()  # type: ignore[misc]
    kwargs: dict[str, Any] = {}
    if causal:
        if "window_size" in params:  # torch >= 2.11: causal is a window reaching no key to the right
            kwargs["window_size"] = (-1, 0)
        elif "is_causal" in params:
            kwargs["is_causal"] = True
        else:
            raise TypeError("this torch's varlen_attn takes neither window_size nor is_causal")
    if scale is not None:
        if "scale" in params:
            kwargs["scale"] = scale
        else:
            q = q * (scale * q.shape[-1] ** 0.5)
    longest = max(segments.max_length, 1)
    heads = q.shape[1]
    if heads != k.shape[1]:
        if "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        elif _NATIVE_GQA:
            # torch 2.11's varlen_attn has no enable_gqa, but its flash kernel takes fewer key/value heads
            # as they are (on an H100: the same output as repeated heads, to the bit); a build that refuses
            # them is asked with repeated heads from then on.
            try:
                return fn(q, k, v, segments.cu, segments.cu, longest, longest, **kwargs)
            except RuntimeError:
                _NATIVE_GQA.clear()
        if "enable_gqa" not in kwargs:
            k, v = (repeat(x, "n hkv d -> n (hkv g) d", g=heads // x.shape[1]) for x in (k, v))
    return fn(q, k, v, segments.cu, segments.cu, longest, longest, **kwargs)


_NATIVE_GQA = [True]  # emptied once a varlen kernel refuses fewer key/value heads than query heads


def _route(
    kind: Kind, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: Layout, scale: float | None
) -> torch.Tensor:
    # In the front layout: each row's real tokens first (reversed for R). Returns (B, H, T, Dv).
    if kind.sink is None and kind.direction in "FR":
        return _causal(query, key, value, scale)
    if kind.sink is None:
        return _full(query, key, value, layout, 0, scale)
    if kind.direction == "B":
        return _no_sink_bidirectional(query, key, value, layout, kind.sink + 1, scale)
    head = min(kind.sink + 1, query.shape[2])  # these queries attend only themselves
    out = _buffer(query, value)
    out[:, :head] = repeat(value[:, :, :head], "b hkv t d -> b t (hkv g) d", g=query.shape[1] // value.shape[1])
    out[:, head:] = _causal(query[:, :, head:], key[:, :, head:], value[:, :, head:], scale).transpose(1, 2)
    return out.transpose(1, 2)


def _buffer(query: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """An output ``(B, T, H, Dv)`` to fill in parts (the layout attention functions return)."""
    b, h, t, _ = query.shape
    return query.new_empty(b, t, h, value.shape[-1])


def _rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The tokens of ``x (B, H, T, D)`` reordered by row indices into ``(B * T)``; a ``(B, H, T, D)`` view."""
    # The first rearrange is free for the layout the projections give ((B, T, H, D), transposed).
    rows = rearrange(x, "b h t d -> (b t) h d").index_select(0, index)
    return rearrange(rows, "(b t) h d -> b h t d", b=x.shape[0])


def _no_sink_bidirectional(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: Layout, head: int, scale: float | None
) -> torch.Tensor:
    # Front layout. Queries >= head attend keys >= head; queries < head attend every key after them.
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
    # Non-causal attention over the front layout's places start.. of every row's real keys.
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
    groups = query.shape[1] // key.shape[1]
    query = rearrange(query, "b (hkv g) t d -> b hkv (g t) d", g=groups)
    if groups > 1 and mask.shape[2] > 1:
        mask = repeat(mask, "b one t k -> b one (g t) k", g=groups)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale)
    return rearrange(out, "b hkv (g t) d -> b (hkv g) t d", g=groups)


def _full_varlen(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: Layout, start: int, scale: float | None
) -> torch.Tensor:
    fn, params = _varlen()  # type: ignore[misc]
    b, h, _, d = query.shape
    flat, cu, longest = layout.varlen(start)
    q, k, v = (rearrange(x, "b h t d -> (b t) h d")[flat] for x in (query, key, value))  # real tokens only
    kwargs: dict[str, Any] = {}
    if h != key.shape[1]:
        if "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        else:
            k, v = (repeat(x, "n hkv d -> n (hkv g) d", g=h // x.shape[1]) for x in (k, v))
    if scale is not None:
        if "scale" in params:
            kwargs["scale"] = scale
        else:
            q = q * (scale * d**0.5)
    attended = fn(q, k, v, cu, cu, longest, longest, **kwargs)  # (N, h, d)
    out = attended.new_zeros(b * query.shape[2], h, value.shape[-1]).index_copy_(0, flat, attended)
    return rearrange(out, "(b t) h d -> b h t d", b=b)


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
