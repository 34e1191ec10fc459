"""CUDA graphs of the layer loop: a packed batch replays one captured graph instead of launching each kernel.

On a GPU, a small model's layers are cheap and the host is not: transformers' Python and the kernel launches
of 24 layers cost more than the GPU's work on a batch of short texts. A graph captures a whole run of the
layer loop (embedding, every step of the plans, the final norm) once and replays it with one launch.

A graph runs a stream of fixed size, its *bucket* (:class:`Bucket`): a batch's real rows, packed, then
filler rows of token 0 up to the bucket's token count, every row at most ``longest`` long. Per batch only
three buffers change: the token ids, each token's place in its row, and the rows' bounds (``cu``); the
stream's attention reads nothing else (:meth:`nosink.models.attention.Packed.stream`), so a replay is
exact for any batch of its bucket. A graph may take more inputs of one value per token (``extras``: the
pooled graphs' row of each token and its weight in its row's vector, see ``models/replaying.py``). Filler
rows attend only among themselves and their outputs are dropped. Buckets keep the stream within an eighth
above the batch's tokens.

A bucket is captured at its first batch, which the capture's replay then runs. A capture runs the function once
before (on the capture's stream, for what it initialises lazily), captures it, and instantiates the graph: on an H100
at the Qwen2.5-0.5B shape 23-91 ms, 17-22 ms and 6-8 ms of host time, about two batches run as they are
(``benchmarks/results/cold-start/``); every later batch of the bucket replays in one launch, so a call pays for its
graphs within itself once a bucket holds a few of its batches, and a second call on the same texts replays every
one. Graphs are captured into one memory pool shared by all the encoder's graphs (their intermediates reuse the same
memory: a replay's outputs are taken, on the same stream, before the next replay). At most :data:`GRAPH_LIMIT`
graphs are captured; batches of buckets beyond them run as they are. No graph is ever dropped for another: a workload
of more shapes than the limit (a server's batches of every size) would otherwise capture without end. Nothing here
knows transformers or the layer kinds: the encoder gives the function to capture.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import NamedTuple, TypeVar

import numpy as np
import torch

from .attention import Packed

__all__ = ["GRAPH_LIMIT", "GRAPH_MAX_LENGTH", "Bucket", "LayerGraphs", "bucket_of", "capture"]

logger = logging.getLogger(__name__)

GRAPH_MAX_LENGTH = 1024  # batches of longer rows run as they are (the encoder's rule: see EncoderFromDecoder)
GRAPH_LIMIT = 64  # graphs captured per encoder; each holds its outputs, the pool holds the largest one's work

Result = TypeVar("Result")
Body = Callable[[torch.Tensor, torch.Tensor, Packed, dict[str, torch.Tensor]], dict[str, torch.Tensor]]
Extras = Mapping[str, tuple[np.ndarray, float]]  # per-token inputs of a graph: each real token's value, the filler's


class Bucket(NamedTuple):
    """The fixed size of a captured stream."""

    tokens: int  # tokens in the stream, real and filler
    rows: int  # row slots (``cu`` has ``rows + 1`` bounds; unused slots are empty rows)
    longest: int  # bounds every row's length: the attention kernels' grid is sized by it


def bucket_of(lengths: Sequence[int], window: int | None = None) -> Bucket:
    """The bucket of a batch of rows of these real ``lengths``.

    Tokens round up by at most an eighth (to a multiple of 64 at least), the longest row to a power of two
    (at least 16, at most ``window``: a sliding window at or above every row's length must stay so), and
    the row slots, real and filler, to a power of two (at least 8).
    """
    total, longest = sum(lengths), max(max(lengths, default=1), 1)
    step = max(64, 2 ** max(math.floor(math.log2(max(total, 1))) - 3, 0))
    tokens = max(step, math.ceil(total / step) * step)
    bound = max(16, 2 ** math.ceil(math.log2(longest)))
    if window is not None and longest <= window < bound:
        bound = window
    rows = len(lengths) + math.ceil((tokens - total) / bound)
    return Bucket(tokens, max(8, 2 ** math.ceil(math.log2(rows))), bound)


def stream_places(lengths: Sequence[int], bucket: Bucket) -> tuple[np.ndarray, np.ndarray]:
    """``(positions (tokens,) int64, cu (rows + 1,) int32)`` of the real rows then filler rows of ``bucket``."""
    slack = bucket.tokens - sum(lengths)
    filler = [bucket.longest] * (slack // bucket.longest) + ([slack % bucket.longest] if slack % bucket.longest else [])
    sizes = np.asarray([*lengths, *filler], dtype=np.int64)
    if len(sizes) > bucket.rows or (sizes > bucket.longest).any():
        raise ValueError(f"rows of lengths {list(lengths)} do not fit {bucket}")
    cu = np.zeros(bucket.rows + 1, dtype=np.int32)
    cu[1 : len(sizes) + 1] = np.cumsum(sizes)
    cu[len(sizes) + 1 :] = bucket.tokens
    positions = np.arange(bucket.tokens, dtype=np.int64) - np.repeat(cu[: len(sizes)].astype(np.int64), sizes)
    return positions, cu


class _Graph:
    """One captured run: its static inputs and outputs."""

    def __init__(self, bucket: Bucket, device: torch.device, extras: Extras | None = None) -> None:
        self.bucket = bucket
        self.ids = torch.zeros(1, bucket.tokens, dtype=torch.long, device=device)
        self.positions = torch.zeros(1, bucket.tokens, dtype=torch.long, device=device)
        self.cu = torch.zeros(bucket.rows + 1, dtype=torch.int32, device=device)
        self.extras = {
            name: torch.zeros(bucket.tokens, dtype=torch.from_numpy(values[:0]).dtype, device=device)
            for name, (values, _) in (extras or {}).items()
        }
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs: dict[str, torch.Tensor] = {}

    def fill(self, lengths: Sequence[int], ids: torch.Tensor, extras: Extras | None = None) -> None:
        """Write a batch (its packed ids ``(1, N)``, on the device or pinned on the host, and its per-token extras)
        into the static inputs."""
        positions, cu = stream_places(lengths, self.bucket)
        hosted = [(self.positions, positions[None]), (self.cu, cu)]
        for name, (values, filler) in (extras or {}).items():
            whole = np.full(self.bucket.tokens, filler, dtype=values.dtype)
            whole[: len(values)] = values
            hosted.append((self.extras[name], whole))
        pinned = self.ids.device.type == "cuda"
        for target, values in hosted:
            host = torch.from_numpy(values)
            target.copy_(host.pin_memory() if pinned else host, non_blocking=True)
        n = ids.shape[1]
        self.ids[:, :n].copy_(ids, non_blocking=True)
        self.ids[:, n:].zero_()

    def stream(self) -> Packed:
        """The stream the captured function runs (a fresh one: its segmentations are computed inside the graph)."""
        return Packed.stream(self.cu, self.positions[0], self.bucket.longest)


class LayerGraphs:
    """An encoder's captured graphs, by plans and bucket (see the module docstring).

    Args:
        device: the CUDA device the model runs on.
        limit: graphs captured at most; later buckets run as they are.
    """

    def __init__(self, device: torch.device, limit: int = GRAPH_LIMIT) -> None:
        self.device = device
        self.limit = limit
        self.graphs: dict[Hashable, _Graph] = {}
        self.broken: Exception | None = None  # set when a capture failed: every batch then runs as it is
        self.refused: dict[Hashable, Exception] = {}  # keys whose capture failed alone (run's `isolated`)
        self.replays = 0
        self.captures = 0  # graphs captured so far (also those dropped by forget)
        self.capture_seconds = 0.0  # host time those captures took, their instantiation included
        self._pool: object | None = None
        self._lock = threading.Lock()

    def run(
        self,
        key: Hashable,
        lengths: Sequence[int],
        ids: torch.Tensor,
        body: Body,
        take: Callable[[dict[str, torch.Tensor]], Result],
        window: int | None = None,
        extras: Extras | None = None,
        isolated: bool = False,
    ) -> Result | None:
        """Run a packed batch through the graph of ``key`` (the plans) and its bucket; ``None``: run it eagerly.

        Args:
            key: what ``body`` computes (the plans' names, and whatever else shapes it); one graph per key and
                bucket.
            lengths: the batch's row lengths, in stream order.
            ids: its packed token ids ``(1, N)``, on the device or pinned on the host.
            body: ``(ids (1, n), positions (1, n), stream, extras) -> {name: tensor}``, the function captured
                (the layer loop's outputs are ``(1, n, D)``).
            take: reads the outputs (views of the graph's memory, the first ``N`` tokens meaningful) into
                tensors of its own, on the current stream, before any other replay.
            window: the smallest sliding window of the plans' layers, if any (see :func:`bucket_of`).
            extras: more inputs of one value per token, by name: ``(the N real tokens' values, the filler
                tokens' value)``; ``body`` gets them as ``(n,)`` tensors of the same dtypes. Give the same
                names and dtypes with every batch of a key.
            isolated: a failed capture of this key turns off only this key's graphs (listed in ``refused``), not
                every graph of the encoder.
        """
        if self.broken is not None or key in self.refused or torch.cuda.is_current_stream_capturing():
            return None
        bucket = bucket_of(lengths, window)
        name = (key, bucket)
        with self._lock:
            graph = self.graphs.get(name)
            if graph is None:
                if len(self.graphs) >= self.limit:
                    return None
                graph = self._capture(name, bucket, lengths, ids, body, extras, key if isolated else None)
                if graph is None:
                    return None
            else:
                graph.fill(lengths, ids, extras)
            graph.graph.replay()  # type: ignore[union-attr]
            self.replays += 1
            return take(graph.outputs)

    def forget(self, which: Callable[[Hashable], bool]) -> None:
        """Drop the graphs whose ``(key, bucket)`` name ``which`` picks: graphs that read buffers their owner has
        freed, which would never replay again."""
        with self._lock:
            for name in [name for name in self.graphs if which(name)]:
                del self.graphs[name]
            if not self.graphs:
                self._pool = None  # freed with its last graph: a capture into it would fail

    def _capture(
        self,
        name: Hashable,
        bucket: Bucket,
        lengths: Sequence[int],
        ids: torch.Tensor,
        body: Body,
        extras: Extras | None,
        isolated: Hashable = None,
    ) -> _Graph | None:
        graph = _Graph(bucket, self.device, extras)
        started = time.perf_counter()
        try:
            graph.fill(lengths, ids, extras)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph.graph, graph.outputs = capture(
                lambda: body(graph.ids, graph.positions, graph.stream(), graph.extras), self.device, self._pool
            )
        except Exception as err:  # a kernel that cannot be captured, or a host sync inside the loop
            if isolated is not None:
                self.refused[isolated] = err
                logger.warning("no CUDA graph for %s: capturing it failed (%s)", isolated, err)
                return None
            self.broken = err
            logger.warning("CUDA graphs are off for this encoder: capturing a batch failed (%s)", err)
            return None
        self.graphs[name] = graph
        self.captures += 1
        self.capture_seconds += time.perf_counter() - started
        logger.debug("captured a CUDA graph for %s (%d kept)", bucket, len(self.graphs))
        return graph


def capture(run: Callable[[], Result], device: torch.device, pool: object) -> tuple[torch.cuda.CUDAGraph, Result]:
    """``run()`` captured as a CUDA graph into the memory ``pool``: the graph, and the outputs its replays overwrite.

    ``run`` is called once before, on the same side stream, for what it initialises lazily. Not
    ``torch.cuda.graph()``: that synchronizes the device and empties the allocator's cache before each capture,
    which a server capturing a new shape between requests would pay for in every allocation after. The capture
    is ``thread_local``: other threads of the process (a server's) may use CUDA meanwhile.

    Raises:
        RuntimeError: from torch, where ``run`` launches something a graph cannot hold (a host synchronisation).
    """
    current = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(current)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.stream(side):
            run()
            graph.capture_begin(pool=pool, capture_error_mode="thread_local")
            try:
                outputs = run()
            finally:
                graph.capture_end()
    finally:  # even after a failure: what runs next on this stream must not overtake the side stream's writes
        current.wait_stream(side)
    return graph, outputs
