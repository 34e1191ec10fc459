"""The one module that knows how transformers lays out and calls each decoder family.

Everything else in nosink goes through :class:`DecoderParts`: embed tokens, prepare
position information, call decoder layer ``i`` with an explicit mask, apply the final
norm. A family is a row of data (where the parts live, how positions enter), not
``if model_type == ...`` scattered through the layer loop.

Tested against transformers 5.24 (layers are called as
``layer(hidden, attention_mask=..., position_embeddings=..., position_ids=...)``, with
``cache`` left unset).

The fast attention path (``models/attention.py``) enters transformers here and only here: one
function registered in transformers' attention registry (``AttentionInterface``) under
:data:`FAST_ATTENTION`. A layer called with a route runs through a private view of the layer whose
attention module has its own config naming that implementation (the shared config never changes, so
other threads and the stock model are unaffected); the route reaches the function as the keyword
argument ``nosink_route``, which the decoder layer and its attention module pass on untouched
(``**kwargs``), so the decoder's own projections, RoPE and output run as usual and only the kernel
changes.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from .attention import Route

__all__ = [
    "FAMILIES",
    "FAST_ATTENTION",
    "SUPPORTED_ATTENTION",
    "DecoderParts",
    "Family",
    "LayerCompileError",
    "UnsupportedModelError",
    "base_model_of",
    "check_attention",
    "family_of",
    "make_serializable",
]

# Backends that accept an arbitrary (batch, 1, q, k) mask. flash-attention only knows causal or not.
SUPPORTED_ATTENTION = ("eager", "sdpa")


# The name of nosink's attention function in transformers' registry (see the module docstring).
FAST_ATTENTION = "nosink_fast"


def _fast_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    nosink_route: Route | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    # Without a route (a layer given a dense mask) this is transformers' own SDPA function.
    if nosink_route is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    if dropout:
        raise ValueError("the fast attention path runs without dropout: call encoder.eval() first")
    return nosink_route.attend(query, key, value, scaling), None


AttentionInterface.register(FAST_ATTENTION, _fast_attention_forward)


def _layer_call(
    layer: nn.Module,
    hidden: torch.Tensor,
    mask: torch.Tensor | None,
    context: Any,
    position_ids: torch.Tensor,
    route: Route | None,
    learned: bool,
) -> Any:
    # The one place a decoder layer is called (compiled as a whole by DecoderParts.compile_layers).
    kwargs: dict[str, Any] = {} if route is None else {"nosink_route": route}
    if learned:
        return layer(hidden, attention_mask=mask, use_cache=False, **kwargs)
    return layer(hidden, attention_mask=mask, position_embeddings=context, position_ids=position_ids, **kwargs)


class LayerCompileError(RuntimeError):
    """``torch.compile`` could not compile a decoder layer (its backend failed)."""


class UnsupportedModelError(ValueError):
    """The model's family or attention backend cannot run per-layer masks."""


def check_attention(name: Any) -> str:
    """``name`` if it is an attention backend that takes an arbitrary mask per layer.

    Raises:
        UnsupportedModelError: for any other backend (flash-attention only knows causal or not).
    """
    if name not in SUPPORTED_ATTENTION:
        raise UnsupportedModelError(
            f"attention implementation {name!r} cannot take an arbitrary mask per layer; "
            f"load the model with attn_implementation='sdpa' (or 'eager')"
        )
    return name


@dataclass(frozen=True)
class Family:
    """Where a family keeps its parts, and how positions enter it."""

    name: str  # what users read in messages
    model_types: tuple[str, ...]  # config.model_type values of this family
    embed: str = "embed_tokens"  # token embeddings on the base model
    layers: str = "layers"  # the nn.ModuleList of decoder layers
    norm: str = "norm"  # the final norm
    positions: Literal["rotary", "rotary_per_layer_type", "learned"] = "rotary"
    position_embed: str | None = None  # learned position embeddings (GPT-2's wpe)
    dropout: str | None = None  # embedding dropout applied by the stock forward (identity in eval)
    attention: str = "self_attn"  # each layer's attention module, which returns (output, weights)


FAMILIES: tuple[Family, ...] = (
    Family("Llama", ("llama",)),
    Family("Mistral", ("mistral",)),
    Family("Qwen2", ("qwen2",)),
    Family("Qwen3", ("qwen3",)),
    Family("Gemma3", ("gemma3_text",), positions="rotary_per_layer_type"),
    Family("Phi-3", ("phi3",)),
    Family("OLMo", ("olmo",)),
    Family("OLMo2", ("olmo2",)),
    Family("GPT-2", ("gpt2",), embed="wte", layers="h", norm="ln_f", positions="learned", position_embed="wpe",
           dropout="drop", attention="attn"),
)  # fmt: skip


def family_of(config: Any) -> Family:
    """The family of a transformers config.

    Raises:
        UnsupportedModelError: for a model type no family covers, listing the supported ones.
    """
    model_type = getattr(config, "model_type", None)
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    supported = ", ".join(f"{f.name} ({'/'.join(f.model_types)})" for f in FAMILIES)
    raise UnsupportedModelError(f"model type {model_type!r} is not supported; supported families: {supported}")


