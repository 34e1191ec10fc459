"""Texts in, vectors out: the batch step every consumer runs, and ``encode()``'s pipeline around it.

:func:`pooled_batches` is the one loop that turns batches of tokenized inputs into pooled vectors on the
host; :meth:`EncoderFromDecoder.encode_specs`, corpus encoding and the server all go through it. On CUDA
it copies each batch's vectors back without waiting and hands them over a few batches later, so the host
never waits for the GPU inside the loop.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import numpy as np
import torch
from tqdm.auto import tqdm

from nosink.checks import positive_int, printable
from nosink.layerspec import Plan, Spec

from . import batching as _batching
from . import texts as _texts
from .batch import HostBatch
from .pooling import POOLINGS, Pooling, pool
from .templates import as_template
from .texts import Template

if TYPE_CHECKING:
    from .encoder import EncoderFromDecoder
    from .riding import Rider

__all__ = [
    "ENCODE_CHUNK_BATCHES", "ENCODE_LAG_BATCHES", "EncodeOptions", "Pooled", "ToHost", "encode_texts", "pooled_batches",
]  # fmt: skip

# On CUDA, texts are tokenized a chunk at a time while the GPU runs the chunks before: the first chunk holds one
# batch, each next one twice as many, up to this many (a longer chunk pads less; the choice is measured in
# benchmarks/results/encode-host/README.md).
ENCODE_CHUNK_BATCHES = 64
# On CUDA, a batch's vectors are taken on the host this many batches after its launch (its copy long done).
ENCODE_LAG_BATCHES = 4

Key = TypeVar("Key")


@dataclass(frozen=True)
class Pooled(Generic[Key]):
    """One batch's result from :func:`pooled_batches`, on the host."""

    key: Key  # what the caller gave with the batch
    vectors: torch.Tensor  # (plans, B, D) float32; with token_embeddings, (plans, n, D): the rows' text tokens
    counts: list[int] | None  # with token_embeddings, each row's number of text tokens; else None


def pooled_batches(
    encoder: EncoderFromDecoder,
    batches: Iterable[tuple[_texts.Tokenized, Sequence[int], Key]],
    plans: Sequence[Plan],
    *,
    pooling: Pooling = "mean",
    padding_side: str = "right",
    token_embeddings: bool = False,
    lag: int = ENCODE_LAG_BATCHES,
) -> Iterator[Pooled[Key]]:
    """Run ``(tokens, rows, key)`` batches under ``plans`` and yield their pooled vectors, in order.

    ``batches`` is read lazily, so whatever makes it (tokenizing, reading a file) runs between launches.
    On CUDA each result comes ``lag`` batches after its launch; elsewhere at once. Vectors are not
    normalised: a caller that averages several prompts normalises after averaging.
    """
    pending: deque[tuple[Key, ToHost, list[int] | None]] = deque()
    for tokens, rows, key in batches:
        out, counts = encoder.encode_batch(tokens, rows, plans, pooling, padding_side, token_embeddings)
        copy = ToHost(out)
        pending.append((key, copy, counts))
        keep = lag if copy.pending else 0
        while len(pending) > keep:
            yield _ready(*pending.popleft())
    while pending:
        yield _ready(*pending.popleft())


def _ready(key: Key, copy: ToHost, counts: list[int] | None) -> Pooled[Key]:
    return Pooled(key, copy.wait(), counts)  # on CUDA launched `lag` batches ago: normally long done


