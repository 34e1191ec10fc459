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
another, each token with its true position. Attention then runs per segment of the stream (``cu_seqlens``):
the variable-length flash kernel on CUDA (fp16/bf16), an exact per-sequence SDPA loop elsewhere. Each kind is
one or two such calls, with no gather: ``F``, ``B`` and ``R`` attend within each row over a causal, full or
reverse-causal window (flash attention's ``(left, right)`` window ``(0, -1)``: each query and every key
after it); ``M<n>F`` cuts each row into ``n + 1`` one-token segments (a query alone attends itself) and the
rest; ``M<n>B`` attends within ``[0..n][n+1..]`` and takes the head places from the reverse-causal call over
the whole row. Neither the MLP nor the projections ever see a padding token, and a stream of fixed size
needs no host value per batch, so it can be captured in a CUDA graph (:mod:`nosink.models.graphs`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from torch.nn.attention import SDPBackend, sdpa_kernel

from nosink.layerspec import Kind

from . import varlen
from .varlen import Segments, varlen_ready

if TYPE_CHECKING:
    from .riding import Rider

__all__ = [
    "Layout",
    "Packed",
    "Route",
    "Segments",
    "attend",
    "fast_route",
    "planless_sdpa",
    "varlen_ready",
]  # Segments, varlen_ready: from varlen

logger = logging.getLogger(__name__)

# Below this share of the sequence, the head queries of M<n>B use a small (n+1, T) mask; above it,
# the R route over the whole sequence (one causal kernel) is cheaper than a masked kernel (padded layout).
_SMALL_HEAD = 0.25

# SDPA's backends that need no plan per shape (see planless_sdpa), in SDPA's own order of preference.
_PLANLESS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


@contextlib.contextmanager
def planless_sdpa(device: torch.device) -> Iterator[None]:
    """SDPA calls inside the block, on a CUDA ``device``, never take cuDNN's attention backend.

    cuDNN builds an execution plan for each new shape of its inputs: on an H100 (torch 2.11) 3.8 ms of host time a
    call on average over a fresh process's first 10,000 texts on the padded path, 4.4 s of its 10.9 s, against 1.2 s
    with cuDNN's backend off; warm, the two were within noise (``benchmarks/results/cold-start/README.md``). Padded
    batches take a new shape at almost every batch. The flag is torch's, process-wide, for the block's duration.
    """
    if device.type != "cuda" or torch.compiler.is_compiling():
        yield
        return
    with sdpa_kernel(_PLANLESS):
        yield


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

    Built once per batch with one host sync (the row lengths, unless given). Attention then needs only
    the rows' bounds in the stream (``cu``) and each token's place in its row (``positions``), both on the
    device: every segmentation a layer kind asks for is computed from them, so a batch of fixed size (a
    CUDA graph's stream, :meth:`stream`) runs every kind with no host value but ``max_length``.

    Args:
        attention_mask: ``(B, T)``, 1 (or True) for real tokens, 0 for padding, on either side.
        lengths: the rows' real lengths, when already known on the host (then nothing here syncs).
    """

    def __init__(self, attention_mask: torch.Tensor, lengths: list[int] | None = None) -> None:
        real = attention_mask.bool()
        self.batch, self.seq = real.shape
        counts = real.sum(-1)  # (B,)
        self.lengths: list[int] | None = counts.tolist() if lengths is None else list(lengths)  # the one host sync
        self.total = sum(self.lengths)
        self.max_length = max(self.lengths, default=0)
        self.padded = self.total < self.batch * self.seq
        # (N,) rows of (B * T) holding real tokens, in order: a stable sort puts them first (nonzero would sync)
        self.index: torch.Tensor | None = torch.argsort((~real).flatten().to(torch.uint8), stable=True)[: self.total]
        self.cu = torch.zeros(self.batch + 1, dtype=torch.int32, device=real.device)
        self.cu[1:] = counts.cumsum(0)
        row = torch.repeat_interleave(torch.arange(self.batch, device=real.device), counts, output_size=self.total)
        self.positions = torch.arange(self.total, device=real.device) - self.cu[:-1].long()[row]  # (N,)
        self._cache: dict[Any, Any] = {}

    @classmethod
    def stream(cls, cu: torch.Tensor, positions: torch.Tensor, max_length: int) -> Packed:
        """A stream given by its rows' bounds ``cu (R + 1,)`` int32 and places ``positions (N,)``, on the device.

        ``max_length`` bounds every row's length (the kernels' grid is sized by it). Nothing is read on the
        host, so the values may change between runs of a captured CUDA graph; such a stream has no padded
        batch to pack or unpack, and its attention needs the variable-length kernel (CUDA, 16-bit floats).
        """
        packed = cls.__new__(cls)
        packed.batch, packed.seq = cu.shape[0] - 1, max_length
        packed.lengths, packed.index = None, None
        packed.total, packed.max_length, packed.padded = positions.shape[0], max_length, True
        packed.cu, packed.positions, packed._cache = cu, positions, {}
        return packed

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, ...) -> (1, N, ...)``: the real tokens, row after row."""
        if self.index is None:
            raise RuntimeError("a stream built from its bounds has no padded batch to pack")
        return rearrange(x, "b t ... -> (b t) ...").index_select(0, self.index)[None]

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """``(1, N, ...) -> (B, T, ...)``, zeros at the padding positions."""
        if self.index is None:
            raise RuntimeError("a stream built from its bounds has no padded batch to unpack into")
        out = x.new_zeros(self.batch * self.seq, *x.shape[2:])
        out.index_copy_(0, self.index, x[0, : self.total])
        return rearrange(out, "(b t) ... -> b t ...", b=self.batch)

    def rows(self) -> Segments:
        """Each row as one segment."""
        return self.split(0)

    def split(self, head: int, singles: bool = False) -> Segments:
        """Each row cut after its first ``head`` places: ``[head places][the rest]``, or with ``singles`` each
        of the first ``head`` places a segment of its own (empty segments where a row is shorter; cached)."""
        key = ("split", head, singles)
        if key not in self._cache:
            cuts = (list(range(head + 1)) if singles else [0, head]) if head else [0]  # each row's segment starts
            starts, ends = self.cu[:-1, None], self.cu[1:, None]  # (R, 1)
            offsets = torch.arange(len(cuts), dtype=self.cu.dtype, device=self.cu.device)  # no copy from the host
            offsets = offsets if singles or not head else offsets * head
            inner = torch.minimum(starts + offsets, ends)  # (R, len(cuts))
            cu = torch.cat([inner.flatten(), self.cu[-1:]])
            bounds = None
            if self.lengths is not None:  # the host's copy, for the per-sequence loop off the kernel
                bounds, at = [], 0
                for n in self.lengths:
                    bounds += [at + min(c, n) for c in cuts]
                    at += n
                bounds.append(at)
            self._cache[key] = Segments(cu, self.max_length, bounds)
        return self._cache[key]

    def firsts(self) -> tuple[torch.Tensor, torch.Tensor, Segments]:
        """Each row's first token: ``(index (R,)`` into the stream, where its output goes (``N`` for an empty row),
        and one query segment a row ``)`` (cached)."""
        if "firsts" not in self._cache:
            starts, empty = self.cu[:-1].long(), self.cu[1:] == self.cu[:-1]
            index = torch.where(empty, 0, starts)
            places = torch.where(empty, self.total, starts)
            cu = torch.arange(self.batch + 1, dtype=self.cu.dtype, device=self.cu.device)
            self._cache["firsts"] = (index, places, Segments(cu, 1, None))
        return self._cache["firsts"]

    def no_sink_heads(self) -> tuple[Segments, torch.Tensor]:
        """M0B's segments: each row as ``[first token][the rest]`` (:meth:`split` ``(1)``), and the keys each
        segment attends from its own bound on ``(2R,)`` int32: the whole row for the first, the rest for the rest
        (cached)."""
        if "no_sink_heads" not in self._cache:
            counts = self.cu[1:] - self.cu[:-1]  # (R,)
            used = torch.stack([counts, (counts - 1).clamp(min=0)], dim=1).flatten().to(torch.int32)
            self._cache["no_sink_heads"] = (self.split(1), used)
        return self._cache["no_sink_heads"]

    def in_head(self, head: int) -> torch.Tensor:
        """``(N, 1, 1)``: which tokens lie at places ``0..head-1`` of their rows (cached)."""
        key = ("in_head", head)
        if key not in self._cache:
            self._cache[key] = (self.positions < head)[:, None, None]
        return self._cache[key]


class Route:
    """How one layer kind attends over one batch: the kind and the batch's :class:`Layout`.

    Args:
        kind: the layer kind.
        layout: the batch's padded :class:`Layout`, or its :class:`Packed` stream of real tokens.
        tail: decode tokens riding after a packed stream, and the layer's index in their cache (see
            :mod:`nosink.models.riding`): the stream's last ``len(rider)`` tokens attend their cache rows instead.
    """

    def __init__(self, kind: Kind, layout: Layout | Packed, tail: tuple[Rider, int] | None = None) -> None:
        self.kind = kind
        self.layout = layout
        self.tail = tail

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
        if route.tail is None:
            return _attend_packed(query, key, value, route.kind, route.layout, scale)
        rider, layer = route.tail
        n = route.layout.total
        if query.shape[0] != 1 or query.shape[2] != n + len(rider):
            raise ValueError(f"a stream of {n} tokens and {len(rider)} riding takes (1, H, {n + len(rider)}, D)")
        out = _attend_packed(query[:, :, :n], key[:, :, :n], value[:, :, :n], route.kind, route.layout, scale)
        q, k, v = (rearrange(x[:, :, n:], "1 h r d -> r h d") for x in (query, key, value))
        return torch.cat([out, rider.attend(layer, q, k, v, scale)[None]], dim=1)
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
    # The stream (1, H, N, D): every sequence attends within itself, by kind, as one variable-length call per
    # segmentation of the stream (no gather, no flip). Returns (1, N, H, Dv).
    if query.shape[0] != 1 or query.shape[2] != packed.total:
        raise ValueError(f"a packed route takes one stream of {packed.total} tokens, got {tuple(query.shape)}")
    # Free for the layout the projections give (they make (1, N, H, D) and transpose it).
    q, k, v = (rearrange(x, "1 h n d -> n h d") for x in (query, key, value))
    if kind.sink is None:
        out = varlen.attend_segments(q, k, v, packed.rows(), varlen.WINDOWS[kind.direction], scale)
    elif kind.direction == "F":
        # Head places attend only themselves (one-token segments: their own value), the rest causally after them.
        out = varlen.attend_segments(q, k, v, packed.split(kind.sink + 1, singles=True), varlen.CAUSAL, scale)
    else:
        # Places after the head attend each other; head places attend every key at or after them in the row.
        head = kind.sink + 1
        on_kernel = head == 1 and q.shape[0] > 0 and varlen.kernel_applies(q)  # M0B on the flash kernel
        if on_kernel and varlen.takes_used_keys() and not _grad(q, k, v):
            # M0B in one call: each row's first query a segment over every key of the row, the rest a segment over
            # the keys after the first (the two segments' keys overlap: `used_keys`, inference only).
            segments, used = packed.no_sink_heads()
            return varlen.call(q, k, v, segments, varlen.FULL, scale, used_keys=used)[None]
        tail = varlen.attend_segments(q, k, v, packed.split(head), varlen.FULL, scale)
        if on_kernel:
            # M0B: each row's first query attends the whole row: one query a row over the rows' keys, written
            # back in place (empty rows write to a spare row), so long rows pay for no other query twice.
            index, places, firsts = packed.firsts()
            first = varlen.call(q.index_select(0, index), k, v, packed.rows(), varlen.FULL, scale, queries=firsts)
            out = torch.cat([tail, tail[:1]]).index_copy_(0, places, first)[: tail.shape[0]]
        else:
            first = varlen.attend_segments(q, k, v, packed.rows(), varlen.LATER, scale)
            out = torch.where(packed.in_head(head), first, tail)
    return out[None]  # (1, N, H, Dv)


def _grad(*tensors: torch.Tensor) -> bool:
    """Whether autograd records an operation on ``tensors`` (training: kernels without a backward are out)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


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
    if query.is_cuda and query.dtype in varlen.DTYPES and not keys_only and varlen.function() is not None:
        try:
            return _full_varlen(query, key, value, layout, start, scale)
        except (RuntimeError, TypeError) as err:  # a torch build whose varlen kernel refuses these inputs
            logger.warning("variable-length attention failed (%s); using a key-padding mask from now on", err)
            varlen.BROKEN.append(err)
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
    fn, params = varlen.function()  # type: ignore[misc]
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
