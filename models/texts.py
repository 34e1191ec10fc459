"""The text pipeline: texts -> token ids -> length-sorted, padded batches -> the masks pooling reads.

Every consumer of raw text goes through here (:meth:`EncoderFromDecoder.encode`, the NER probe, the
attention-sink diagnostics), so the sink token, the instruction split, truncation, batching and
padding are decided in one place.

An input is ``[sink token] + instruction + text``. The instruction and the text are tokenized together,
as the model reads them (apart, a prompt ending in a space would leave a lone space token), in one batch
call of the tokenizer, and split where the text starts: a token that reaches into the text counts as
text. Only text tokens are pooled; the sink token and the instruction form the row's *prefix*.

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple

import torch

from nosink.layerspec.checks import positive_int, printable

__all__ = [
    "Padded",
    "Tokenized",
    "batches",
    "check_texts",
    "first_tokens",
    "join_words",
    "pad",
    "pad_id",
    "sink_ids",
    "tokenize",
    "warn_about",
]


@dataclass(frozen=True)
class Tokenized:
    """Token ids of several inputs, each split into a prefix (never pooled) and its text.

    Attributes:
        prefix_ids: per input, the sink token and the instruction's tokens.
        text_ids: per input, the text's tokens, after truncation.
        offsets: per input, each kept text token's ``(start, end)`` characters in the text (not counting
            the instruction); ``None`` for a tokenizer without offsets (a slow tokenizer).
        truncated: indices of the inputs whose text was cut to ``max_length``.
    """

    prefix_ids: list[list[int]]
    text_ids: list[list[int]]
    offsets: list[list[tuple[int, int]]] | None = None
    truncated: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.text_ids)

    @property
    def lengths(self) -> list[int]:
        """Each input's number of tokens, prefix included."""
        return [len(p) + len(t) for p, t in zip(self.prefix_ids, self.text_ids, strict=True)]

    @property
    def empty(self) -> list[int]:
        """Indices of the inputs whose text has no tokens (nothing to pool)."""
        return [i for i, t in enumerate(self.text_ids) if not t]


class Padded(NamedTuple):
    """One padded batch; unpacks as ``ids, attention_mask, text_mask``."""

    input_ids: torch.Tensor  # (B, T) long, pad_id where there is no token
    attention_mask: torch.Tensor  # (B, T) long, 1 for real tokens
    text_mask: torch.Tensor  # (B, T) bool, true on the text tokens (what pooling reads)


def check_texts(sentences: Any, name: str = "sentences") -> tuple[list[str], bool]:
    """``(texts, single)``: the texts as a list, and whether one string was given rather than a list.

    A string is one text; a list, tuple, numpy array of strings or any other iterable of strings is many.

    Raises:
        TypeError: for ``None``, bytes or anything else that is neither a string nor an iterable of them.
        ValueError: naming the first item that is not a string.
    """
    if isinstance(sentences, str):
        return [str(sentences)], True
    if isinstance(sentences, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"{name} must be a string or a list of strings, got {type(sentences).__name__}: "
            "decode it first, e.g. data.decode('utf-8')"
        )
    if sentences is None or not isinstance(sentences, Iterable):
        raise TypeError(f"{name} must be a string or a list of strings, got {type(sentences).__name__}")
    try:
        texts = list(sentences)
    except TypeError as err:  # a 0-d numpy array says it is iterable and is not
        raise TypeError(f"{name} must be a string or a list of strings, got {type(sentences).__name__}") from err
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            hint = ": decode it first, e.g. text.decode('utf-8')" if isinstance(text, (bytes, bytearray)) else ""
            raise ValueError(f"{name}[{i}] is a {type(text).__name__}, not a string{hint}")
    return [str(t) for t in texts], False  # numpy's str_ becomes a plain str


