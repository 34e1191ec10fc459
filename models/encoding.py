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
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
import torch
from tqdm.auto import tqdm

from nosink.checks import positive_int, printable
from nosink.layerspec import Plan

from . import batching as _batching
from . import texts as _texts
from .pooling import POOLINGS, Pooling
from .templates import as_template

if TYPE_CHECKING:
    from .encoder import EncoderFromDecoder

__all__ = ["ENCODE_CHUNK_BATCHES", "ENCODE_LAG_BATCHES", "EncodeOptions", "Pooled", "encode_texts", "pooled_batches"]

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
    pending: deque[tuple[Key, torch.Tensor, Any, list[int] | None]] = deque()
    for tokens, rows, key in batches:
        out, counts = encoder.encode_batch(tokens, rows, plans, pooling, padding_side, token_embeddings)
        if out.device.type == "cuda":
            host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
            host.copy_(out, non_blocking=True)
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(out.device))  # the model's GPU, not the current one
            pending.append((key, host, event, counts))
            keep = lag
        else:
            pending.append((key, out.cpu(), None, counts))
            keep = 0
        while len(pending) > keep:
            yield _take(pending.popleft())
    while pending:
        yield _take(pending.popleft())


def _take(item: tuple[Any, torch.Tensor, Any, list[int] | None]) -> Pooled:
    key, host, event, counts = item
    if event is not None:
        event.synchronize()  # recorded `lag` batches ago: normally long done
    return Pooled(key, host, counts)


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