def make_serializable(model: nn.Module) -> None:
    """Let ``save_pretrained`` write a GGUF-loaded model, whose tensors transformers already dequantized.

    transformers refuses ("quantized with gguf and is not serializable") while ``hf_quantizer`` is set.
    """
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None and "gguf" in type(quantizer).__name__.lower():
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config


def base_model_of(model: nn.Module) -> nn.Module:
    """The bare decoder (no LM head) inside ``model``, or ``model`` itself."""
    prefix = getattr(model, "base_model_prefix", "")
    inner = getattr(model, prefix, None) if prefix else None
    return inner if isinstance(inner, nn.Module) else model


class DecoderParts:
    """A decoder's parts, called one at a time.

    Args:
        model: a transformers decoder of a supported family, with or without its LM head.

    Raises:
        UnsupportedModelError: for an unsupported family or attention backend.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = base_model_of(model)
        self.config = self.model.config
        self.family = family_of(self.config)
        check_attention(getattr(self.config, "_attn_implementation", None) or "eager")
        f = self.family
        self.embed_tokens: nn.Module = getattr(self.model, f.embed)
        self.layers: nn.ModuleList = getattr(self.model, f.layers)
        self.norm: nn.Module = getattr(self.model, f.norm)
        self.position_embed: nn.Module | None = getattr(self.model, f.position_embed) if f.position_embed else None
        self.dropout: nn.Module | None = getattr(self.model, f.dropout) if f.dropout else None
        self.rotary: nn.Module | None = getattr(self.model, "rotary_emb", None) if f.positions != "learned" else None
        self.depth = len(self.layers)
        # Learned position tables (GPT-2) cap the sequence length; rotary models have no table, but were
        # trained up to max_position_embeddings.
        self.max_positions: int | None = self.position_embed.num_embeddings if self.position_embed is not None else None
        self.trained_positions: int | None = (
            getattr(self.config, "max_position_embeddings", None) if self.position_embed is None else None
        )
        # The stock model's own sliding window per layer (None for full attention): per layer type
        # where the config lists them (Qwen2/3, Gemma3), else the config's window for every layer
        # (Mistral, Phi-3 with sliding_window set).
        window = getattr(self.config, "sliding_window", None)
        layer_types = getattr(self.config, "layer_types", None)
        self.layer_types: tuple[str, ...] | None = tuple(layer_types) if layer_types is not None else None
        if self.layer_types is not None:
            self.windows = tuple(window if t == "sliding_attention" else None for t in self.layer_types)
        else:
            self.windows = (window,) * self.depth
        self._fast_views: dict[int, nn.Module] = {}  # layer index -> its view on the fast path, made once
        self._compiled: Any = None  # the compiled layer call (compile_layers), else None
        self._compiled_everywhere = True  # False: only calls inside compiled_calls() run compiled
        self._local = threading.local()  # .compiled: this thread is inside compiled_calls()

    def compile_layers(self, options: dict[str, Any], everywhere: bool = True) -> None:
        """Run layer calls through one ``torch.compile``-d function, with ``options`` for ``torch.compile``.

        The layer is an argument of that function, so layers of one class share a graph (their parameters
        are graph inputs), and sequence lengths are dynamic by default (``dynamic=True``): no recompilation
        per layer index or per batch shape. Attention kernels of the fast path stay outside the graph.
        ``everywhere=False``: only the calls made inside :meth:`compiled_calls` (the encoder's CUDA graphs).

        Raises:
            TypeError: if ``options`` is not a dict.
            RuntimeError: if this torch or Python cannot compile (``torch.compile`` missing or unsupported).
        """
        if not isinstance(options, dict):
            raise TypeError(
                f"compile must be True, False, None or a dict of torch.compile arguments, got {type(options).__name__}"
            )
        compile_fn = getattr(torch, "compile", None)
        dynamo = getattr(torch, "_dynamo", None)
        if compile_fn is None or dynamo is None or not dynamo.is_dynamo_supported():
            raise RuntimeError(
                f"torch.compile is not available with torch {torch.__version__} on this Python: build the "
                "encoder with compile=False (the default)"
            )
        self._compiled = compile_fn(_layer_call, **({"dynamic": True} | options))
        self._compiled_everywhere = everywhere

    def drop_compiled(self) -> None:
        """Call the layers uncompiled from now on."""
        self._compiled = None

    @contextmanager
    def compiled_calls(self) -> Iterator[None]:
        """Layer calls of this thread inside the block run compiled (where :meth:`compile_layers` was called)."""
        before = getattr(self._local, "compiled", False)
        self._local.compiled = True
        try:
            yield
        finally:
            self._local.compiled = before

    @property
    def compiled(self) -> bool:
        """Whether layer calls can run through a ``torch.compile``-d function (:meth:`compile_layers`, not dropped)."""
        return self._compiled is not None

    @property
    def compiles(self) -> bool:
        """Whether a layer called now (in this thread) runs compiled."""
        return self._compiled is not None and (self._compiled_everywhere or getattr(self._local, "compiled", False))

    @property
    def attn_implementation(self) -> str:
        """``'eager'`` or ``'sdpa'``: decides the mask's form (additive or boolean)."""
        return getattr(self.config, "_attn_implementation", None) or "eager"

    def attention_module(self, index: int) -> nn.Module:
        """The attention module of layer ``index`` (its forward returns ``(output, weights)``)."""
        return getattr(self.layers[index], self.family.attention)

    def embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Token (and, for GPT-2, learned position) embeddings: ``(B, T) -> (B, T, D)``."""
        hidden = self.embed_tokens(input_ids)
        if self.position_embed is not None:
            hidden = hidden + self.position_embed(position_ids).to(hidden.dtype)
        if self.dropout is not None:
            hidden = self.dropout(hidden)
        return hidden

    def position_context(self, hidden: torch.Tensor, position_ids: torch.Tensor) -> Any:
        """What the layers need to know about positions (rotary cos/sin), computed once per batch."""
        if self.family.positions == "rotary":
            return self.rotary(hidden, position_ids=position_ids)
        if self.family.positions == "rotary_per_layer_type":
            return {t: self.rotary(hidden, position_ids, t) for t in set(self.layer_types or ())}
        return None

    def call_layer(
        self,
        index: int,
        hidden: torch.Tensor,
        mask: torch.Tensor | None,
        context: Any,
        position_ids: torch.Tensor,
        route: Route | None = None,
        weights: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Run decoder layer ``index`` on ``hidden`` with an explicit ``mask``, or along a fast ``route``.

        With a ``route`` the layer's attention runs on the fast path (:mod:`nosink.models.attention`), with
        no mask. With a ``weights`` list, the layer runs on transformers' eager attention (give it an
        additive mask) and appends its attention weights ``(B, H, T, T)`` to the list. Both run a private
        view of the layer (see :meth:`_view`): nothing that other callers of the layer see changes, so
        other threads may run the model meanwhile.

        Raises:
            ValueError: if neither a mask nor a route is given (``None`` would mean causal to transformers).
        """
        if mask is None and route is None:
            raise ValueError(f"layer {index} needs an explicit mask or a fast-attention route")
        if weights is not None:
            layer = self._view(index, "eager", weights)
        elif route is not None:
            if index not in self._fast_views:
                self._fast_views[index] = self._view(index, FAST_ATTENTION)
            layer = self._fast_views[index]
        else:
            layer = self.layers[index]
        learned = self.family.positions == "learned"
        if self.family.positions == "rotary_per_layer_type":
            context = context[self.layer_types[index]]  # type: ignore[index]
        if weights is None and self.compiles:
            try:
                out = self._compiled(layer, hidden, mask, context, position_ids, route, learned)
            except Exception as err:
                if type(err).__name__ != "BackendCompilerFailed":
                    raise
                raise LayerCompileError(
                    f"torch.compile could not compile layer {index} ({err}); build the encoder with "
                    "compile=False, or another backend, e.g. compile={'backend': 'aot_eager'}"
                ) from err
        else:
            out = _layer_call(layer, hidden, mask, context, position_ids, route, learned)
        return out[0] if isinstance(out, tuple) else out

    @property
    def batch_wide_rotary(self) -> bool:
        """Whether the rotary frequencies depend on the batch's largest position (transformers' dynamic and longrope
        types pick them from ``max(position_ids)``), so one row's positions change another's embedding."""
        kinds = getattr(self.rotary, "rope_type", "default") if self.rotary is not None else "default"
        kinds = list(kinds.values()) if isinstance(kinds, dict) else [kinds]
        return any("dynamic" in str(kind) or kind == "longrope" for kind in kinds)

    @property
    def fast_attention_applies(self) -> bool:
        """Whether layers may run on the fast path: it replaces SDPA (eager stays the path with weights)."""
        return self.attn_implementation == "sdpa"

    def _view(self, index: int, implementation: str, weights: list[torch.Tensor] | None = None) -> nn.Module:
        # transformers picks the attention function from the attention module's config on every call, and
        # the layer drops the weights it returns. A shallow copy of the layer with its own child table, holding
        # a shallow copy of the attention module with its own config (and, for weights, a forward that keeps
        # them), runs the very same parameter tensors without touching the shared modules or config.
        layer = copy.copy(self.layers[index])
        layer._modules = dict(layer._modules)
        attention = copy.copy(layer._modules[self.family.attention])
        attention.config = copy.deepcopy(attention.config)  # deep: setting the backend recurses into sub-configs
        attention.config._attn_implementation = implementation
        if weights is not None:
            run = attention.forward

            def forward(*args: Any, **kwargs: Any) -> Any:
                out = run(*args, **kwargs)
                weights.append(out[1])
                return out

            attention.forward = forward
        layer._modules[self.family.attention] = attention
        return layer