def sink_ids(tokenizer: Any, sink_token: str = "auto") -> list[int]:
    """The token ids put before every instruction and text.

    ``"auto"`` gives the tokenizer's BOS token when it has one (nothing otherwise), ``"none"`` gives
    nothing (the first instruction or text token becomes the attention sink), and any other string
    names the token to use.

    Raises:
        TypeError: if ``sink_token`` is not a string.
        ValueError: if ``sink_token`` names no token of the tokenizer.
    """
    if not isinstance(sink_token, str):
        raise TypeError(
            f"sink_token must be 'auto', 'none' or a token of the tokenizer, got {type(sink_token).__name__}"
        )
    if sink_token == "none":
        return []
    if sink_token != "auto":
        ids = tokenizer.convert_tokens_to_ids([sink_token])
        if not ids or ids[0] is None or ids[0] == tokenizer.unk_token_id:
            raise ValueError(f"sink_token {printable(repr(sink_token))} is not a token of this tokenizer")
        return list(ids)
    if tokenizer.bos_token_id is None:
        return []
    return [tokenizer.bos_token_id]


def pad_id(tokenizer: Any) -> int:
    """The id that fills padding: the tokenizer's pad token, else its EOS token, else 0 (it is never attended)."""
    for value in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if value is not None:
            return int(value)
    return 0


