"""EncoderFromDecoder: the paper's Algorithm 1 as an explicit module over a decoder's own layers."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from nosink.layerspec import Fork, Kind, LayerStep, Merge, Plan, Spec, additive_mask, as_spec, build_mask
from nosink.layerspec.masks import relative_positions

from .attention import Layout, Route, fast_route
from .families import DecoderParts
from .pooling import POOLINGS, Pooling, pool

__all__ = ["EncoderFromDecoder", "EncoderOutput", "shared_prefix"]

logger = logging.getLogger(__name__)


@dataclass
class _EncodeOptions:
    """The keyword arguments of encode(), checked in one place."""

    pooling: Pooling = "mean"
    batch_size: int = 32
    show_progress_bar: bool | None = None
    output_value: str = "sentence_embedding"
    convert_to_numpy: bool = True
    convert_to_tensor: bool = False
    normalize_embeddings: bool = False
    max_length: int = 512
    padding_side: str = "right"

    def check(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {self.pooling!r}; expected one of {', '.join(POOLINGS)}")
        if self.output_value not in ("sentence_embedding", "token_embeddings"):
            raise ValueError(
                f"output_value must be 'sentence_embedding' or 'token_embeddings', got {self.output_value!r}"
            )
        if self.padding_side not in ("right", "left"):
            raise ValueError(f"padding_side must be 'right' or 'left', got {self.padding_side!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {self.batch_size!r}")
        if isinstance(self.max_length, bool) or not isinstance(self.max_length, int) or self.max_length < 1:
            raise ValueError(f"max_length must be a positive integer, got {self.max_length!r}")

    def convert(self, rows: list[torch.Tensor], single: bool, tokens: bool, width: int) -> Any:
        if tokens:
            out = [r.numpy() for r in rows] if self.convert_to_numpy and not self.convert_to_tensor else rows
            return out[0] if single else out
        stacked = torch.stack(rows) if rows else torch.empty(0, width)
        if self.convert_to_tensor or not self.convert_to_numpy:
            return stacked[0] if single else stacked
        array = stacked.numpy().astype(np.float32)
        return array[0] if single else array


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
class _Batch:
    """One prepared batch: embeddings, positions, and the masks built for it so far."""

    hidden: torch.Tensor  # (B, T, D) embeddings
    attention_mask: torch.Tensor  # (B, T)
    position_ids: torch.Tensor  # (B, T), from each row's first real token
    context: Any  # rotary cos/sin, per family
    masks: dict[tuple[Kind, int | None], torch.Tensor]
    layout: Layout | None = None  # where the real tokens lie, for the fast attention path


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


class EncoderFromDecoder(nn.Module):
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
        fast_attention: run each layer on the attention kernel of its kind (``models/attention.py``)
            instead of SDPA with a dense ``(B, 1, T, T)`` mask, wherever that is exact (SDPA backend,
            eval mode, no sliding window shorter than the batch). Same results to rounding.
            ``None`` (default): on CUDA only (on CPU it measured no faster); ``True``: on every
            device; ``False``: the dense mask everywhere. Also the attribute ``encoder.fast_attention``.

    Raises:
        SpecError: if the spec is malformed or does not fit the decoder's depth.
        UnsupportedModelError: for an unsupported family or attention backend.
    """

    def __init__(
        self,
        decoder: nn.Module,
        spec: str | Spec,
        tokenizer: Any = None,
        *,
        sink_token: str = "auto",
        fast_attention: bool | None = None,
    ) -> None:
        super().__init__()
        self.parts = DecoderParts(decoder)
        self.decoder = self.parts.model  # a submodule, so the encoder's parameters are the decoder's
        if not isinstance(spec, (str, Spec)):
            raise TypeError(f"spec must be a string or a Spec, got {type(spec).__name__}")
        self.spec = as_spec(spec)
        self.plan = self.spec.resolve(self.parts.depth)
        self.tokenizer = tokenizer
        self.sink_token = sink_token
        self.fast_attention = fast_attention
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
        **hf_kwargs: Any,
    ) -> EncoderFromDecoder:
        """Load a decoder (hub name or local folder) or a folder written by :meth:`save_pretrained`.

        Args:
            name_or_path: a hub model id, a local transformers folder, or a saved encoder folder.
            spec: the layer spec; required unless loading a saved encoder (whose spec it replaces).
            dtype: weights' dtype (``torch.bfloat16``, ``"float32"``, ...); the checkpoint's by default.
            device: where to put the model.
            attn_implementation: ``"sdpa"`` (default) or ``"eager"`` (needed for attention weights).
            sink_token: see the class docstring; a saved encoder keeps its own unless given.
            **hf_kwargs: passed to ``AutoModel.from_pretrained`` (``revision``, ``gguf_file``, ...).

        Raises:
            ValueError: if no spec is given for a plain decoder.
            OSError: if the folder does not exist, or a saved folder's files are missing, corrupted or
                do not match its config.
            SpecError: if the spec is malformed or does not fit the model (raised before any weights load).
            UnsupportedModelError: for an unsupported family (also before any weights load).
        """
        from .families import family_of
        from .saving import check_saved, load_config, load_model, load_tokenizer, read_saved

        # Everything that can be checked without weights is checked first: the spec, the family, the depth.
        saved = read_saved(name_or_path)
        if spec is None:
            if saved is None:
                raise ValueError(
                    f"{name_or_path} is a plain decoder: give a spec, e.g. spec='F* | M0B*4' "
                    "or spec=nosink.presets.mask0_bidir(k=4)"
                )
            spec = saved["spec"]
        spec = as_spec(spec)
        config = load_config(name_or_path, **hf_kwargs)
        family_of(config)
        spec.resolve(config.num_hidden_layers)
        if saved is not None:
            check_saved(Path(name_or_path), saved, config)
        decoder = load_model(
            name_or_path, dtype=dtype, attn_implementation=attn_implementation, saved=saved is not None, **hf_kwargs
        )
        tokenizer = load_tokenizer(name_or_path, **hf_kwargs)
        if sink_token is None:
            sink_token = saved.get("sink_token", "auto") if saved else "auto"
        encoder = cls(decoder, spec, tokenizer, sink_token=sink_token)
        return encoder.to(device) if device is not None else encoder

    def save_pretrained(self, directory: str | Path) -> None:
        """Write the spec, the decoder's weights (safetensors), its config and the tokenizer.

        :meth:`from_pretrained` on the folder rebuilds the same encoder without the original model.
        """
        from .saving import save_encoder

        save_encoder(self, Path(directory), {"spec": str(self.spec), "sink_token": self.sink_token})

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

        Raises:
            ValueError: for shapes or masks that do not fit.
        """
        batch = self._prepare(input_ids, attention_mask)
        history = [batch.hidden] if output_hidden_states else None
        streams = self._run(self.plan, 0, {"main": batch.hidden}, batch, history)
        out = self.parts.norm(streams["main"])
        return EncoderOutput(out, batch.attention_mask, tuple(history) if history is not None else None)

    def attention_weights(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> list[tuple[LayerStep, torch.Tensor]]:
        """The attention weights of every layer step of the plan, in order: ``(step, (B, H, T, T))``.

        Weights exist only on transformers' eager attention path; when the decoder runs on another
        backend the encoder switches to eager for this call, says so in a log warning, and switches back.

        Raises:
            ValueError: for shapes or masks that do not fit.
        """
        if self.parts.attn_implementation != "eager":
            logger.warning(
                "attention weights need eager attention: running this call with attn_implementation='eager' "
                "instead of %r",
                self.parts.attn_implementation,
            )
        captured: list[torch.Tensor] = []
        modules = {id(m): m for m in (self.parts.attention_module(s.layer) for s in self.plan.layer_steps)}
        hooks = [m.register_forward_hook(lambda mod, args, out: captured.append(out[1])) for m in modules.values()]
        try:
            with self.parts.eager_attention(), torch.inference_mode():
                self(input_ids, attention_mask)
        finally:
            for h in hooks:
                h.remove()
        steps = self.plan.layer_steps
        if len(captured) != len(steps) or any(w is None for w in captured):
            raise RuntimeError(f"captured {len(captured)} attention maps for {len(steps)} layer steps")
        return list(zip(steps, captured, strict=True))

    def forward_specs(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, specs: Sequence[str | Spec]
    ) -> dict[str, torch.Tensor]:
        """The last hidden state of the same batch under several specs, sharing their common lower layers.

        Steps that specs run identically from the bottom run once: the specs form a prefix tree,
        and each step of the tree runs once per batch. For ``F* | B*k`` with k = 1..n the forward
        layers run once in all, and for ``F* | B*(k-k0) | M0B*k0`` only the top k0 layers are
        new once ``F* | B*k0...`` has run. Results equal separate :meth:`forward` calls.

        Args:
            input_ids: ``(B, T)`` token ids.
            attention_mask: ``(B, T)`` or ``None``.
            specs: the specs, as strings or :class:`Spec` values.

        Returns:
            ``{canonical spec string: (B, T, D) last hidden state}``.

        Raises:
            SpecError: if a spec does not fit this decoder.
            ValueError: for shapes or masks that do not fit.
        """
        if not specs:
            raise ValueError("forward_specs() needs at least one spec")
        plans = [self._plan_of(spec) for spec in specs]
        batch = self._prepare(input_ids, attention_mask)
        out: dict[str, torch.Tensor] = {}
        self._run_tree(plans, 0, {"main": batch.hidden}, batch, out)
        return {str(plan.spec): out[str(plan.spec)] for plan in plans}

    def _run_tree(
        self, plans: list[Plan], start: int, streams: dict[str, torch.Tensor], batch: _Batch, out: dict
    ) -> None:
        # Plans that agree up to a step share its result: run the common steps once, then branch
        # where they part, like walking a prefix tree. Holds at most one set of streams per depth.
        cut = shared_prefix(plans, start)
        streams = self._run(plans[0], start, streams, batch, None, stop=cut)
        groups: dict[Any, list[Plan]] = {}
        for plan in plans:
            if len(plan.steps) == cut:
                out[str(plan.spec)] = self.parts.norm(streams["main"])
            else:
                groups.setdefault(plan.steps[cut], []).append(plan)
        for group in groups.values():
            self._run_tree(group, cut, dict(streams), batch, out)

    def _plan_of(self, spec: str | Spec) -> Plan:
        spec = as_spec(spec)
        return self.plan if spec == self.spec else spec.resolve(self.parts.depth)

    def _mask_key(self, step: LayerStep) -> tuple[Kind, int | None]:
        # Plain forward layers keep the stock sliding window; converted layers drop it.
        return step.kind, self.parts.windows[step.layer] if step.kind.is_causal else None

    def _prepare(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> _Batch:
        if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2:
            shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
            raise ValueError(f"input_ids must be a (batch, seq) tensor, got {shape}")
        if input_ids.shape[1] == 0:
            raise ValueError("input_ids has no tokens (sequence length 0)")
        if input_ids.is_floating_point() or input_ids.dtype == torch.bool:
            raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
        vocab = self.parts.embed_tokens.num_embeddings
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab):
            raise ValueError(
                f"input_ids hold ids from {int(input_ids.min())} to {int(input_ids.max())} but the model's "
                f"vocabulary has ids 0 to {vocab - 1}: is the tokenizer the model's own?"
            )
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if attention_mask.shape != input_ids.shape:
            raise ValueError(
                f"attention_mask {tuple(attention_mask.shape)} does not match input_ids {tuple(input_ids.shape)}"
            )
        device = self.parts.embed_tokens.weight.device
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        position_ids = relative_positions(attention_mask).clamp(min=0)  # (B, T), counted from each row's first token
        limit = self.parts.max_positions
        if limit is not None and input_ids.shape[1] > limit:
            raise ValueError(f"{input_ids.shape[1]} tokens exceed this model's {limit} learned positions; truncate")
        hidden = self.parts.embed(input_ids, position_ids)  # (B, T, D)
        context = self.parts.position_context(hidden, position_ids)
        return _Batch(hidden, attention_mask, position_ids, context, {})

    def _mask(self, key: tuple[Kind, int | None], batch: _Batch) -> torch.Tensor:
        # Built once per batch and key, on first use, whatever the number of layers or specs using it.
        if key not in batch.masks:
            mask = build_mask(key[0], batch.attention_mask, sliding_window=key[1])  # (B, 1, T, T) bool
            eager = self.parts.attn_implementation == "eager"
            batch.masks[key] = additive_mask(mask, batch.hidden.dtype) if eager else mask
        return batch.masks[key]

    def _route(self, key: tuple[Kind, int | None], batch: _Batch) -> Route | None:
        # The fast path where it is exact; None sends the layer to the dense mask.
        if self.fast_attention is False or self.training or not self.parts.fast_attention_applies:
            return None
        if self.fast_attention is None and batch.hidden.device.type != "cuda":
            return None
        if batch.layout is None:
            batch.layout = Layout(batch.attention_mask)
        return fast_route(key[0], key[1], batch.layout)

    def _run(
        self,
        plan: Plan,
        start: int,
        streams: dict[str, torch.Tensor],
        batch: _Batch,
        history: list[torch.Tensor] | None,
        stop: int | None = None,
    ) -> dict[str, torch.Tensor]:
        for step in plan.steps[start:stop]:
            if isinstance(step, LayerStep):
                key = self._mask_key(step)
                route = self._route(key, batch)
                mask = None if route is not None else self._mask(key, batch)
                streams[step.stream] = self.parts.call_layer(
                    step.layer, streams[step.stream], mask, batch.context, batch.position_ids, route
                )
                if history is not None and step.stream == "main":
                    history.append(streams["main"])
            elif isinstance(step, Fork):
                streams[step.target] = streams[step.source]  # layers never write in place, so no copy
            elif isinstance(step, Merge):
                streams[step.target] = streams[step.target] + streams.pop(step.source)
                if history is not None and step.target == "main":
                    history.append(streams["main"])
        return streams

    # ------------------------------------------------------------------ texts in, vectors out

    def encode(
        self,
        sentences: str | Sequence[str],
        instruction: str | None = None,
        *,
        pooling: Pooling = "mean",
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        output_value: Literal["sentence_embedding", "token_embeddings"] = "sentence_embedding",
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        normalize_embeddings: bool = False,
        max_length: int = 512,
        padding_side: Literal["right", "left"] = "right",
    ) -> Any:
        """Embed texts, sentence-transformers style.

        Each input is ``[sink token] + instruction + text`` (see ``sink_token``); pooling uses the
        text tokens only, never the instruction or the sink token (the paper's protocol).
        Texts are sorted by length and batched; results come back in input order and, in float32,
        do not depend on the batch size, the padding side or the other texts in a batch (to about
        1e-5; in bfloat16, differently padded shapes can differ by the dtype's rounding).

        Args:
            sentences: one text or a list of texts.
            instruction: a prompt to put before every text, e.g. ``"Instruct: ...\\nQuery: "``.
            pooling: ``mean`` (default), ``weighted_mean``, ``last`` or ``first``.
            batch_size: texts per forward pass.
            show_progress_bar: a tqdm bar; by default only when there are more than 8 batches.
            output_value: ``sentence_embedding`` (one vector per text) or ``token_embeddings``
                (per text, a ``(n_text_tokens, D)`` array of its text tokens' states).
            convert_to_numpy: return numpy (float32) rather than torch.
            convert_to_tensor: return torch rather than numpy (wins over ``convert_to_numpy``): one
                stacked tensor of sentence embeddings, or a list of tensors of token embeddings.
            normalize_embeddings: L2-normalise sentence embeddings.
            max_length: at most this many tokens per input; longer texts are truncated.
            padding_side: ``right`` (default) or ``left``; the result is the same.

        Raises:
            ValueError: for a missing tokenizer, bad arguments, or an instruction that leaves
                no room for text within ``max_length``.
        """
        return self.encode_specs(
            [self.spec],
            sentences,
            instruction,
            pooling=pooling,
            batch_size=batch_size,
            show_progress_bar=show_progress_bar,
            output_value=output_value,
            convert_to_numpy=convert_to_numpy,
            convert_to_tensor=convert_to_tensor,
            normalize_embeddings=normalize_embeddings,
            max_length=max_length,
            padding_side=padding_side,
        )[str(self.spec)]

    def encode_specs(
        self,
        specs: Sequence[str | Spec],
        sentences: str | Sequence[str],
        instruction: str | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """:meth:`encode` under several specs at once, running their shared lower layers once per batch.

        For a sweep such as ``F* | M0B*k`` for k = 1..n, the forward layers below the lowest
        converted one run once per batch instead of once per spec.

        Args:
            specs: the specs to encode with (this encoder's own spec need not be among them).
            sentences: one text or a list of texts.
            instruction: as for :meth:`encode`.
            **kwargs: any other argument of :meth:`encode`.

        Returns:
            ``{canonical spec string: what encode() would return with that spec}``.

        Raises:
            SpecError: if a spec does not fit this decoder.
            ValueError: as for :meth:`encode`.
        """
        if not specs:
            raise ValueError("encode_specs() needs at least one spec")
        opts = _EncodeOptions(**kwargs)
        if self.tokenizer is None:
            raise ValueError("encode() needs a tokenizer: pass tokenizer= when building the encoder")
        opts.check()
        names = [str(self._plan_of(spec).spec) for spec in specs]
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"sentences[{i}] is a {type(text).__name__}, not a string")

        sink = self.sink_ids()
        room = opts.max_length - len(sink) - (len(self._tokenize(instruction)) if instruction else 0)
        if room < 1:
            raise ValueError(
                f"the sink token and instruction take {opts.max_length - room} tokens, leaving no room for text "
                f"within max_length={opts.max_length}"
            )
        inputs = []
        for text in texts:
            head, body = self._split(instruction, text)
            inputs.append((sink + head, body[: opts.max_length - len(sink) - len(head)]))
        order = sorted(range(len(texts)), key=lambda i: -(len(inputs[i][0]) + len(inputs[i][1])))
        n_batches = -(-len(texts) // opts.batch_size)
        show = n_batches > 8 if opts.show_progress_bar is None else opts.show_progress_bar
        results: dict[str, list[Any]] = {name: [None] * len(texts) for name in names}
        tokens = opts.output_value == "token_embeddings"
        with torch.inference_mode():
            starts = range(0, len(texts), opts.batch_size)
            for start in tqdm(starts, desc="encode", disable=not show, unit="batch"):
                idx = order[start : start + opts.batch_size]
                ids, attn, text_mask = self._pad([inputs[i] for i in idx], opts.padding_side)
                for name, hidden in self.forward_specs(ids, attn, names).items():
                    text_mask = text_mask.to(hidden.device)
                    if tokens:
                        rows = [hidden[row][text_mask[row]].float().cpu() for row in range(len(idx))]
                    else:
                        vectors = pool(hidden, text_mask, opts.pooling).float()
                        if opts.normalize_embeddings:
                            vectors = torch.nn.functional.normalize(vectors, dim=-1)
                        rows = list(vectors.cpu())
                    for row, i in enumerate(idx):
                        results[name][i] = rows[row]
        return {
            name: opts.convert(rows, single, tokens, self.parts.config.hidden_size) for name, rows in results.items()
        }

    def sink_ids(self) -> list[int]:
        """The token ids put before every instruction and text (see ``sink_token``)."""
        tok = self.tokenizer
        if self.sink_token == "none":
            return []
        if self.sink_token != "auto":
            ids = tok.convert_tokens_to_ids([self.sink_token])
            if not ids or ids[0] is None or ids[0] == tok.unk_token_id:
                raise ValueError(f"sink_token {self.sink_token!r} is not a token of this tokenizer")
            return ids
        if tok.bos_token_id is None:
            return []
        return [tok.bos_token_id]

    def _split(self, instruction: str | None, text: str) -> tuple[list[int], list[int]]:
        """Token ids of ``instruction + text``, split where the text starts.

        The two are tokenized together, as the model reads them (apart, a prompt ending in a space
        would leave a lone space token). A token that reaches into the text counts as text.
        """
        if not instruction:
            return [], self._tokenize(text)
        if not getattr(self.tokenizer, "is_fast", False):  # no offsets: tokenize the parts apart
            return self._tokenize(instruction), self._tokenize(text)
        enc = self.tokenizer(instruction + text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = list(enc["input_ids"]), enc["offset_mapping"]
        cut = sum(1 for _, end in offsets if end <= len(instruction))
        return ids[:cut], ids[cut:]

    def _tokenize(self, text: str) -> list[int]:
        # No special tokens: the sink token is added once, by sink_ids(), whatever the tokenizer's habits.
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _pad(
        self, rows: list[tuple[list[int], list[int]]], side: str
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        width = max(1, max(len(p) + len(t) for p, t in rows))  # an all-empty batch still has one (padding) column
        pad_id = self.tokenizer.pad_token_id
        if pad_id is None:
            pad_id = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        text = torch.zeros((len(rows), width), dtype=torch.bool)
        for r, (prefix, body) in enumerate(rows):
            n = len(prefix) + len(body)
            start = 0 if side == "right" else width - n
            ids[r, start : start + n] = torch.tensor(prefix + body, dtype=torch.long)
            attn[r, start : start + n] = 1
            text[r, start + len(prefix) : start + n] = True
        return ids, attn, text

    def extra_repr(self) -> str:
        return f"spec={str(self.spec)!r}, family={self.parts.family.name}, depth={self.parts.depth}"
