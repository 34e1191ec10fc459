"""Padding, batching by length, and reading one call's texts a chunk at a time.

What every batch loop over :class:`~nosink.models.texts.Tokenized` inputs shares: the batches (longest inputs
first), the padded tensors pooling reads, the chunked and prefetching reader of a call's texts, and the one
warning per call about truncated and empty texts.

>>> tokens = Tokenized(prefix_ids=[[1, 9], [1, 9]], text_ids=[[5, 6, 7], [8]])
>>> ids, attention, text = pad(tokens, [1, 0], pad_id=0, side="left")
>>> ids.tolist()
[[0, 0, 1, 9, 8], [1, 9, 5, 6, 7]]
>>> text.int().tolist()
[[0, 0, 0, 0, 1], [0, 0, 1, 1, 1]]
>>> batches(tokens.lengths, batch_size=1)
[[0], [1]]
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from nosink.checks import positive_int, printable

from .texts import Framing, Template, Tokenized, tokenize_framed
from .tokenizer_backend import Encoded, read_encodings, rust_backend

__all__ = ["Chunk", "Chunks", "Padded", "Stream", "batches", "pad", "pad_id", "stream", "warn_about"]


class Padded(NamedTuple):
    """One padded batch; unpacks as ``ids, attention_mask, text_mask``."""

    input_ids: torch.Tensor  # (B, T) long, pad_id where there is no token
    attention_mask: torch.Tensor  # (B, T) long, 1 for real tokens
    text_mask: torch.Tensor  # (B, T) bool, true on the text tokens (what pooling reads)


def pad_id(tokenizer: Any) -> int:
    """The id that fills padding: the tokenizer's pad token, else its EOS token, else 0 (it is never attended)."""
    for value in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if value is not None:
            return int(value)
    return 0


def batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Input indices in batches of at most ``batch_size``, longest inputs first (the least padding).

    Raises:
        ValueError: if ``batch_size`` is not a positive integer.
    """
    positive_int(batch_size, "batch_size")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable: ties keep input order
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


@dataclass(frozen=True)
class Stream:
    """A batch's inputs packed row after row on the host: what :func:`pad` lays out, without the padding."""

    ids: np.ndarray  # (N,) int64: each row's prefix, text and suffix tokens, row after row
    lengths: list[int]  # each row's tokens
    prefix: list[int]  # each row's tokens before its text (the sink token and the prompt)
    text: list[int]  # each row's text tokens


def stream(tokens: Tokenized, rows: Sequence[int]) -> Stream:
    """The inputs ``rows`` of ``tokens`` packed row after row (the real tokens of :func:`pad`'s batch, in order)."""
    pieces = [(tokens.prefix_ids[i], tokens.text_ids[i], tokens.suffix(i)) for i in rows]
    lengths = [len(a) + len(b) + len(c) for a, b, c in pieces]
    ids = np.fromiter(chain.from_iterable(a + b + c for a, b, c in pieces), dtype=np.int64, count=sum(lengths))
    return Stream(ids, lengths, [len(a) for a, _, _ in pieces], [len(b) for _, b, _ in pieces])


def pad(
    tokens: Tokenized, rows: Sequence[int], pad_id: int, side: str = "right", *, pin_memory: bool = False
) -> Padded:
    """The inputs ``rows`` of ``tokens`` as one padded batch, padded on ``side`` (``right`` or ``left``).

    An all-empty batch still has one (padding) column. With ``pin_memory`` the tensors are in pinned
    (page-locked) memory, so that copies to a GPU with ``non_blocking=True`` do not wait for it.

    Raises:
        ValueError: for a ``side`` other than ``right`` or ``left``.
    """
    if side not in ("right", "left"):
        raise ValueError(f"padding side must be 'right' or 'left', got {printable(repr(side))}")
    packed = stream(tokens, rows)
    prefix = torch.tensor(packed.prefix, dtype=torch.long)  # (B,)
    text_end = prefix + torch.tensor(packed.text, dtype=torch.long)  # (B,)
    length = torch.tensor(packed.lengths, dtype=torch.long)  # (B,)
    width = max(1, int(length.max())) if len(rows) else 1
    start = torch.zeros_like(length) if side == "right" else width - length  # (B,) first real column
    place = torch.arange(width)[None, :] - start[:, None]  # (B, T) index within the row's tokens
    real = (place >= 0) & (place < length[:, None])  # (B, T)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    ids[real] = torch.from_numpy(packed.ids)  # row-major order: each row's tokens, in order
    out = Padded(ids, real.long(), real & (place >= prefix[:, None]) & (place < text_end[:, None]))
    return Padded(*(t.pin_memory() for t in out)) if pin_memory else out


