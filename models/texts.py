"""Texts -> token ids, each row cut into a prefix, the pooled tokens and a suffix.

Every consumer of raw text goes through here (:meth:`EncoderFromDecoder.encode`, the NER probe, the
attention-sink diagnostics), so the sink token, the instruction split and truncation are decided in
one place; :mod:`nosink.models.batching` pads and batches the rows.

An input is ``[sink token] + instruction + text``. The instruction and the text are tokenized together,
as the model reads them (apart, a prompt ending in a space would leave a lone space token), in one batch
call of the tokenizer, and split where the text starts: a token that reaches into the text counts as
text. Only text tokens are pooled; the sink token and the instruction form the row's *prefix*.

A :class:`Template` puts the text inside a prompt (``This sentence : "{text}" means in one word:"``):
the input becomes ``[sink token] + instruction + prompt``, still tokenized in one piece, and each row
is cut in three, *prefix* + *pooled tokens* + *suffix*: the pooled tokens are those of one copy of
the text (``target="text"``, a token reaching into that copy counts as pooled) or the prompt's last
token (``target="last"``). Only the middle part is pooled.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from nosink.checks import positive_int, printable

from .tokenizer_backend import Encoded, encode_fast

__all__ = [
    "TEXT",
    "Framing",
    "Template",
    "Tokenized",
    "check_texts",
    "check_unicode",
    "read_lines",
    "sink_ids",
    "tokenize",
    "tokenize_framed",
]


TEXT = "{text}"
"""The placeholder a :class:`Template` format puts where the text goes."""

TemplateTarget = Literal["text", "last"]


@dataclass(frozen=True)
class Template:
    """A prompt around each text, and which of its tokens pooling reads.

    ``{text}`` marks where the text goes (replaced verbatim; other braces are plain characters). The
    input is ``[sink token] + instruction + prompt``: an ``instruction`` given to ``encode`` comes
    before the prompt, so the two compose.

    >>> eol = Template('This sentence : "{text}" means in one word:"', target="last")
    >>> eol.render("A cat.")
    ['This sentence : "A cat." means in one word:"']
    >>> Template("Document: {text}. Again: {text}", copy=2).render("hi")
    ['Document: hi. Again: hi']

    Attributes:
        formats: the prompt with ``{text}`` in it, or several prompts (given as a tuple): each is
            encoded and pooled apart, and their vectors are averaged (MetaEOL). Always stored as a tuple.
        target: ``"last"`` pools the prompt's last token (PromptEOL: the token that would predict the
            "one word"); ``"text"`` pools the tokens of one copy of the text with the ``pooling``
            given to ``encode`` (mean by default).
        copy: with ``target="text"``, which copy of the text is pooled, counting from 1 (``copy=2``:
            the second, as echo embeddings); needed when a prompt holds ``{text}`` more than once.
        name: a short name (presets set it; results files record it).
        citation: where the prompt comes from (presets set it).

    Raises:
        ValueError: for a prompt without ``{text}``, an unknown ``target``, several copies of the
            text with ``target="text"`` and no ``copy``, or a ``copy`` that a prompt does not have.
        TypeError: for a prompt that is not a string.
    """

    formats: str | tuple[str, ...]
    target: TemplateTarget = "text"
    copy: int | None = None
    name: str = ""
    citation: str = ""

    def __post_init__(self) -> None:
        formats = (self.formats,) if isinstance(self.formats, str) else tuple(self.formats)
        if not formats:
            raise ValueError("a template needs at least one prompt with {text} in it")
        for fmt in formats:
            if not isinstance(fmt, str):
                raise TypeError(f"a template's prompts must be strings, got {type(fmt).__name__}")
            check_unicode(fmt, f"the template prompt {printable(repr(fmt))}")
            if TEXT not in fmt:
                raise ValueError(
                    f"the template prompt {printable(repr(fmt))} has no {TEXT}: write where the text goes, "
                    f'e.g. \'This sentence : "{TEXT}" means in one word:"\''
                )
        if self.target not in ("text", "last"):
            raise ValueError(f"a template's target must be 'text' or 'last', got {printable(repr(self.target))}")
        if self.target == "last" and self.copy is not None:
            raise ValueError("copy picks the copy of the text to pool; target='last' pools the prompt's last token")
        if self.copy is not None:
            positive_int(self.copy, "copy")
        for fmt in formats:
            copies = fmt.count(TEXT)
            if self.target == "text" and self.copy is None and copies > 1:
                raise ValueError(
                    f"the template prompt {printable(repr(fmt))} holds {TEXT} {copies} times: say which copy is "
                    "pooled (copy=2 for the second), or pool the last token (target='last')"
                )
            if self.copy is not None and self.copy > copies:
                raise ValueError(
                    f"copy={self.copy} but the template prompt {printable(repr(fmt))} holds {TEXT} {copies} time(s)"
                )
        object.__setattr__(self, "formats", formats)

    def render(self, text: str) -> list[str]:
        """Each prompt with ``text`` in place of every ``{text}`` (what the model reads after the sink token)."""
        return [text.join(fmt.split(TEXT)) for fmt in self.formats]

    def __str__(self) -> str:
        return self.name or " || ".join(self.formats)


@dataclass(frozen=True)
class Tokenized:
    """Token ids of several inputs, each split into a prefix and a suffix (never pooled) around its text.

    Rows are read-only: inputs with the same prefix may share one list (a copy per text would cost millions of
    objects on a large call); build new lists rather than changing them in place.

    Attributes:
        prefix_ids: per input, the sink token and the instruction's tokens (with a template, every token
            before the pooled ones).
        text_ids: per input, the text's tokens, after truncation: the tokens pooling reads (with a
            template, those of the pooled copy of the text, or the prompt's last token).
        offsets: per input, each kept text token's ``(start, end)`` characters in the text (not counting
            the instruction); ``None`` for a tokenizer without offsets (a slow tokenizer) or a template
            that pools its last token.
        truncated: indices of the inputs whose text was cut to ``max_length``.
        suffix_ids: per input, the tokens after the pooled ones (a template's end); ``None`` for none.
    """

    prefix_ids: list[list[int]]
    text_ids: list[list[int]]
    offsets: list[list[tuple[int, int]]] | None = None
    truncated: list[int] = field(default_factory=list)
    suffix_ids: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.text_ids)

    def suffix(self, i: int) -> list[int]:
        """Input ``i``'s tokens after its pooled ones (``[]`` without a template)."""
        return self.suffix_ids[i] if self.suffix_ids is not None else []

    @property
    def lengths(self) -> list[int]:
        """Each input's number of tokens, prefix and suffix included."""
        return [
            len(p) + len(t) + len(self.suffix(i))
            for i, (p, t) in enumerate(zip(self.prefix_ids, self.text_ids, strict=True))
        ]

    @property
    def empty(self) -> list[int]:
        """Indices of the inputs whose text has no tokens (nothing to pool)."""
        return [i for i, t in enumerate(self.text_ids) if not t]


def check_texts(sentences: Any, name: str = "sentences") -> tuple[list[str], bool]:
    """``(texts, single)``: the texts as a list, and whether one string was given rather than a list.

    A string is one text; a list, tuple, numpy array of strings or any other iterable of strings is many.

    Raises:
        TypeError: for ``None``, bytes or anything else that is neither a string nor an iterable of them.
        ValueError: naming the first item that is not a string or holds a lone surrogate (see
            :func:`check_unicode`).
    """
    if isinstance(sentences, str):
        return [str(check_unicode(sentences, name))], True
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
        check_unicode(text, f"{name}[{i}]")
    return [str(t) for t in texts], False  # numpy's str_ becomes a plain str


def check_unicode(text: str, name: str) -> str:
    """``text`` if it is valid Unicode, i.e. holds no lone surrogate (``"\\ud800"``), which no tokenizer takes.

    Such characters come from decoding bytes with ``errors="surrogateescape"`` or from JSON's ``\\ud800``.

    >>> check_unicode("a\\ud800b", "texts[3]")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: texts[3] holds a lone surrogate (U+D800) at character 1, which is not valid Unicode text: ...

    Raises:
        ValueError: naming ``name``, the surrogate and its position.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(
            f"{name} holds a lone surrogate (U+{ord(text[err.start]):04X}) at character {err.start}, which is not "
            "valid Unicode text: remove it, or decode the bytes it came from with errors='replace'"
        ) from None
    return text


def read_lines(path: str | Path, data: bytes | None = None) -> list[str]:
    """The lines of a UTF-8 text file, exactly as an editor numbers them (item 0 is line 1).

    ``data``: the file's bytes, when they are read already (standard input, say); ``path`` then only
    names them in errors.

    Lines end at ``\\n`` only (one ``\\r`` before it is dropped, for Windows files); other characters
    that Python's ``splitlines()`` breaks on (U+2028, form feed, ``\\x1c``-``\\x1e``, ``\\x85``, a lone
    ``\\r``) stay inside their line. A UTF-8 byte-order mark at the start is dropped, and a final
    newline does not start another line.

    Raises:
        OSError: if the file cannot be read.
        ValueError: if it is not UTF-8.
    """
    path = Path(path)
    if data is None:
        data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"{printable(str(path))} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":  # the newline that ends the last line
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


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


def tokenize(
    tokenizer: Any,
    texts: Sequence[str],
    instruction: str | None = None,
    *,
    sink: Sequence[int] = (),
    max_length: int | None = None,
    template: str | None = None,
    target: TemplateTarget = "text",
    copy: int = 1,
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
        template: one prompt of a :class:`Template` (a string with ``{text}``): the input is then
            ``[sink] + instruction + prompt``, tokenized in one piece, and cut into prefix, pooled tokens
            and suffix (see the module docstring). A text too long loses its last tokens in every
            copy, so that the prompt's end is kept whole.
        target: with ``template``: ``"text"`` pools the tokens of copy ``copy`` of the text, ``"last"``
            the prompt's last token. A text without tokens has nothing pooled either way.
        copy: with ``template`` and ``target="text"``: which copy of the text is pooled, from 1.

    Raises:
        TypeError: if ``instruction`` is neither ``None`` nor a string.
        ValueError: for a ``max_length`` that is not a positive integer, or one that the sink token and
            the instruction (and the template) fill, leaving a non-empty text no token.
    """
    return tokenize_framed(tokenizer, texts, Framing(instruction, sink, max_length, template, target, copy))


