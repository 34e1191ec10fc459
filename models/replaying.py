"""The encoder's CUDA graphs: which batches replay one, the function a graph captures, and compiling it.

A mixin of :class:`~nosink.models.encoder.EncoderFromDecoder` (as :class:`~nosink.models.encoding.TextEncoding` is):
the graphs themselves (buckets, capture, replay) are :mod:`nosink.models.graphs`'; this module decides when the
encoder uses them and what they capture: the layer loop over a packed stream, compiled by ``torch.compile`` where the
encoder compiles (``compile=None``, the default: only this loop, from the first capture on; ``compile=True``: every
layer call).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from nosink.checks import printable
from nosink.layerspec import MAIN, Plan

from .attention import Packed, varlen_ready
from .batch import Batch
from .families import LayerCompileError
from .graphs import GRAPH_MAX_LENGTH, LayerGraphs

if TYPE_CHECKING:
    from .families import DecoderParts

__all__ = ["GraphReplay"]

logger = logging.getLogger(__name__)

Result = TypeVar("Result")


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
        self._compile_in_graphs = compile is None  # compile the graphs' layer loop at the first capture

    def warm_up(self) -> bool:
        """Compile now what the default (``compile=None``) compiles at the first CUDA-graph capture, by running one
        small batch through the compiled layer loop: a server calls this before it takes requests, so that none of
        them waits 10-15 s for the compiler.

        Returns:
            Whether the graphs' layers run compiled. ``False`` at once where no batch replays a graph (CPU, float32,
            ``cuda_graphs=False``) or nothing compiles (``compile=False``), and, with a warning, where torch cannot
            compile (the graphs then replay uncompiled layers).
        """
        device = self.parts.embed_tokens.weight.device
        if not self._graphs_apply(device, 4) or not self._graph_compiles():
            return False
        ids = torch.zeros(2, 4, dtype=torch.long, device=device)
        with torch.inference_mode():  # packed, as graphs run: the first sight of a bucket runs as it is
            self._compiled_or_not(lambda: self(ids, torch.ones_like(ids)))
        return self.parts._compiled is not None

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
        if torch.is_grad_enabled():  # a replay records no autograd graph: only under no_grad or inference_mode
            return None
        # Graphs hold the addresses of the weights they were captured with: moved or cast weights (.to(), .half())
        # get graphs of their own, never stale ones.
        weights = self.parts.embed_tokens.weight
        top = next(self.parts.layers[-1].parameters())
        owner = (device, weights.dtype, weights.data_ptr(), top.data_ptr())
        if self._graphs is None or self._graphs_owner != owner:
            self._graphs, self._graphs_owner = LayerGraphs(device), owner

        def loop(ids: torch.Tensor, positions: torch.Tensor, stream: Packed) -> dict[str, torch.Tensor]:
            # The layer loop over a stream of the graph's own inputs.
            run = Batch(None, None, positions, None, False, {}, stream, stream, ids, batch.prepend)
            self._embed(run)
            out: dict[str, torch.Tensor] = {}
            self._run_tree(plans, 0, {MAIN: run.hidden}, run, out)
            return out

        def body(ids: torch.Tensor, positions: torch.Tensor, stream: Packed) -> dict[str, torch.Tensor]:
            # The function captured: the loop, compiled where the encoder compiles the graphs' layers. It is run
            # once before each capture, so a compilation (or its failure) happens outside the capture.
            if self._graph_compiles():
                return self._compiled_or_not(lambda: loop(ids, positions, stream))
            return loop(ids, positions, stream)

        windows = [step.window for plan in plans for step in plan.layer_steps if step.window is not None]
        return self._graphs.run(
            tuple(plan.name for plan in plans), packed.lengths, batch.input_ids, body,
            take=lambda outputs: {name: packed.unpack(hidden) for name, hidden in outputs.items()},
            window=min(windows, default=None),
        )  # fmt: skip

    def _graph_compiles(self) -> bool:
        # Whether the graphs' layer loop runs compiled: with compile=True (or a dict) always; with compile=None (the
        # default) from the first capture on, where this torch can compile.
        if self._compile_in_graphs:
            self._compile_in_graphs = False  # one try
            try:
                self.parts.compile_layers({}, everywhere=False)
            except RuntimeError as err:  # torch._dynamo unsupported here
                logger.warning("the CUDA graphs' layers run uncompiled: %s", err)
        return self.parts._compiled is not None

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