@dataclass(frozen=True)
class Chunk:
    """Texts ``start`` to ``start + len(prompts[0]) - 1`` of a call, tokenized once per prompt of its template."""

    start: int  # the index of the chunk's first text among the call's texts
    prompts: list[Tokenized]  # one per template prompt (one without a template); indices within the chunk


class Chunks:
    """The texts of one call tokenized a chunk at a time, each chunk under every prompt of its template.

    Iterating gives :class:`Chunk` values in order: the first holds ``first`` texts, each next one twice as
    many as the one before, up to ``size`` (all texts in one chunk by default). Each chunk is tokenized only
    when the iteration reaches it (or, with ``prefetch``, while the one before is used), so a caller can run
    the batches of one chunk on a GPU while the next is tokenized. Each chunk goes through
    :func:`~nosink.models.texts.tokenize` as it is; what the whole call adds:

    - the truncation and empty-text warnings of :func:`warn_about` come once for all the texts, when the
      last chunk has been tokenized (with one chunk: before the iteration yields it, as tokenizing
      followed by :func:`warn_about` would);
    - an error of tokenizing is the one that tokenizing all the texts at once would raise (the same
      text index, the same count of texts affected), whichever chunk meets it first.

    Args:
        tokenizer: as for :func:`~nosink.models.texts.tokenize`.
        texts: as for :func:`~nosink.models.texts.tokenize`.
        instruction: as for :func:`~nosink.models.texts.tokenize`.
        sink: as for :func:`~nosink.models.texts.tokenize`.
        max_length: as for :func:`~nosink.models.texts.tokenize`.
        template: a :class:`~nosink.models.texts.Template` (each of its prompts tokenizes every chunk), or ``None``.
        first: the first chunk's number of texts; ``None``: ``size``.
        size: the most texts a chunk holds; ``None``: all of them.
        caller: who the warnings name.
        prefetch: with a fast tokenizer, tokenize the next chunk in a thread while the caller works on this one
            (the tokenizer's Rust code runs beside Python; turning ids into rows stays on the caller's thread).
            The chunks are the same either way.
        offsets: keep the text tokens' character offsets (:attr:`~nosink.models.texts.Tokenized.offsets`);
            without them (and without an instruction or a template, which need them to split rows), they are not
            even read.
    """

    def __init__(
        self,
        tokenizer: Any,
        texts: Sequence[str],
        instruction: str | None = None,
        *,
        sink: Sequence[int] = (),
        max_length: int | None = None,
        template: Template | None = None,
        first: int | None = None,
        size: int | None = None,
        caller: str = "encode()",
        prefetch: bool = False,
        offsets: bool = True,
    ) -> None:
        self.tokenizer, self.texts, self.instruction = tokenizer, list(texts), instruction
        self.prefetch, self.offsets = prefetch, offsets
        self.sink, self.max_length, self.caller = list(sink), max_length, caller
        self.inputs = (
            [
                Framing(instruction, self.sink, max_length, f, template.target, template.copy or 1)
                for f in template.formats
            ]
            if template is not None
            else [Framing(instruction, self.sink, max_length)]
        )
        n = len(self.texts)
        size = max(n, 1) if size is None else positive_int(size, "size")
        first = size if first is None else positive_int(first, "first")
        self.bounds: list[tuple[int, int]] = []
        start, step = 0, min(first, size)
        while start < n:
            stop = min(n, start + step)
            self.bounds.append((start, stop))
            start, step = stop, min(2 * step, size)

    @property
    def sizes(self) -> list[int]:
        """Each chunk's number of texts."""
        return [stop - start for start, stop in self.bounds]

    def __len__(self) -> int:
        return len(self.bounds)

    def __iter__(self) -> Iterator[Chunk]:
        truncated: set[int] = set()
        empty: list[int] = []
        pool = ThreadPoolExecutor(1, thread_name_prefix="nosink-tokenize") if self._prefetches() else None
        coming: Future[list[list[Any]]] | None = None
        try:
            for k, (start, stop) in enumerate(self.bounds):
                encoded, coming = coming, None
                if pool is not None and k + 1 < len(self.bounds):
                    coming = pool.submit(self._encode_chunk, *self.bounds[k + 1])  # while this chunk is used
                prompts = self._tokenize(start, stop, encoded)
                truncated.update(start + i for tokens in prompts for i in tokens.truncated)
                empty.extend(start + i for i in prompts[0].empty)
                if k == len(self.bounds) - 1:
                    _warn(sorted(truncated), empty, len(self.texts), self.max_length, self.caller)
                yield Chunk(start, prompts)
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def _prefetches(self) -> bool:
        # Tokenizing ahead pays where the tokenizer's Rust backend does the work (see nosink.models.tokenizer_backend).
        return self.prefetch and len(self.bounds) > 1 and rust_backend(self.tokenizer) is not None

    def _encode_chunk(self, start: int, stop: int) -> list[list[Any]]:
        # The backend's Encoding objects for texts start..stop under each prompt: the Rust part of encode_fast,
        # which lets go of Python's lock. Turning them into lists (read_encodings) is left to the caller's thread,
        # so that this thread never holds the lock while the caller launches work on the GPU.
        backend, texts = rust_backend(self.tokenizer), self.texts[start:stop]
        return [backend.encode_batch(how.strings(texts), add_special_tokens=False) for how in self.inputs]

    def _read_chunk(self, encodings: list[list[Any]]) -> list[Encoded]:
        # _encode_chunk's output as lists, on the caller's thread (offsets only as far as tokenize_framed reads them).
        lead = not self.offsets and not self.instruction
        return [read_encodings(e, lead and how.template is None) for e, how in zip(encodings, self.inputs, strict=True)]

    def _tokenize(self, start: int, stop: int, encoded: Future[list[list[Any]]] | None = None) -> list[Tokenized]:
        try:
            read = self._read_chunk(encoded.result()) if encoded is not None else None
            return self._prompts(self.texts[start:stop], read)
        except (TypeError, ValueError) as err:
            failed = err
        if (start, stop) != (0, len(self.texts)):
            self._prompts(self.texts)  # raises the whole call's error: its index and count, not the chunk's
        raise failed

    def _prompts(self, texts: list[str], encoded: list[Encoded] | None = None) -> list[Tokenized]:
        return [
            tokenize_framed(self.tokenizer, texts, how, encoded[i] if encoded is not None else None, self.offsets)
            for i, how in enumerate(self.inputs)
        ]