# An empty row, shared by the rows that have no prefix tokens (never changed in place: rows are cut by slicing).
_NO_IDS: list[Any] = []


class Framing(NamedTuple):
    """How each input is built around its text: :func:`tokenize`'s arguments but the tokenizer and the texts."""

    instruction: str | None
    sink: Sequence[int]
    max_length: int | None
    template: str | None = None  # one prompt of a Template
    target: TemplateTarget = "text"
    copy: int = 1

    def strings(self, texts: Sequence[str]) -> list[str]:
        """What a fast tokenizer reads for each text: the instruction, then the text or the prompt around it."""
        parts = None if self.template is None else self.template.split(TEXT)
        return _strings(texts, self.instruction or "", parts)


def tokenize_framed(
    tokenizer: Any,
    texts: Sequence[str],
    how: Framing,
    encoded: Encoded | None = None,
    keep_offsets: bool = True,
) -> Tokenized:
    """:func:`tokenize`, given the tokenizer's output for ``how.strings(texts)`` when ``encoded`` is not ``None``.

    With ``keep_offsets=False`` and neither an instruction nor a template, offsets are neither read nor kept.

    Raises:
        TypeError: as :func:`tokenize`.
        ValueError: as :func:`tokenize`.
    """
    instruction, sink, max_length, template, target, copy = how
    if instruction is not None and not isinstance(instruction, str):
        raise TypeError(f"instruction must be a string or None, got {type(instruction).__name__}")
    if instruction is not None:
        check_unicode(instruction, "instruction")
    if max_length is not None:
        positive_int(max_length, "max_length")
    instruction = instruction or ""
    sink = [int(i) for i in sink]
    if not texts:
        return Tokenized([], [], [])
    if template is not None:
        return _tokenize_template(tokenizer, texts, instruction, sink, max_length, template, target, copy, encoded)
    fast = bool(getattr(tokenizer, "is_fast", False))
    # No special tokens: the sink token is added once, here.
    if fast:
        n = len(instruction)
        lead = not keep_offsets and n == 0  # only the leading empty spans are needed (see read_encodings)
        all_ids, all_spans = (
            encoded if encoded is not None else encode_fast(tokenizer, _strings(texts, instruction, None), lead)
        )
        heads, bodies = [], []
        offsets: list[list[tuple[int, int]]] | None = None if lead else []
        for ids, spans in zip(all_ids, all_spans, strict=True):
            # Tokens ending by the instruction's end form the prefix; without an instruction those are the
            # empty (0, 0) spans, counted at C speed, and the spans need no shift (the common case, per token).
            plain = n == 0 and (not spans or type(spans[0]) is tuple)
            cut = spans.count((0, 0)) if plain else sum(1 for _, end in spans if end <= n)
            # Rows are fresh lists, ours to keep; rows without a prefix share one empty one (fewer objects for the
            # garbage collector to track: encode() makes millions).
            heads.append(list(ids[:cut]) if cut else _NO_IDS)
            bodies.append(ids if not cut and type(ids) is list else list(ids[cut:]))
            if offsets is not None:
                offsets.append(list(spans[cut:]) if plain else [(max(0, s - n), e - n) for s, e in spans[cut:]])
    else:
        head = list(tokenizer(instruction, add_special_tokens=False)["input_ids"]) if instruction else []
        heads = [head] * len(texts)
        bodies = [list(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
        offsets = None
    prefixes = [sink + head if head else sink for head in heads]  # one shared list where there is no instruction
    truncated: list[int] = []
    if max_length is not None:
        room = [max_length - len(p) for p in prefixes]
        full = [i for i, (r, b) in enumerate(zip(room, bodies, strict=True)) if r < 1 and b]
        if full:
            i = full[0]
            raise ValueError(
                f"text {i} needs at least {len(prefixes[i]) + 1} tokens, one of its own after the {len(prefixes[i])} "
                "of the sink token and instruction (tokenized together with it), leaving no room for text within "
                f"max_length={max_length} ({len(full)} of {len(texts)} texts affected): raise max_length or shorten "
                "the instruction"
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


def _tokenize_template(
    tokenizer: Any,
    texts: Sequence[str],
    instruction: str,
    sink: list[int],
    max_length: int | None,
    template: str,
    target: str,
    copy: int,
    encoded: Encoded | None = None,
) -> Tokenized:
    # One prompt of a Template. Fast tokenizers read instruction + prompt in one piece and the row is cut
    # by character offsets; slow ones tokenize the pieces apart (as the echo embeddings code does).
    parts = template.split(TEXT)
    copies = len(parts) - 1
    if copies < 1:
        raise ValueError(f"the template prompt {printable(repr(template))} has no {TEXT}")
    if target not in ("text", "last") or not 1 <= copy <= copies:
        raise ValueError(f"target={target!r}, copy={copy!r} do not fit a prompt holding {TEXT} {copies} time(s)")
    which = copy - 1 if target == "text" else 0
    fast = bool(getattr(tokenizer, "is_fast", False))
    if fast:
        rows = _template_row_fast(tokenizer, list(texts), instruction, parts, which, encoded)
    else:
        rows = _template_row_slow(tokenizer, list(texts), instruction, parts, which)
    truncated: list[int] = []
    if max_length is not None:
        room = max_length - len(sink)
        for i, (text, row) in enumerate(zip(texts, rows, strict=True)):
            if len(row[0]) <= room:
                continue
            first, end = row[1]
            if first == end:  # nothing to pool whatever the prompt: keep the input within max_length
                rows[i] = (row[0][:room], (min(first, room),) * 2, [])
                continue
            fitted: _Row | None = _fit(tokenizer, text, instruction, parts, which, row, room, fast)
            shortest = 0
            if len(fitted[0]) > room or fitted[1][0] == fitted[1][1]:
                # Not even one token of the text fits, or what fits leaves nothing to pool (the cut text
                # merged into the prompt): look at every cut, never a silent zero vector.
                fitted, shortest = _cuts(tokenizer, text, instruction, parts, which, row, room, fast)
            if fitted is None:
                raise ValueError(
                    f"text {i} needs at least {len(sink) + shortest} tokens with the sink token, instruction "
                    f"and template around one token of it, leaving no room for text within max_length={max_length}: "
                    "raise max_length or shorten the instruction or template"
                )
            rows[i] = fitted
            truncated.append(i)
    prefixes, bodies, suffixes, offsets = [], [], [], []
    for ids, span, spans in rows:
        a, b = span
        if target == "last":
            a, b = (len(ids) - 1, len(ids)) if b > a else (len(ids), len(ids))
        prefixes.append(sink + ids[:a])
        bodies.append(ids[a:b])
        suffixes.append(ids[b:])
        offsets.append(spans)
    has_offsets = fast and target == "text"
    return Tokenized(prefixes, bodies, offsets if has_offsets else None, truncated, suffixes)


# A row: (ids, (first, end) of the pooled copy's tokens, the pooled tokens' character spans in the text).
_Row = tuple[list[int], tuple[int, int], list[tuple[int, int]]]


def _template_row_fast(
    tokenizer: Any, texts: list[str], instruction: str, parts: list[str], which: int, encoded: Encoded | None = None
) -> list[_Row]:
    all_ids, all_spans = encoded if encoded is not None else encode_fast(tokenizer, _strings(texts, instruction, parts))
    rows = []
    for text, ids, spans in zip(texts, all_ids, all_spans, strict=True):
        start = len(instruction) + sum(len(p) for p in parts[: which + 1]) + which * len(text)
        end = start + len(text)
        first = sum(1 for _, e in spans if e <= start)  # tokens wholly before the pooled copy
        last = sum(1 for s, _ in spans if s < end) if text else first  # tokens starting before its end
        last = max(first, last)
        kept = [(max(0, s - start), min(e, end) - start) for s, e in spans[first:last]]
        rows.append((list(ids), (first, last), kept))
    return rows


def _template_row_slow(tokenizer: Any, texts: list[str], instruction: str, parts: list[str], which: int) -> list[_Row]:
    return [_slow_row(tokenizer, instruction, parts, which, _ids(tokenizer, text)) for text in texts]


def _ids(tokenizer: Any, piece: str) -> list[int]:
    return list(tokenizer(piece, add_special_tokens=False)["input_ids"]) if piece else []


def _slow_row(tokenizer: Any, instruction: str, parts: list[str], which: int, body: list[int]) -> _Row:
    row = _ids(tokenizer, instruction + parts[0])
    span = (0, 0)
    for k, piece in enumerate(parts[1:]):
        if k == which:
            span = (len(row), len(row) + len(body))
        row += body + _ids(tokenizer, piece)
    return row, span, []


def _fit(
    tokenizer: Any, text: str, instruction: str, parts: list[str], which: int, row: _Row, room: int, fast: bool
) -> _Row:
    # Cut the text's last tokens (in every copy, so the prompt's end stays whole) until the row fits
    # `room`, down to one token of the text: a row still longer than `room` is the shortest there is.
    copies = len(parts) - 1
    alone = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True) if fast else None
    alone_ids = list(alone["input_ids"]) if alone is not None else _ids(tokenizer, text)
    keep = len(alone_ids)
    while len(row[0]) > room and keep > 1:
        keep = max(1, keep - math.ceil((len(row[0]) - room) / copies))
        if alone is not None:  # cut the characters and read the prompt again in one piece
            cut = text[: alone["offset_mapping"][keep - 1][1]]
            row = _template_row_fast(tokenizer, [cut], instruction, parts, which)[0]
        else:  # the pieces are tokenized apart: cutting the ids is exact
            row = _slow_row(tokenizer, instruction, parts, which, alone_ids[:keep])
    return row


def _cuts(
    tokenizer: Any, text: str, instruction: str, parts: list[str], which: int, row: _Row, room: int, fast: bool
) -> tuple[_Row | None, int]:
    # Where the greedy cut of _fit fails (cut texts can merge into the prompt, so a row's length and what it
    # pools are not monotone in the tokens kept): every cut, longest first. The longest row within `room` that
    # still pools a token, and the length of the shortest row that does (the uncut row always does).
    alone = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True) if fast else None
    alone_ids = list(alone["input_ids"]) if alone is not None else _ids(tokenizer, text)
    best: _Row | None = None
    shortest = len(row[0])
    for keep in range(len(alone_ids) - 1, 0, -1):
        if alone is not None:
            cut = _template_row_fast(
                tokenizer, [text[: alone["offset_mapping"][keep - 1][1]]], instruction, parts, which
            )[0]
        else:
            cut = _slow_row(tokenizer, instruction, parts, which, alone_ids[:keep])
        if cut[1][0] == cut[1][1]:
            continue
        shortest = min(shortest, len(cut[0]))
        if best is None and len(cut[0]) <= room:
            best = cut
    return best, shortest


def _strings(texts: Sequence[str], instruction: str, parts: Sequence[str] | None) -> list[str]:
    # What a fast tokenizer reads for each text: the instruction, then the text or the template's prompt around it
    # (`parts`: the prompt split at each {text}).
    if parts is None:
        return [instruction + text for text in texts]
    return [instruction + text.join(parts) for text in texts]