class ToHost:
    """A device tensor on its way to the host: on CUDA a copy into pinned memory, queued behind the work that makes
    the tensor, and an event after it, so that the host goes on launching work meanwhile; elsewhere a plain copy.

    The copy is queued on the tensor's device's current stream (the model's, not the current device's).
    """

    def __init__(self, out: torch.Tensor) -> None:
        self.event: Any = None
        if out.device.type == "cuda":
            self.host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
            self.host.copy_(out, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record(torch.cuda.current_stream(out.device))
        else:
            self.host = out.cpu()

    @property
    def pending(self) -> bool:
        """Whether the copy may still be under way (only on CUDA)."""
        return self.event is not None

    def wait(self) -> torch.Tensor:
        """The tensor on the host, once the copy has landed (waits for it, and for the work before it)."""
        if self.event is not None:
            self.event.synchronize()
        return self.host


@dataclass
class EncodeOptions:
    """The keyword arguments of ``encode()``, checked in one place."""

    pooling: Pooling = "mean"
    batch_size: int = 32
    show_progress_bar: bool | None = None
    output_value: str = "sentence_embedding"
    convert_to_numpy: bool = True
    convert_to_tensor: bool = False
    normalize_embeddings: bool = False
    max_length: int = 512
    padding_side: str = "right"
    template: Any = None  # a Template, a preset's name or None; check() makes it a Template or None

    @classmethod
    def of(cls, kwargs: dict[str, Any], caller: str) -> EncodeOptions:
        """The options ``kwargs`` give; an unknown keyword is ``caller``'s TypeError, not this class's."""
        known = list(cls.__dataclass_fields__)
        unknown = next((key for key in kwargs if key not in known), None)
        if unknown is not None:
            raise TypeError(
                f"{caller} got an unexpected keyword argument {printable(repr(unknown))}; "
                f"the keyword arguments of encode() are {', '.join(known)}"
            )
        return cls(**kwargs)

    def check(self) -> None:
        """Refuse bad values (ValueError naming the argument); make ``template`` a Template or None."""
        self.template = as_template(self.template)
        if self.template is not None and len(self.template.formats) > 1 and self.output_value == "token_embeddings":
            raise ValueError(f"template {self.template} averages several prompts: it has no token embeddings")
        if self.pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {printable(repr(self.pooling))}; expected one of {', '.join(POOLINGS)}")
        if self.output_value not in ("sentence_embedding", "token_embeddings"):
            raise ValueError(
                "output_value must be 'sentence_embedding' or 'token_embeddings', "
                f"got {printable(repr(self.output_value))}"
            )
        if self.padding_side not in ("right", "left"):
            raise ValueError(f"padding_side must be 'right' or 'left', got {printable(repr(self.padding_side))}")
        positive_int(self.batch_size, "batch_size")
        positive_int(self.max_length, "max_length")

    def convert(self, rows: list[torch.Tensor] | torch.Tensor, single: bool, tokens: bool) -> Any:
        """The caller's types: ``rows`` are per-text token states, or the stacked ``(N, D)`` sentence vectors."""
        if tokens:
            out = [r.numpy() for r in rows] if self.convert_to_numpy and not self.convert_to_tensor else rows
            return out[0] if single else out
        if self.convert_to_tensor or not self.convert_to_numpy:
            return rows[0] if single else rows
        array = rows.numpy().astype(np.float32)
        return array[0] if single else array


def encode_texts(
    encoder: EncoderFromDecoder,
    plans: Sequence[Plan],
    sentences: Any,
    instruction: str | None,
    opts: EncodeOptions,
    chunked: bool,
) -> dict[str, Any]:
    """``encode_specs()`` once its arguments are checked: ``{plan name: what encode() returns}``.

    ``chunked``: tokenize a chunk at a time while the device runs the chunks before (the CUDA path), each
    chunk sorted by length; otherwise all texts are tokenized first and sorted together.
    """
    texts, single = _texts.check_texts(sentences)
    template = opts.template
    prompts = len(template.formats) if template is not None else 1
    chunks = _batching.Chunks(
        encoder.tokenizer, texts, instruction, sink=encoder.sink_ids(), max_length=opts.max_length, template=template,
        first=opts.batch_size if chunked else None,
        size=opts.batch_size * ENCODE_CHUNK_BATCHES if chunked else None, prefetch=chunked,
        offsets=False,
    )  # fmt: skip
    total = prompts * sum(math.ceil(n / opts.batch_size) for n in chunks.sizes)
    encoder.compile_if_repaid(prompts * len(texts))  # a long job compiles the graphs' layer loop first (replaying.py)
    show = total > 8 if opts.show_progress_bar is None else opts.show_progress_bar
    token_output = opts.output_value == "token_embeddings"
    # Sentence vectors: (plans, texts, D), each prompt's vectors added at their texts' rows (a template of several
    # prompts averages them below); token states: per plan, one tensor per text.
    sums = torch.zeros(len(plans), 0 if token_output else len(texts), encoder.config.hidden_size)
    states: list[list[Any]] = [[None] * len(texts) for _ in plans] if token_output else []

    def work() -> Iterator[tuple[_texts.Tokenized, list[int], torch.Tensor]]:
        for chunk in chunks:
            for tokens in chunk.prompts:
                for rows in _batching.batches(tokens.lengths, opts.batch_size):
                    yield tokens, rows, torch.tensor(rows, dtype=torch.long) + chunk.start

    with tqdm(total=total, desc="encode", disable=not show, unit="batch") as bar:
        for done in pooled_batches(
            encoder, work(), plans, pooling=opts.pooling, padding_side=opts.padding_side, token_embeddings=token_output
        ):
            if done.counts is None:
                sums.index_add_(1, done.key, done.vectors)  # one index operation per batch for all plans
            else:
                for k, plan_states in enumerate(states):
                    for i, row in zip(done.key.tolist(), done.vectors[k].split(done.counts), strict=True):
                        plan_states[i] = row
            bar.update(1)
    if token_output:
        return {
            plan.name: opts.convert([row.clone() for row in rows], single, True)
            for plan, rows in zip(plans, states, strict=True)
        }
    if prompts > 1:
        sums /= prompts
    if opts.normalize_embeddings:
        sums = torch.nn.functional.normalize(sums, dim=-1)  # a zero vector stays zero
    return {plan.name: opts.convert(sums[k], single, False) for k, plan in enumerate(plans)}


class TextEncoding:
    """Texts in, vectors out: the methods of :class:`~nosink.models.encoder.EncoderFromDecoder` that take texts.

    A mixin of the encoder (its layer loop is in ``models/encoder.py``); these methods tokenize, batch, run
    the batches through the encoder's plans and pool, with this module's pipeline.
    """

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
        template: Template | str | None = None,
    ) -> Any:
        """Embed texts, sentence-transformers style.

        Each input is ``[sink token] + instruction + text`` (see ``sink_token``); pooling uses the
        text tokens only, never the instruction or the sink token (the paper's protocol).
        Texts are sorted by length and batched; results come back in input order and, in float32,
        do not depend on the batch size, the padding side or the other texts in a batch (to about
        1e-5; in bfloat16, differently padded shapes can differ by the dtype's rounding).

        On CUDA the texts are tokenized in chunks while the GPU runs the chunks before, and vectors come back a
        few batches after their launch (:mod:`nosink.models.encoding`; the GPU guide says more).

        A text without tokens (``""``, or only characters the tokenizer drops) gets a zero vector, also
        with ``normalize_embeddings=True`` (and a ``(0, D)`` array of token embeddings); each call that
        meets such texts emits one ``UserWarning`` saying how many there were and the first few indices.
        Texts longer than ``max_length`` lose their last tokens, and each call that cuts any emits one
        ``UserWarning`` saying how many.

        Args:
            sentences: one text, or a list (tuple, numpy array, ...) of texts.
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
            max_length: at most this many tokens per input, the sink token and the instruction
                included; longer texts are truncated (with a warning).
            padding_side: ``right`` (default) or ``left``; the result is the same.
            template: a prompt around each text (:class:`~nosink.models.texts.Template`, or a preset's name
                from :mod:`nosink.models.templates`: ``"PromptEOL"``, ``"MetaEOL"``, ``"Echo"``, ...). The
                input becomes ``[sink token] + instruction + prompt``, and pooling reads the prompt's last
                token or one copy of the text, as the template says; a template of several prompts gives
                the mean of their vectors (normalised after averaging). Truncation cuts the text, never
                the prompt. ``None`` (default): the encoder's own ``template`` (none unless it was built or
                saved with one); ``"none"``: no template, whatever the encoder's.

        Raises:
            TypeError: if ``sentences`` is neither a string nor an iterable of strings (``None``, bytes).
            ValueError: for a missing tokenizer, bad arguments, an item of ``sentences`` that is not a
                string, or an instruction that leaves a text no room within ``max_length`` (the
                instruction is counted as tokenized together with each text).
        """
        return self.encode_specs(
            [self.plan],
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
            template=template,
        )[self.plan.name]

    def encode_specs(
        self,
        specs: Sequence[str | Spec | Plan],
        sentences: str | Sequence[str],
        instruction: str | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """:meth:`encode` under several specs at once, running their shared lower layers once per batch.

        For a sweep such as ``F* | M0B*k`` for k = 1..n, the forward layers below the lowest
        converted one run once per batch instead of once per spec.

        Args:
            specs: the specs to encode with (this encoder's own spec need not be among them), or plans
                from :meth:`plan_for`, e.g. one spec at several exits:
                ``[encoder.plan_for(spec, exit_layer=m) for m in (8, 12, 16)]``. Specs exit where this
                encoder does (``exit_layer``).
            sentences: one text or a list of texts.
            instruction: as for :meth:`encode`.
            **kwargs: any other argument of :meth:`encode`.

        Returns:
            ``{plan name: what encode() would return with that spec}``: the canonical spec string, with
            ``" @ exit m"`` after it for a plan that exits early (:attr:`Plan.name`).

        Raises:
            SpecError: if a spec does not fit this decoder.
            TypeError: if ``specs`` is one spec rather than a list of them, or as for :meth:`encode`.
            ValueError: as for :meth:`encode`.
        """
        if isinstance(specs, (str, Spec, Plan)):
            raise TypeError(
                f"specs must be a list of specs, got one {type(specs).__name__} ({printable(str(specs))!r}): "
                "write encode_specs([spec], ...), or use encode() for the encoder's own spec"
            )
        if not specs:
            raise ValueError("encode_specs() needs at least one spec")
        opts = EncodeOptions.of(kwargs, "encode_specs()")
        if opts.template is None:
            opts.template = self.template
        if self.tokenizer is None:
            raise ValueError("encode() needs a tokenizer: pass tokenizer= when building the encoder")
        opts.check()
        plans = list({plan.name: plan for plan in map(self.plan_for, specs)}.values())  # a repeated spec runs once
        device = self.parts.embed_tokens.weight.device
        return encode_texts(self, plans, sentences, instruction, opts, self._tokenizes_in_chunks(device))

    def _tokenizes_in_chunks(self, device: torch.device) -> bool:
        # Whether encode() overlaps tokenizing with the forward (see encode_specs); tests force it on the CPU.
        return device.type == "cuda" and self.fast_attention is not False and self.pack_padding is not False

    def encode_tokens(
        self,
        tokens: _texts.Tokenized,
        rows: Sequence[int] | None = None,
        *,
        specs: Sequence[str | Spec | Plan] | None = None,
        pooling: Pooling = "mean",
        padding_side: Literal["right", "left"] = "right",
        token_embeddings: bool = False,
    ) -> dict[str, Any]:
        """One batch of already tokenized inputs, run under each spec and pooled over their text tokens.

        The step of :meth:`encode_specs` after tokenizing: ``rows`` of ``tokens`` (from
        :func:`nosink.models.texts.tokenize`; all of them by default) are padded into one batch, run
        (the specs sharing their lower layers) and pooled, never over the sink token or the prompt.
        A caller that tokenizes on its own (a server checking request sizes, say) runs its batches here
        and gets what :meth:`encode` would, before normalisation.

        Args:
            tokens: the tokenized inputs.
            rows: which of them form the batch, in the order of the result's rows.
            specs: the specs or compiled plans (:meth:`plan_for`); this encoder's own by default.
            pooling: as for :meth:`encode`.
            padding_side: ``right`` or ``left``; the result is the same.
            token_embeddings: per row, the ``(n_text_tokens, D)`` states of its text tokens instead of a vector.

        Returns:
            ``{plan name: (B, D) float32 tensor on the CPU}``, or per plan a list of ``B`` token-state tensors.
        """
        rows = range(len(tokens)) if rows is None else rows
        plans = [self.plan] if specs is None else [self.plan_for(spec) for spec in specs]
        plans = list({plan.name: plan for plan in plans}.values())
        batch = [(tokens, rows, None)]
        (done,) = pooled_batches(
            self, batch, plans, pooling=pooling, padding_side=padding_side, token_embeddings=token_embeddings
        )
        if done.counts is None:
            return {plan.name: done.vectors[k] for k, plan in enumerate(plans)}
        return {plan.name: list(done.vectors[k].split(done.counts)) for k, plan in enumerate(plans)}

    def encode_batch(
        self,
        tokens: _texts.Tokenized,
        rows: Sequence[int],
        plans: Sequence[Plan],
        pooling: Pooling,
        padding_side: str,
        token_embeddings: bool,
        rider: Rider | None = None,
    ) -> tuple[torch.Tensor, list[int] | None]:
        """One batch of ``tokens`` (its ``rows``), pooled under each plan and left on the device, nothing waited for.

        Returns ``(plans, B, D)`` float32 vectors and ``None``, or with ``token_embeddings`` the ``(plans, n, D)``
        states of the batch's ``n`` text tokens, row after row, and each row's count of them. On CUDA the
        batch is built on the host in pinned memory and what the layout needs is read there: the device work
        is only queued; where a CUDA graph applies, pooled vectors come from one that also pools, built from the
        tokens without a padded batch (see ``models/replaying.py``). :func:`nosink.models.encoding.pooled_batches`
        brings the results to the host.

        A ``rider`` (:mod:`nosink.models.riding`) puts decode tokens after the batch's packed stream: its
        ``logits`` are set by this pass. Only where :meth:`rides` says the batch can carry one.

        Raises:
            ValueError: for plans whose Token Prepending disagrees with the encoder's, or a ``rider`` on a batch
                that cannot carry one (or with ``token_embeddings``).
        """
        if rider is not None and (token_embeddings or not self.rides(plans)):
            raise ValueError(
                "decode tokens ride only a pooled batch under one plan that walks every layer once, packed on the fast "
                "path: check encoder.rides(plans) first"
            )
        if any((plan.prepend is None) != (self.prepend is None) for plan in plans):
            raise ValueError(
                "these tokens hold Token Prepending's placeholder only when the encoder prepends "
                f"(prepend={self.prepend}), and the plans {[plan.name for plan in plans]} disagree: give plans that "
                "match the encoder (plan_for(spec) does), or use an encoder built with (or without) prepend="
            )
        if not token_embeddings and padding_side in ("right", "left"):  # a packed stream has no padding side
            with torch.inference_mode():
                pad_id = _batching.pad_id(self.tokenizer)
                pooled = self._replay_pooled(tokens, rows, list(plans), pooling, pad_id, rider)
            if pooled is not None:
                return pooled, None
        device = self.parts.embed_tokens.weight.device
        pinned = device.type == "cuda"
        ids, attn, text_mask = _batching.pad(
            tokens, rows, _batching.pad_id(self.tokenizer), padding_side, pin_memory=pinned
        )  # (B, T) each, on the host
        lengths = attn.sum(-1).tolist()
        front = bool((attn.cummin(-1).values == attn).all())  # each row's real tokens form a prefix
        with torch.inference_mode():
            batch = self._prepare(ids, attn, plans=plans, host=HostBatch(lengths, front), embed=False, rider=rider)
            out = self._run_plans(list(plans), batch)
            if token_embeddings:
                flat = text_mask.flatten().nonzero().squeeze(1)  # (n,) text tokens of (B * T), row after row
                flat = flat.pin_memory() if pinned else flat
                flat = flat.to(device, non_blocking=True)
                counts = text_mask.sum(-1).tolist()
                states = [out[plan.name].flatten(0, 1).index_select(0, flat).float() for plan in plans]
                return torch.stack(states), counts
            mask = text_mask.to(device, non_blocking=True)
            return torch.stack([pool(out[plan.name], mask, pooling).float() for plan in plans]), None

    def sink_ids(self) -> list[int]:
        """The token ids put before every instruction and text (see ``sink_token``).

        With Token Prepending (``prepend``) the placeholder follows the sink token: ``[sink, placeholder]``.
        The placeholder's id is the sink token's own (its embedding is never read: it enters as zeros).

        Raises:
            TypeError: if ``sink_token`` is not a string.
            ValueError: if ``sink_token`` names no token of the tokenizer, or the encoder prepends and has no
                sink token (the placeholder would become the row's first token, the attention sink itself).
        """
        ids = _texts.sink_ids(self.tokenizer, self.sink_token)
        if self.prepend is None:
            return ids
        if len(ids) != 1:
            eos = getattr(self.tokenizer, "eos_token", None)
            hint = f" such as sink_token={eos!r} (the tokenizer's end-of-text token)" if eos else ""
            raise ValueError(
                f"Token Prepending (prepend={self.prepend}) puts its placeholder right after the sink token, and "
                f"sink_token={self.sink_token!r} gives none here (this tokenizer has no BOS token): pass a "
                f"sink token{hint}; nosink.evals.sinks.choose_sink_token finds the one the model attends most"
            )
        return ids + ids