def warn_about(tokens: Tokenized, max_length: int | None, caller: str = "encode()") -> None:
    """One ``UserWarning`` for the texts cut to ``max_length`` and one for the texts without tokens, if any.

    Each names how many texts it concerns (and the first few indices); nothing is said per text.
    """
    _warn(tokens.truncated, tokens.empty, len(tokens), max_length, caller)


def _warn(truncated: list[int], empty: list[int], n: int, max_length: int | None, caller: str) -> None:
    level = _stacklevel()
    if truncated:
        cut = _texts(truncated, n, "was", "were")
        warnings.warn(
            f"{caller}: {cut} cut to max_length={max_length} tokens, sink token and instruction included "
            f"({_indices(truncated)}); raise max_length to keep more of them",
            UserWarning,
            stacklevel=level,
        )
    if empty:
        some = _texts(empty, n, "has", "have")
        warnings.warn(
            f"{caller}: {some} no tokens ({_indices(empty)}); a text without tokens gets a zero vector, "
            "also with normalize_embeddings=True",
            UserWarning,
            stacklevel=level,
        )


def _texts(indices: list[int], total: int, singular: str, plural: str) -> str:
    return f"{len(indices)} of {total} texts {singular if len(indices) == 1 else plural}"


def _indices(indices: list[int], shown: int = 5) -> str:
    head = ", ".join(map(str, indices[:shown]))
    more = ", ..." if len(indices) > shown else ""
    return f"index {head}" if len(indices) == 1 else f"indices {head}{more}"


def _stacklevel() -> int:
    # Point a warning at the caller's line, past every frame of nosink.models (encode() -> encode_specs() -> here).
    here = Path(__file__).parent
    frame, level = sys._getframe(1), 1
    while frame is not None and Path(frame.f_code.co_filename).parent == here:
        frame, level = frame.f_back, level + 1
    return level
