"""The encoder's CUDA graphs: which batches replay one, the function a graph captures, and compiling it.

A mixin of :class:`~nosink.models.encoder.EncoderFromDecoder` (as :class:`~nosink.models.encoding.TextEncoding` is):
the graphs themselves (buckets, capture, replay) are :mod:`nosink.models.graphs`'; this module decides when the
encoder uses them and what they capture: the layer loop over a packed stream, compiled by ``torch.compile`` where the
encoder compiles.

With ``compile=None`` (the default) the graphs' layer loop is compiled only where that repays: by
:meth:`GraphReplay.warm_up` (a server's start-up, or a user who knows a long job is coming), or by a call of
``encode()`` of at least :data:`COMPILE_REPAID_TEXTS` texts before its first batch. Compiling costs 10-16 s once per
process and made replays about 1.3x faster (an H100, the Qwen2.5-0.5B and Llama-3.2-1B shapes): it repays after
300,000-600,000 short texts, so a notebook's, a script's or ``nosink encode``'s call of a few thousand never waits for
it (``benchmarks/results/cold-start/README.md``). ``compile=True``: every layer call, from the first batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import torch

from nosink.checks import printable
from nosink.layerspec import MAIN, Plan

from . import batching as _batching
from . import texts as _texts
from .attention import Packed, varlen_ready
from .batch import Batch, board, prepends
from .families import LayerCompileError
from .graphs import GRAPH_MAX_LENGTH, Body, LayerGraphs, bucket_of
from .pooling import Pooling, pool_stream, stream_weights
from .riding import Rider

if TYPE_CHECKING:
    from .families import DecoderParts

__all__ = ["COMPILE_REPAID_TEXTS", "GraphReplay"]

logger = logging.getLogger(__name__)

Result = TypeVar("Result")

# A pooled graph (see GraphReplay._replay_pooled) weighs its tokens with a (rows, tokens) float32 matrix: buckets
# beyond this many entries (32 MiB; long rows, where the host's launches matter least) run as they are.
POOLED_MAX = 8 * 1024 * 1024
# A call of encode() of at least this many texts compiles the graphs' layer loop first (compile=None): see the module
# docstring.
COMPILE_REPAID_TEXTS = 500_000
_RIDDEN = "\x00rider logits"  # a pooled graph's output of a rider's logits (no plan is named so)


class _Carrying(NamedTuple):
    """The part of a graph's key that says it carries a rider, and which (its buffers' key)."""

    rider: Hashable


class GraphReplay:
    """CUDA graphs of the layer loop for an encoder (see the module docstring)."""

    parts: DecoderParts

    def _setup_graphs(self, cuda_graphs: bool, compile: bool | dict[str, Any] | None) -> None:
        if cuda_graphs not in (True, False):
            raise TypeError(f"cuda_graphs must be True or False, got {printable(repr(cuda_graphs))}")
        self.cuda_graphs = cuda_graphs
        self._graphs: LayerGraphs | None = None  # made at the first batch that can use them
        self._graphs_owner: tuple[Any, ...] | None = None  # the weights they were captured with (see _replay)
        self._compile_asked = compile is not None and compile is not False  # then a failure to compile is an error
        if self._compile_asked:
            self.parts.compile_layers({} if compile is True else compile)
        self._compile_later = compile is None  # the graphs' layer loop compiles where it repays (warm_up)
        self._rider_key: Hashable = None  # the key of the rider the graphs last carried (see _replay_pooled)
        self._riders_broken: Exception | None = None  # a rider's graph failed to capture: no batch carries one now

    def warm_up(self) -> bool:
        """Compile the layer loop that CUDA graphs capture now, by running one small batch through it: a server calls
        this before it takes requests, and so may a user before a long job (``encode()`` does it itself for a call
        of :data:`COMPILE_REPAID_TEXTS` texts or more). With the default ``compile=None`` nothing else compiles it;
        graphs captured before are dropped, and their buckets are captured again, compiled, at their next batch.

        Returns:
            Whether the graphs' layers run compiled. ``False`` at once where no batch replays a graph (CPU, float32,
            ``cuda_graphs=False``) or nothing compiles (``compile=False``), and, with a warning, where torch cannot
            compile (the graphs then replay uncompiled layers).
        """
        device = self.parts.embed_tokens.weight.device
        if not self._graphs_apply(device, 4):
            return False
        if self._compile_later:
            self._compile_later = False  # one try
            try:
                self.parts.compile_layers({}, everywhere=False)
            except RuntimeError as err:  # torch._dynamo unsupported here
                logger.warning("the CUDA graphs' layers run uncompiled: %s", err)
                return False
            self._graphs = None  # graphs of the uncompiled loop: captured again, compiled, as their buckets come
        if not self.parts.compiled:
            return False
        ids = torch.zeros(2, 4, dtype=torch.long, device=device)
        with torch.inference_mode():  # a graph of its bucket: compiled in the run before its capture
            self._compiled_or_not(lambda: self(ids, torch.ones_like(ids)))
        return self.parts.compiled

    def compile_if_repaid(self, texts: int) -> bool:
        """Before a job of ``texts`` texts: compile the graphs' layer loop (:meth:`warm_up`) if the job repays it (at
        least :data:`COMPILE_REPAID_TEXTS`) and nothing has decided yet (``compile=None``, not yet compiled).

        Returns:
            Whether it compiled now.
        """
        if not self._compile_later or texts < COMPILE_REPAID_TEXTS:
            return False
        return self.warm_up()

    def _compiled_or_not(self, run: Callable[[], Result]) -> Result:
        # `run()` with the layers compiled. Where the default's compilation fails, warn, compile no more and run it
        # uncompiled; a compilation the user asked for (compile=True or a dict) fails loudly.
        try:
            with self.parts.compiled_calls():
                return run()
        except LayerCompileError as err:
            if self._compile_asked or torch.cuda.is_current_stream_capturing():
                raise
            logger.warning("the CUDA graphs' layers run uncompiled: %s", err)
            self.parts.drop_compiled()
        return run()

    def graph_counts(self) -> dict[str, int]:
        """CUDA graphs of the layer loop so far: ``graphs`` captured (at most ``GRAPH_LIMIT``) and batches replayed
        through one (``graph_replays``); both 0 where graphs are off or unused."""
        graphs = self._graphs
        return {
            "graphs": 0 if graphs is None else len(graphs.graphs),
            "graph_replays": 0 if graphs is None else graphs.replays,
        }

    def _replay(self, plans: list[Plan], batch: Batch) -> dict[str, torch.Tensor] | None:
        # A packed batch through the CUDA graph of its plans and bucket (models/graphs.py); None: run it as it is.
        packed, device = batch.packed, batch.position_ids.device
        if packed is None or packed.lengths is None or not self._graphs_apply(device, packed.max_length):
            return None
        if batch.rider is not None:  # riders replay only in the pooled graphs (_replay_pooled)
            return None
        if torch.is_grad_enabled():  # a replay records no autograd graph: only under no_grad or inference_mode
            return None
        return self._layer_graphs(device).run(
            tuple(plan.name for plan in plans), packed.lengths, batch.input_ids, self._graph_body(plans, batch.prepend),
            take=lambda outputs: {name: packed.unpack(hidden) for name, hidden in outputs.items()},
            window=_window(plans),
        )  # fmt: skip

    def _replay_pooled(
        self,
        tokens: _texts.Tokenized,
        rows: Sequence[int],
        plans: list[Plan],
        pooling: Pooling,
        pad_id: int,
        rider: Rider | None = None,
    ) -> torch.Tensor | None:
        # encode()'s batch straight from its tokens to its pooled vectors `(plans, B, D)` through one CUDA graph that
        # also pools (see pool_stream): the host builds the packed stream and each token's row and weight with
        # numpy, and queues a few copies and one replay; the padded batch, its layout and the pooling, dozens of
        # small launches a batch, are never made. None: the batch runs as it is (_prepare, _run_plans, pool), and
        # so does any batch that path would refuse or warn about (it says what is wrong). A `rider`'s tokens go after
        # the stream, read from its own buffers inside the graph (one graph per bucket and rider key); its logits
        # are set when the graph ran.
        device = self.parts.embed_tokens.weight.device
        eager = self.parts.attn_implementation == "eager"
        if (
            len(rows) == 0
            or torch.is_grad_enabled()
            or self.pack_padding is False
            or not self._fast(device, eager)
            or not self._graphs_apply(device, 1)
        ):
            return None
        batch = _batching.stream(tokens, rows)
        lengths, longest, window = batch.lengths, max(batch.lengths), _window(plans)
        vocab = self.parts.embed_tokens.num_embeddings
        limits = (self.parts.max_positions, self.parts.trained_positions)
        if (
            min(lengths) < 1
            or not self._graphs_apply(device, longest)
            or (window is not None and window < longest)  # such layers need the dense mask: no packing
            or any(limit is not None and longest > limit for limit in limits)  # refused, or warned about
            or batch.ids.min() < 0
            or batch.ids.max() >= vocab
            or (not 0 <= pad_id < vocab and min(lengths) < longest)  # a padded batch would hold it
        ):
            return None
        bucket = bucket_of(lengths, window)
        if bucket.rows * bucket.tokens > POOLED_MAX:
            return None
        row, weight = stream_weights(batch.prefix, batch.text, lengths, pooling)
        ids = torch.from_numpy(batch.ids)[None]
        ids = ids.pin_memory() if device.type == "cuda" else ids
        loop = self._graph_body(plans, prepends(plans), rider)

        def body(
            ids: torch.Tensor, positions: torch.Tensor, stream: Packed, extras: dict[str, torch.Tensor]
        ) -> dict[str, torch.Tensor]:
            out = loop(ids, positions, stream, extras)
            row, weight, slots = extras["row"], extras["weight"], stream.cu.shape[0] - 1
            pooled = {name: pool_stream(hidden[0, : stream.total], row, weight, slots) for name, hidden in out.items()}
            if rider is not None:
                (hidden,) = out.values()
                pooled[_RIDDEN] = rider.head(hidden[0, stream.total :])
            return pooled

        def take(outputs: dict[str, torch.Tensor]) -> torch.Tensor:
            if rider is not None:
                rider.logits = outputs[_RIDDEN].to(torch.float32, copy=True)
            return torch.stack([outputs[plan.name][: len(rows)] for plan in plans]).float()

        graphs = self._layer_graphs(device)
        key: tuple[Any, ...] = (tuple(plan.name for plan in plans), "pooled")
        if rider is not None:
            if rider.key != self._rider_key:  # the graphs of earlier buffers would never replay again
                graphs.forget(lambda name: isinstance(name[0][-1], _Carrying))
                self._rider_key = rider.key
            key += (_Carrying(rider.key),)
        out = graphs.run(
            key, lengths, ids, body, take=take, window=window, extras={"row": (row, -1), "weight": (weight, 0.0)},
            isolated=rider is not None,
        )  # fmt: skip
        if rider is not None and key in graphs.refused:  # this batch runs as it is, and riders stop here
            self._riders_broken = graphs.refused[key]
            logger.warning("chat steps no longer ride embedding batches: %s", self._riders_broken)
        return out

    def _layer_graphs(self, device: torch.device) -> LayerGraphs:
        # Graphs hold the addresses of the weights they were captured with: moved or cast weights (.to(), .half())
        # get graphs of their own, never stale ones.
        weights = self.parts.embed_tokens.weight
        top = next(self.parts.layers[-1].parameters())
        owner = (device, weights.dtype, weights.data_ptr(), top.data_ptr())
        if self._graphs is None or self._graphs_owner != owner:
            self._graphs, self._graphs_owner = LayerGraphs(device), owner
        return self._graphs

    def _graph_body(self, plans: list[Plan], prepend: bool, rider: Rider | None = None) -> Body:
        # The function a graph captures: the layer loop over a stream of the graph's own inputs (and a rider's tokens
        # after it), compiled where the encoder compiles the graphs' layers. It is run once before each capture, so
        # a compilation (or its failure) happens outside the capture.
        def loop(ids: torch.Tensor, positions: torch.Tensor, stream: Packed) -> dict[str, torch.Tensor]:
            run = Batch(None, None, positions, None, False, {}, stream, stream, ids, prepend)
            if rider is not None:
                board(run, rider)
            self._embed(run)
            out: dict[str, torch.Tensor] = {}
            self._run_tree(plans, 0, {MAIN: run.hidden}, run, out)
            return out

        def body(
            ids: torch.Tensor, positions: torch.Tensor, stream: Packed, extras: dict[str, torch.Tensor]
        ) -> dict[str, torch.Tensor]:
            if self.parts.compiled:
                return self._compiled_or_not(lambda: loop(ids, positions, stream))
            return loop(ids, positions, stream)

        return body

    def _graphs_apply(self, device: torch.device, longest: int) -> bool:
        # Whether a batch whose longest row has `longest` tokens may replay a CUDA graph (it then runs packed, see
        # batch.packs). Long rows keep the GPU busy on their own: there graphs save nothing, and forcing an unpadded
        # batch of them to pack was slower (benchmarks/results/texts-gpu-h200/README.md).
        return (
            self.cuda_graphs
            and longest <= GRAPH_MAX_LENGTH
            and device.type == "cuda"
            and varlen_ready(device, self.parts.embed_tokens.weight.dtype)
        )


def _window(plans: Sequence[Plan]) -> int | None:
    """The smallest sliding window of the plans' layers, if any."""
    return min((step.window for plan in plans for step in plan.layer_steps if step.window is not None), default=None)
