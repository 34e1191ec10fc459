"""The running chats' KV cache: fixed buffers whose rows are the chats, one decode step replayed as a CUDA graph.

Chats start with :func:`prefill` (their prompts, left-padded, in one forward through transformers' own dynamic
cache) and move into :class:`Rows`, the cache every decode step uses. Its buffers hold, per layer, keys and
values of ``(R, heads, W, head_dim)``: row ``i`` is one chat, whose tokens fill the columns just left of
``end`` (right-aligned, as in the prefill's left padding); ``mask`` (``(R, W)``, True on a chat's tokens) says
which. A step writes every row's new token at column ``end`` (each layer's ``index_copy_`` in place, in
:class:`_Slot`), attends over all ``W`` columns under an additive mask built from ``mask`` (a sliding-window
layer also hides the columns ``window`` or more behind), and moves ``end`` on. Positions count each row's own
tokens. Rows past the chats (a batch is run at the next power of two of rows) and columns past ``end`` are
masked: their contents never reach a chat's logits.

Because the buffers stay where they are, a step has the same tensors every time, so on a GPU it is captured
once per row count (a power of two) and replayed: one launch instead of transformers' Python and a few
hundred kernels per step, which made a small model's decode step 10-30 ms whatever the batch. A step that
does not fit (more rows or columns than the buffers) first grows them, by doubling, and drops the graphs;
when the last chat leaves, buffers wider than the first width are freed. Joining and leaving copy rows and
columns (:meth:`Rows.join`, :meth:`Rows.keep`), which happens when chats start or end, not per step.

Layers: full attention and sliding window (transformers' ``DynamicLayer`` and ``DynamicSlidingWindowLayer``
after the prefill), with one window size; any other kind of cache layer is refused.

With ``compiled=True`` the forward goes through ``torch.compile`` (dynamic shapes) before its graph is captured:
transformers' layers launch about 42 kernels a layer for a few rows (norms, rotary embedding, casts, one by one;
``benchmarks/results/serve-gpu-14/decode-ops.txt``), which a compiled forward fuses. The first forward of one row
and the first of several rows each wait for a compilation, and each length fed is one more (the chats compile
their decode steps, not their prompts' prefill): :meth:`Rows.warm_up` does the first two before any chat (the server
does it at start-up). On an H200 these took minutes, and a compiled step 1.5-1.9 ms against 2.6-2.9 ms uncompiled
for 1-16 chats on the Qwen2.5-0.5B shape (``benchmarks/results/serve-gpu-15/``). Where torch.compile itself fails,
the forward runs uncompiled from then on, with a warning.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicLayer, DynamicSlidingWindowLayer

from nosink.models.graphs import capture
from nosink.models.riding import Rider

logger = logging.getLogger(__name__)

FIRST_WIDTH = 256  # columns of the first buffers (and of those kept while no chat runs)
PREFILL_MIN = 16  # prompts are left-padded to a power of two of at least this many tokens
PREFILL_GRAPH_MAX = 512  # longer prompts are prefilled as they are, not by a graph
_SERIALS = itertools.count()  # each Rows's serial number (its id() may be another's after it is gone)


@dataclass
class Batch:
    """Prompts just prefilled: transformers' cache of them and which of its columns each one's tokens fill."""

    cache: Any  # a DynamicCache whose batch rows are the prompts
    mask: torch.Tensor  # (n, P) long: 1 on a prompt's tokens, 0 on its left padding

    def __len__(self) -> int:
        return self.mask.shape[0]


def prefill(lm: torch.nn.Module, prompts: list[list[int]]) -> tuple[torch.Tensor, Batch]:
    """Run ``prompts`` left-padded in one forward: the logits of each one's next token ``(n, V)``, and their batch."""
    device = next(lm.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)  # (n, P); the padding id is never attended to
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (n, P): each prompt counts from 0 at its first token
    out = lm(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    _check_layers(out.cache)
    return out.logits[:, -1], Batch(out.cache, mask)  # logits: (n, 1, V)


class Rows:
    """The chats being decoded: their KV cache in fixed buffers, and the step that advances them all by a token.

    Args:
        lm: the causal LM (its prefill's cache layers say each layer's kind).
        graphs: replay each step as a CUDA graph where the model is on a GPU (``False``: always run it as it is).
        rows: rows of the first buffers (the chats expected side by side: growing the buffers drops the graphs).
        compiled: run the forward through ``torch.compile`` (experimental; see the module docstring).
    """

    def __init__(self, lm: torch.nn.Module, graphs: bool = True, rows: int = 1, compiled: bool = False) -> None:
        self.lm = lm
        self.use_graphs = graphs
        self._compiled: Callable[[int, int], torch.Tensor] | None = None
        if compiled:
            try:
                self._compiled = _compile(self._forward)
            except RuntimeError as err:  # this torch or Python cannot compile: the steps run as they are
                logger.warning("chat steps run uncompiled: %s", err)
        self.first_rows = rows
        self.n = 0  # chats: rows 0..n-1
        self.end = 0  # columns 0..end-1 may hold tokens; the next token of every row goes to column `end`
        self.windows: list[int | None] | None = None  # per layer: its sliding window, None for full attention
        self.layout: list[tuple[int, int, torch.dtype, torch.device]] = []  # per layer: heads, head_dim, dtype, device
        self.keys: list[torch.Tensor] = []  # per layer (R, heads, W, head_dim)
        self.values: list[torch.Tensor] = []
        self.mask: torch.Tensor | None = None  # (R, W) bool: True on a chat's tokens
        self.fed: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # L -> (R, L) ids fed and (R, L) bool: real ones
        self.column: torch.Tensor | None = None  # (1,) long: the first column the next forward writes
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}  # (rows, L) -> graph, logits
        self.broken: Exception | None = None  # a capture failed: steps run as they are from then on
        self.captures = 0  # graphs captured so far (growing the buffers drops them: they are captured again)
        self.generation = 0  # counts the buffers made: a rider's key (graphs of older buffers never replay)
        self.serial = next(_SERIALS)  # this Rows among all of the process's, even after it is gone (a rider's key)
        self._pool: object | None = None

    def __len__(self) -> int:
        return self.n

    def graph_counts(self) -> dict[str, int]:
        """The graphs kept now and captured in all (growing the buffers drops them; they are captured again)."""
        return {"graphs": len(self.graphs), "captures": self.captures}

    @property
    def compiling(self) -> bool:
        """Whether the steps run compiled (asked for, and no compilation failed so far)."""
        return self._compiled is not None

    @property
    def width(self) -> int:
        """Columns in use: the longest chat's tokens."""
        return self.end

    # -- chats joining and leaving

    def join(self, parts: Sequence[Batch | Rows | _Row]) -> None:
        """Append the rows of ``parts`` (prefilled prompts, or other :class:`Rows`) after the chats, in order.

        Rows shorter than ``end`` are padded on the left; if a part is longer, the chats move right to make room.
        The parts are left as they were.
        """
        if not parts:
            return
        incoming = [_columns(p) for p in parts]  # (mask (m, L), per layer (keys, values) of (m, h, L_j, d))
        if self.windows is None:
            self.windows, self.layout = _windows(parts[0]), _layout(incoming[0][1])
        new_end = max([self.end] + [mask.shape[1] for mask, _ in incoming])
        rows = self.n + sum(mask.shape[0] for mask, _ in incoming)
        self._fit(rows, new_end + 1)
        assert self.mask is not None
        if new_end > self.end:  # the chats move right: their columns end at new_end
            shift = new_end - self.end
            buffers = [(b, b.view(b.shape[0], b.shape[1], b.shape[2], -1)) for b in (*self.keys, *self.values)]
            buffers.append((self.mask, self.mask.view(self.mask.shape[0], 1, self.mask.shape[1], 1)))
            # (rows, ., columns, .) views: every copy made before anything is written, so a failure changes nothing
            moved = [view[: self.n, :, : self.end].clone() for _, view in buffers]
            for (_, view), part in zip(buffers, moved, strict=True):
                view[: self.n, :, :shift] = 0
                view[: self.n, :, shift:new_end] = part
            self.end = new_end
        row = self.n
        for mask, layers in incoming:
            m = mask.shape[0]
            for buffer in (*self.keys, *self.values):
                buffer[row : row + m] = 0  # nothing stale in the columns the new rows leave masked
            self.mask[row : row + m] = False
            self.mask[row : row + m, new_end - mask.shape[1] : new_end] = mask.bool()
            for j, (keys, values) in enumerate(layers):
                held = keys.shape[2]  # a sliding layer holds only its last window - 1 columns
                self.keys[j][row : row + m, :, new_end - held : new_end] = keys
                self.values[j][row : row + m, :, new_end - held : new_end] = values
            row += m
        self.n = rows

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only ``rows`` (in that order), and cut the columns that are padding in all of them."""
        if not rows:
            self.clear()
            return
        assert self.mask is not None
        index = torch.tensor(list(rows), dtype=torch.long, device=self.mask.device)
        k = len(rows)
        mask = self.mask.index_select(0, index)[:, : self.end]  # (k, end)
        cut = int((~mask.any(0)).long().cumprod(0).sum())  # leading columns with no token
        width = self.end - cut
        # Everything kept is copied out before anything is written, so a failure (out of memory) changes nothing.
        kept = [buffer.index_select(0, index)[:, :, cut : self.end] for buffer in (*self.keys, *self.values)]
        for buffer, part in zip((*self.keys, *self.values), kept, strict=True):
            buffer.zero_()  # nothing stale (a NaN of a chat gone) stays in a column a later chat leaves masked
            buffer[:k, :, :width] = part
        self.mask.zero_()
        self.mask[:k, :width] = mask[:, cut:]
        self.n, self.end = k, width

    def split(self) -> list[Rows]:
        """Each chat alone in a :class:`Rows` of its own that runs no graph (to retry a failed step chat by chat)."""
        alone = []
        for i in range(self.n):
            one = Rows(self.lm, graphs=False)
            one.join([_Row(self, i)])
            alone.append(one)
        return alone

    def clear(self) -> None:
        """No chat any more: the buffers are kept if they are the first size, else freed with the graphs."""
        self.n = self.end = 0
        if self.mask is not None:
            self.mask.zero_()
            if self.mask.shape[1] > FIRST_WIDTH:
                self._free()
            else:  # nothing stale (a NaN of a chat gone) stays in a column a later chat leaves masked
                for buffer in (*self.keys, *self.values):
                    buffer.zero_()

    def warm_up(self) -> None:
        """Run the decode step of one chat and, where the buffers have rows for several, of two (dummy chats, gone
        after), so that their compilations (with ``compiled=True``: a step of one row and one of several each compile
        once) are done before any chat waits for them, with the graphs of one and two rows (those of more rows are
        captured at their first step). The buffers are kept, empty."""
        if self.n:
            raise ValueError("warm_up runs before any chat joins")
        for n in (1, 2) if self.first_rows > 1 else (1,):  # two rows would grow one-row buffers: a new compilation
            incoming = Rows(self.lm, graphs=False)
            incoming.prefill([[0]] * n)
            self.join([incoming])
            self.step([0] * n)
            self.clear()

    # -- the forward passes

    def step(self, tokens: Sequence[int]) -> torch.Tensor:
        """Feed each chat its next token (one forward for all): the logits of the token after ``(n, V)``.

        A step that fails leaves the chats as they were (its writes are to a column no mask shows yet).
        """
        if len(tokens) != self.n:
            raise ValueError(f"a step feeds one token to each of the {self.n} chats, got {len(tokens)}")
        return self._run([[t] for t in tokens], 1)

    def prefill(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """Start ``prompts`` in this empty :class:`Rows` (one forward, left-padded to a power of two of at least
        16 tokens): the logits of each one's next token ``(n, V)``. Join them to the running chats with
        :meth:`join`, then :meth:`clear` this one for the next prompts."""
        if self.n:
            raise ValueError("prefill starts chats in an empty Rows; join it to the running ones")
        if not prompts or not all(prompts):
            raise ValueError("prefill needs at least one prompt, and every prompt at least one token")
        self._learn_layers()
        length = max(PREFILL_MIN, 1 << (max(len(p) for p in prompts) - 1).bit_length())
        self.n = len(prompts)
        try:
            return self._run(prompts, length)
        except BaseException:
            self.clear()
            raise

    def rider(self, tokens: Sequence[int]) -> Rider:
        """The step that feeds each chat its next token, as a :class:`~nosink.models.riding.Rider` of an encoder's
        batch (the same forward as :meth:`step`, in the batch's pass); :meth:`ridden` then takes its logits.

        Its rows are all the buffers' rows (the chats, then filler), so that one CUDA graph of the encoder serves
        every count of chats; its key changes only when the buffers are made anew.

        Raises:
            ValueError: if ``tokens`` are not one a chat.
        """
        if len(tokens) != self.n or not self.n:
            raise ValueError(f"a step feeds one token to each of the {self.n} chats, got {len(tokens)}")
        assert self.lm is not None
        self._load([[t] for t in tokens], 1, all_rows=True)
        assert self.mask is not None and self.column is not None
        ids, real = self._fed(1)
        rows = self.mask.shape[0]
        key = (self.serial, self.generation, rows, self.mask.shape[1])  # never an earlier, freed buffers' key
        return Rider(ids[:, 0], real[:, 0], self.keys, self.values, self.mask, self.column, _head(self.lm), key)

    def ridden(self, rider: Rider) -> torch.Tensor:
        """The logits ``(n, V)`` of a :meth:`rider`'s step once an encoder's pass carried it; the chats move on.

        Raises:
            ValueError: if no pass carried the rider (its logits are not set), or it is another buffers' rider.
        """
        if rider.logits is None or rider.mask is not self.mask:
            raise ValueError("this rider was not carried by a pass over these chats' buffers")
        return self._commit(rider.logits, self.n, 1)

    def _run(self, fed: Sequence[Sequence[int]], length: int) -> torch.Tensor:
        """Feed row ``i`` the tokens ``fed[i]``, left-padded to ``length``, in one forward: ``(n, V)`` logits."""
        rows = self._load(fed, length)
        logits = self._replay(rows, length)
        if logits is None:
            logits = self._compiled_or_not(rows, length)
        return self._commit(logits, len(fed), length)

    def _compiled_or_not(self, rows: int, length: int) -> torch.Tensor:
        """:meth:`_forward`, compiled where asked; a compilation that fails turns compiling off (with a warning)."""
        if self._compiled is not None:
            try:
                return self._compiled(rows, length)
            except _COMPILE_ERRORS as err:  # any other error is the step's own, and fails it as it would uncompiled
                if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                    raise  # the capture fails as it is (see _capture)
                logger.warning("chat steps run uncompiled: compiling one failed (%s)", err)
                self._compiled = None
        return self._forward(rows, length)

    def _load(self, fed: Sequence[Sequence[int]], length: int, all_rows: bool = False) -> int:
        """Write the tokens ``fed[i]`` of row ``i``, left-padded to ``length``, into the buffers a forward reads (grown
        to fit), and the column it writes; the rows it runs: the next power of two (one graph serves every count up
        to it), or with ``all_rows`` every row of the buffers."""
        n = len(fed)
        self._fit(n, self.end + length)
        assert self.mask is not None and self.column is not None
        rows = self.mask.shape[0] if all_rows else 1 << (n - 1).bit_length()
        ids, real = self._fed(length)
        host_ids = torch.zeros(rows, length, dtype=torch.long)
        host_real = torch.zeros(rows, length, dtype=torch.bool)
        for i, tokens in enumerate(fed):
            host_ids[i, length - len(tokens) :] = torch.tensor(list(tokens), dtype=torch.long)
            host_real[i, length - len(tokens) :] = True
        ids[:rows].copy_(host_ids, non_blocking=True)
        real[:rows].copy_(host_real, non_blocking=True)
        self.column.fill_(self.end)
        return rows

    def _commit(self, logits: torch.Tensor, n: int, length: int) -> torch.Tensor:
        """After a forward of ``n`` rows' ``length`` tokens: their columns join the mask; the first ``n`` logits."""
        assert self.mask is not None
        out = logits[:n].to(torch.float32, copy=True)  # its own: a graph's logits are overwritten by its next replay
        self.mask[:n, self.end : self.end + length] = self._fed(length)[1][:n]
        self.end += length
        return out

    def _forward(self, rows: int, length: int) -> torch.Tensor:
        """The forward of the first ``rows`` rows, ``length`` tokens each (what a graph captures): ``(rows, V)``.

        Query ``q`` of a row (written at column ``at[q]``) sees the row's earlier tokens and its own column;
        a sliding-window layer only the last ``window`` columns of these.
        """
        assert self.mask is not None and self.column is not None and self.windows is not None
        ids, real = self._fed(length)
        ids, real, mask = ids[:rows], real[:rows], self.mask[:rows]  # (rows, L), (rows, L), (rows, W)
        columns = torch.arange(mask.shape[1], device=mask.device)  # (W,)
        at = self.column + torch.arange(length, device=mask.device)  # (L,): the columns written
        tokens = mask.index_copy(1, at, real)  # (rows, W): every token, the fed ones included
        positions = (mask.sum(-1, keepdim=True) + real.cumsum(-1) - 1).clamp(min=0)  # (rows, L)
        behind = columns[None, :] <= at[:, None]  # (L, W)
        own = columns[None, :] == at[:, None]
        live = (tokens[:, None, :] & behind[None]) | own[None]  # (rows, L, W)
        dtype = self.keys[0].dtype
        masks = {}
        if None in self.windows:
            masks["full_attention"] = _additive(live, dtype)
        window = next((w for w in self.windows if w is not None), None)
        if window is not None:
            masks["sliding_attention"] = _additive(live & (columns[None, :] > at[:, None] - window)[None], dtype)
        layers = [_Slot(k[:rows], v[:rows], at) for k, v in zip(self.keys, self.values, strict=True)]
        out = self.lm(
            input_ids=ids,
            attention_mask=masks if len(masks) > 1 else next(iter(masks.values())),
            position_ids=positions,
            cache=Cache(layers=layers),
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1]

    def _replay(self, rows: int, length: int) -> torch.Tensor | None:
        """The logits from the graph of ``(rows, length)`` (captured at its first use); None where none runs."""
        device = self.keys[0].device
        if not self.use_graphs or device.type != "cuda" or self.broken is not None or length > PREFILL_GRAPH_MAX:
            return None
        if (rows, length) not in self.graphs:
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            try:
                self.graphs[rows, length] = self._capture(rows, length, device)
                self.captures += 1
            except Exception as err:  # a kernel that cannot be captured, or a host sync in the model's forward
                self.broken = err
                logger.warning("chat decoding runs without CUDA graphs: capturing a step failed (%s)", err)
                return None
            logger.debug("captured a chat forward of %d rows x %d tokens over %d columns", rows, length, self.width)
        graph, logits = self.graphs[rows, length]
        graph.replay()
        return logits

    def _capture(self, rows: int, length: int, device: torch.device) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """The graph of ``(rows, length)``, compiled where asked. If that capture fails and the forward as it is
        captures, compiling is turned off (with a warning); if both fail, the error is the capture's own."""
        if self._compiled is None:
            return capture(lambda: self._forward(rows, length), device, self._pool)
        try:
            return capture(lambda: self._compiled_or_not(rows, length), device, self._pool)
        except Exception as err:
            self._pool = torch.cuda.graph_pool_handle()  # the failed capture may have left the pool recording
            graph = capture(lambda: self._forward(rows, length), device, self._pool)
            logger.warning("chat steps run uncompiled: capturing a compiled step failed (%s)", err)
            self._compiled = None
            return graph

    def _fed(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The buffers of the ids fed ``length`` at a time and of which of them are real (not left padding)."""
        if length not in self.fed:
            assert self.mask is not None
            rows, device = self.mask.shape[0], self.mask.device
            self.fed[length] = (
                torch.zeros(rows, length, dtype=torch.long, device=device),
                torch.zeros(rows, length, dtype=torch.bool, device=device),
            )
        return self.fed[length]

    def _learn_layers(self) -> None:
        """Each layer's kind and key shape, from a one-token forward through transformers' own cache."""
        if self.windows is None:
            with torch.no_grad():
                _, batch = prefill(self.lm, [[0]])
            self.windows, self.layout = _windows(batch), _layout(_columns(batch)[1])

    # -- the buffers

    def _fit(self, rows: int, width: int) -> None:
        """Buffers of at least ``rows`` rows and ``width`` columns, grown by doubling; their contents kept."""
        have_rows, have_width = self.mask.shape if self.mask is not None else (0, 0)
        if rows <= have_rows and width <= have_width:
            return
        new_rows = max(have_rows, 1 << (max(rows, self.first_rows) - 1).bit_length())  # a power of two: see _run
        new_width = max(have_width, FIRST_WIDTH)
        while new_width < width:
            new_width *= 2
        keys = [torch.zeros(new_rows, heads, new_width, dim, dtype=dtype, device=device)
                for heads, dim, dtype, device in self.layout]  # fmt: skip
        device = self.layout[0][3]
        values = [torch.zeros_like(k) for k in keys]
        mask = torch.zeros(new_rows, new_width, dtype=torch.bool, device=device)
        if self.mask is not None and self.end:
            # n may already count rows the old buffers lack (a prefill sets it first): they hold nothing yet
            kept = min(self.n, have_rows)
            for new, old in zip(keys + values, self.keys + self.values, strict=True):
                new[:kept, :, : self.end] = old[:kept, :, : self.end]
            mask[:kept, : self.end] = self.mask[:kept, : self.end]
        self._free()
        self.keys, self.values, self.mask = keys, values, mask
        self.column = torch.zeros(1, dtype=torch.long, device=device)

    def _free(self) -> None:
        self.generation += 1
        self.graphs.clear()  # they read the old buffers
        self._pool = None  # freed with its last graph: a capture into it now would fail
        self.keys, self.values, self.mask, self.column = [], [], None, None
        self.fed.clear()


class _Slot(CacheLayerMixin):
    """One layer's cache during a forward: writes the new keys and values at ``columns`` of its buffers, in place."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, columns: torch.Tensor) -> None:
        super().__init__()
        self.keys, self.values, self.columns = keys, values, columns
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Nothing to do: the buffers exist."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple:
        """Write the ``(rows, heads, L, head_dim)`` states at the columns; the whole buffers to attend over."""
        self.keys.index_copy_(2, self.columns, key_states.to(self.keys.dtype))
        self.values.index_copy_(2, self.columns, value_states.to(self.values.dtype))
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """Every column (the step's mask is given whole, so transformers never asks)."""
        return self.keys.shape[2], 0

    def get_seq_length(self) -> int:
        """The buffers' width (positions are given, so transformers never asks)."""
        return self.keys.shape[2]

    def get_max_length(self) -> int:
        """The buffers' width."""
        return self.keys.shape[2]


class _Row:
    """Row ``i`` of a :class:`Rows`, as :meth:`Rows.join` reads a part."""

    def __init__(self, rows: Rows, i: int) -> None:
        self.rows, self.i = rows, i


def _columns(part: Batch | Rows | _Row) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """A part's mask ``(m, L)`` and per layer its keys and values ``(m, heads, L_j, head_dim)``, right-aligned."""
    if isinstance(part, Batch):
        return part.mask, [(layer.keys, layer.values) for layer in part.cache.layers]
    rows, pick = (part.rows, slice(part.i, part.i + 1)) if isinstance(part, _Row) else (part, slice(0, part.n))
    assert rows.mask is not None
    end = rows.end
    start = int((~rows.mask[pick, :end].any(0)).long().cumprod(0).sum())  # leading columns with no token: left out
    layers = zip(rows.keys, rows.values, strict=True)
    return rows.mask[pick, start:end], [(k[pick, :, start:end], v[pick, :, start:end]) for k, v in layers]


def _windows(part: Batch | Rows | _Row) -> list[int | None]:
    """Each layer's sliding window (None: full attention) as a part's cache says."""
    if not isinstance(part, Batch):
        source = part.rows if isinstance(part, _Row) else part
        assert source.windows is not None
        return list(source.windows)
    windows = [layer.sliding_window if isinstance(layer, DynamicSlidingWindowLayer) else None
               for layer in part.cache.layers]  # fmt: skip
    if len({w for w in windows if w is not None}) > 1:
        raise TypeError("batched chat decoding supports one sliding-window size per model")
    return windows


def _head(lm: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """The LM's head as its forward applies it: final-normed states ``(n, D)`` to logits ``(n, V)``."""
    head = lm.get_output_embeddings()
    cap = getattr(lm.config, "final_logit_softcapping", None)
    if head is None:
        raise TypeError(f"{type(lm).__name__} has no output embeddings (an LM head) to give logits")
    if cap is None:
        return head
    return lambda hidden: torch.tanh(head(hidden) / cap) * cap


def _layout(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> list[tuple[int, int, torch.dtype, torch.device]]:
    """Each layer's heads, head_dim, dtype and device, from its keys ``(m, heads, L, head_dim)``."""
    return [(keys.shape[1], keys.shape[3], keys.dtype, keys.device) for keys, _ in layers]


def _additive(keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(rows, L, W)`` True-to-attend as transformers' additive mask ``(rows, 1, L, W)``: 0 or the dtype's minimum."""
    mask = torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, torch.finfo(dtype).min)
    return mask[:, None]


def _check_layers(cache: Any) -> None:
    """Refuse a cache with a kind of layer whose columns :class:`Rows` does not know."""
    for layer in cache.layers:
        if type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer):
            kind = type(layer).__name__
            raise TypeError(f"batched chat decoding supports full and sliding-window attention caches, not {kind}")


def _compile_errors() -> tuple[type[BaseException], ...]:
    """torch.compile's own failures (its backend's, dynamo's), not those of the code it compiles."""
    exc = getattr(getattr(torch, "_dynamo", None), "exc", None)
    names = ("BackendCompilerFailed", "InternalTorchDynamoError")
    return tuple(getattr(exc, name) for name in names if exc is not None and hasattr(exc, name)) or (RuntimeError,)


_COMPILE_ERRORS = _compile_errors()


def _compile(forward: Callable[[int, int], torch.Tensor]) -> Callable[[int, int], torch.Tensor]:
    """``forward`` through ``torch.compile`` with dynamic shapes (one compilation serves the row counts and lengths).

    Raises:
        RuntimeError: if this torch or Python cannot compile.
    """
    dynamo = getattr(torch, "_dynamo", None)
    if dynamo is None or not dynamo.is_dynamo_supported():
        raise RuntimeError(f"torch.compile is not available with torch {torch.__version__} on this Python")
    return torch.compile(forward, dynamic=True)