def tokenize(
    tokenizer: Any,
    texts: Sequence[str],
    instruction: str | None = None,
    *,
    sink: Sequence[int] = (),
    max_length: int | None = None,
) -> Tokenized:
    """Tokenize ``[sink] + instruction + text`` for every text, in one batch call of the tokenizer.

    No special tokens are added: the sink token is ``sink``, whatever the tokenizer's habits. With a
    fast tokenizer the instruction and each text are tokenized together and split by character
    offsets (a token reaching into the text counts as text), so the prefix is counted per text, as
    the model will read it; a slow tokenizer has no offsets and tokenizes the two apart.

    Args:
        tokenizer: a transformers tokenizer.
        texts: the texts (see :func:`check_texts`).
        instruction: a prompt put before every text, verbatim; ``None`` or ``""`` for none.
        sink: the ids put first (see :func:`sink_ids`).
        max_length: at most this many tokens per input, prefix included: longer texts lose their last
            tokens (their indices are in ``truncated``). ``None``: no limit.

    Raises:
        TypeError: if ``instruction`` is neither ``None`` nor a string.
        ValueError: for a ``max_length`` that is not a positive integer, or one that the sink token and
            the instruction fill, leaving a non-empty text no token.
    """
    if instruction is not None and not isinstance(instruction, str):
        raise TypeError(f"instruction must be a string or None, got {type(instruction).__name__}")
    if max_length is not None:
        positive_int(max_length, "max_length")
    instruction = instruction or ""
    sink = [int(i) for i in sink]
    if not texts:
        return Tokenized([], [], [])
    fast = bool(getattr(tokenizer, "is_fast", False))
    # No special tokens: the sink token is added once, here.
    if fast:
        enc = tokenizer([instruction + t for t in texts], add_special_tokens=False, return_offsets_mapping=True)
        n = len(instruction)
        heads, bodies, offsets = [], [], []
        for ids, spans in zip(enc["input_ids"], enc["offset_mapping"], strict=True):
            cut = sum(1 for _, end in spans if end <= n)
            heads.append(list(ids[:cut]))
            bodies.append(list(ids[cut:]))
            offsets.append([(max(0, start - n), end - n) for start, end in spans[cut:]])
    else:
        head = list(tokenizer(instruction, add_special_tokens=False)["input_ids"]) if instruction else []
        heads = [head] * len(texts)
        bodies = [list(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
        offsets = None
    prefixes = [sink + head for head in heads]
    truncated: list[int] = []
    if max_length is not None:
        room = [max_length - len(p) for p in prefixes]
        full = [i for i, (r, b) in enumerate(zip(room, bodies, strict=True)) if r < 1 and b]
        if full:
            i = full[0]
            raise ValueError(
                f"the sink token and instruction take {len(prefixes[i])} tokens before text {i} (tokenized "
                f"together with it), leaving no room for text within max_length={max_length} ({len(full)} of "
                f"{len(texts)} texts affected): raise max_length or shorten the instruction"
            )
        for i, r in enumerate(room):
            if not bodies[i]:  # nothing to pool whatever the prefix: keep the input within max_length
                prefixes[i] = prefixes[i][:max_length]
            elif len(bodies[i]) > r:
                truncated.append(i)
                bodies[i] = bodies[i][:r]
                if offsets is not None:
                    offsets[i] = offsets[i][:r]
    return Tokenized(prefixes, bodies, offsets, truncated)


def batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Input indices in batches of at most ``batch_size``, longest inputs first (the least padding).

    Raises:
        ValueError: if ``batch_size`` is not a positive integer.
    """
    positive_int(batch_size, "batch_size")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable: ties keep input order
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def pad(tokens: Tokenized, rows: Sequence[int], pad_id: int, side: str = "right") -> Padded:
    """The inputs ``rows`` of ``tokens`` as one padded batch, padded on ``side`` (``right`` or ``left``).

    An all-empty batch still has one (padding) column.

    Raises:
        ValueError: for a ``side`` other than ``right`` or ``left``.
    """
    if side not in ("right", "left"):
        raise ValueError(f"padding side must be 'right' or 'left', got {printable(repr(side))}")
    prefix = torch.tensor([len(tokens.prefix_ids[i]) for i in rows], dtype=torch.long)  # (B,)
    length = prefix + torch.tensor([len(tokens.text_ids[i]) for i in rows], dtype=torch.long)  # (B,)
    width = max(1, int(length.max())) if len(rows) else 1
    start = torch.zeros_like(length) if side == "right" else width - length  # (B,) first real column
    place = torch.arange(width)[None, :] - start[:, None]  # (B, T) index within the row's tokens
    real = (place >= 0) & (place < length[:, None])  # (B, T)
    flat = list(chain.from_iterable(tokens.prefix_ids[i] + tokens.text_ids[i] for i in rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    ids[real] = torch.tensor(flat, dtype=torch.long)  # row-major order: each row's tokens, in order
    return Padded(ids, real.long(), real & (place >= prefix[:, None]))


def join_words(words: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """Words joined by single spaces, and each word's ``(start, end)`` characters in the result.

    >>> join_words(["EU", "rejects"])
    ('EU rejects', [(0, 2), (3, 10)])
    """
    spans, pos = [], 0
    for word in words:
        spans.append((pos, pos + len(word)))
        pos += len(word) + 1
    return " ".join(words), spans


def first_tokens(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[int | None]:
    """For each character span (a word), the index of the first token overlapping it.

    ``None`` for a span that no token reaches (its tokens were cut by truncation). ``offsets`` are
    the tokens' character spans, in order (``Tokenized.offsets``).

    >>> first_tokens([(0, 2), (2, 6), (6, 10)], [(0, 2), (3, 10)])  # [EU][ rej][ects]
    [0, 1]
    """
    first: list[int | None] = []
    t = 0
    for start, end in spans:
        while t < len(offsets) and offsets[t][1] <= start:
            t += 1
        first.append(t if t < len(offsets) and offsets[t][0] < end else None)
    return first


def warn_about(tokens: Tokenized, max_length: int | None, caller: str = "encode()") -> None:
    """One ``UserWarning`` for the texts cut to ``max_length`` and one for the texts without tokens, if any.

    Each names how many texts it concerns (and the first few indices); nothing is said per text.
    """
    level = _stacklevel()
    n = len(tokens)
    if tokens.truncated:
        cut = _texts(tokens.truncated, n, "was", "were")
        warnings.warn(
            f"{caller}: {cut} cut to max_length={max_length} tokens, sink token and instruction included "
            f"({_indices(tokens.truncated)}); raise max_length to keep more of them",
            UserWarning,
            stacklevel=level,
        )
    if tokens.empty:
        empty = _texts(tokens.empty, n, "has", "have")
        warnings.warn(
            f"{caller}: {empty} no tokens ({_indices(tokens.empty)}); a text without tokens gets a zero vector, "
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
