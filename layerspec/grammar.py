"""Parse layer-spec text into a :class:`~nosink.layerspec.spec.Spec`.

Grammar (whitespace is free between tokens; names are case-insensitive)::

    spec     := item ("|" item)*
    item     := segment | block
    block    := ("INTER" | "EXTRA" | "EXTEND") "(" segment ("|" segment)* ")"
    segment  := kind ["*" [count]]          # "X" = 1 layer, "X*N" = N, "X*" = fill the rest
    kind     := "F" | "B" | "R" | "FWD" | "BIDIR" | "BACK" | "M" n ("F" | "B")
    count, n := decimal digits              # count >= 1

Examples::

    >>> parse_spec("F*12 | B*7 | M0B*3")
    Spec((Segment(Kind('F'), 12), Segment(Kind('B'), 7), Segment(Kind('B', sink=0), 3)))
    >>> str(parse_spec("fwd* | inter( back*2 )"))
    'F* | INTER(R*2)'
    >>> str(parse_spec("F* | EXTRA(B*4)"))
    'F* | EXTRA(B*4)'
    >>> parse_spec("F*12 | Q*7")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
      ...
    nosink.layerspec.errors.SpecError: unknown layer kind 'Q' at column 8; expected one of F, B, R, M<n>F, ...
      F*12 | Q*7
             ^
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .errors import SpecError
from .items import Block, Item, Kind, Segment, check_count, check_in_block, check_sink
from .spec import Spec, check_items

__all__ = ["as_spec", "parse_spec"]

_ITEM_EXPECTED = "one of F, B, R, M<n>F, M<n>B, INTER(, EXTRA(, EXTEND("
_SEGMENT_EXPECTED = "one of F, B, R, M<n>F, M<n>B"
_ALIASES = {"F": "F", "FWD": "F", "B": "B", "BIDIR": "B", "R": "R", "BACK": "R"}
_SINK = re.compile(r"M(\d+)([A-Z]*)")
_BLOCKS = ("INTER", "EXTRA", "EXTEND")
_PUNCT = "|*()"


@dataclass(frozen=True)
class _Token:
    type: str  # "name", "number", one of "|*()", or "end"
    text: str
    column: int  # 1-based


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in _PUNCT:
            tokens.append(_Token(ch, ch, i + 1))
            i += 1
        elif ch.isascii() and ch.isalnum():
            j = i
            # A name is a letter then letters and digits (M12B); a number is digits only.
            while j < len(text) and text[j].isascii() and (text[j].isalnum() if ch.isalpha() else text[j].isdigit()):
                j += 1
            tokens.append(_Token("name" if ch.isalpha() else "number", text[i:j], i + 1))
            i = j
        else:
            hint = "a whole number of at least 1" if ch in "-+." else _ITEM_EXPECTED + ", '|', '*' or a count"
            raise SpecError(f"unexpected character {ch!r}", text, i + 1, hint)
    tokens.append(_Token("end", "", len(text) + 1))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0

    def peek(self) -> _Token:
        return self.tokens[self.pos]

    def take(self) -> _Token:
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def fail(self, problem: str, tok: _Token, expected: str | None = None) -> SpecError:
        return SpecError(problem, self.text, tok.column, expected)

    @contextmanager
    def at(self, tok: _Token) -> Iterator[None]:
        """Place the errors of the value classes' own checks at ``tok``'s column."""
        try:
            yield
        except SpecError as err:
            raise err.at(self.text, tok.column) from None

    def describe(self, tok: _Token) -> str:
        return "end of spec" if tok.type == "end" else _quote(tok.text)

    def spec(self) -> Spec:
        if self.peek().type == "end":
            raise self.fail("empty spec", self.peek(), "at least one layer such as 'F*'")
        items: list[Item] = []
        columns: list[int] = []
        while True:
            columns.append(self.peek().column)
            items.append(self.item())
            tok = self.take()
            if tok.type == "end":
                break
            if tok.type != "|":
                raise self.fail(f"unexpected {self.describe(tok)}", tok, "'|' between segments, or end of spec")
        check_items(items, self.text, columns)
        return Spec(tuple(items))

    def item(self) -> Item:
        tok = self.peek()
        if tok.type == "name" and tok.text.upper() in _BLOCKS:
            return self.block()
        return self.segment(_ITEM_EXPECTED)

    def block(self) -> Block:
        name = self.take()
        op = name.text.upper()
        opening = self.take()
        if opening.type != "(":
            raise self.fail(f"{op} must be followed by '('", opening, f"'(' after {op}")
        if self.peek().type == ")":
            raise self.fail(f"{op}() is empty", self.peek(), _SEGMENT_EXPECTED)
        segments: list[Segment] = []
        while True:
            tok = self.peek()
            if tok.type == "name" and tok.text.upper() in _BLOCKS:
                raise self.fail(f"{tok.text.upper()}(...) cannot be nested inside {op}(...)", tok, _SEGMENT_EXPECTED)
            seg = self.segment(_SEGMENT_EXPECTED)
            with self.at(tok):
                check_in_block(op, seg)
            segments.append(seg)
            tok = self.take()
            if tok.type == ")":
                return Block(op, tuple(segments))  # type: ignore[arg-type]
            if tok.type != "|":
                raise self.fail(f"unexpected {self.describe(tok)} inside {op}(...)", tok, "'|' or ')'")

    def segment(self, expected: str) -> Segment:
        tok = self.take()
        if tok.type != "name":
            problem = "missing layer kind" if tok.type in ("|", ")", "end") else f"unexpected {self.describe(tok)}"
            raise self.fail(problem, tok, expected)
        kind = self.kind(tok, expected)
        if self.peek().type != "*":
            return Segment(kind, 1)
        self.take()
        tok = self.peek()
        if tok.type != "number":
            if tok.type in ("|", ")", "end"):
                return Segment(kind, None)
            raise self.fail(f"unexpected {self.describe(tok)} after '*'", tok, "a count, or nothing to fill the depth")
        self.take()
        with self.at(tok):
            return Segment(kind, check_count(_to_int(tok.text), shown=_quote(tok.text)))

    def kind(self, tok: _Token, expected: str) -> Kind:
        name = tok.text.upper()
        if name in _ALIASES:
            return Kind(_ALIASES[name])  # type: ignore[arg-type]
        if name in _BLOCKS:
            raise self.fail(f"{name}(...) cannot be nested here", tok, expected)
        match = _SINK.fullmatch(name)
        if match is None:
            raise self.fail(f"unknown layer kind {_quote(tok.text)}", tok, expected)
        digits, suffix = match.groups()
        if suffix not in ("F", "B"):
            problem = (
                f"sink mask {_quote(tok.text)} needs F or B after the number"
                if not suffix
                else (f"sink mask {_quote(tok.text)} has unknown direction {_quote(suffix)}")
            )
            raise self.fail(problem, tok, "M<n>F or M<n>B")
        with self.at(tok):
            return Kind(suffix, check_sink(_to_int(digits), shown=_quote(digits)))  # type: ignore[arg-type]


def as_spec(spec: str | Spec) -> Spec:
    """``spec`` itself if it is a :class:`Spec`, else :func:`parse_spec` of it.

    >>> str(as_spec("fwd* | m0b*2")) == str(as_spec(parse_spec("F* | M0B*2")))
    True

    Raises:
        SpecError: for malformed spec text.
        TypeError: for anything but a string or a Spec.
    """
    return spec if isinstance(spec, Spec) else parse_spec(spec)


def _quote(text: str, limit: int = 24) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _to_int(digits: str) -> int:
    # int() refuses strings over 4300 digits; anything over 9 digits is out of range anyway.
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 9 else 10**9


def parse_spec(text: str) -> Spec:
    """Parse a layer spec such as ``"F* | B*7 | M0B*3"``.

    Args:
        text: the spec, bottom layer first, in the module docstring's grammar.

    Returns:
        An immutable :class:`~nosink.layerspec.spec.Spec`; ``str()`` of it is canonical.

    Raises:
        SpecError: for any malformed text (the only exception a ``str`` argument can raise).
        TypeError: if ``text`` is not a string.

    >>> parse_spec("F* | INTER(R) | INTER(R)")
    Spec((Segment(Kind('F'), None), Block('INTER', (Segment(Kind('R'), 1),)), Block('INTER', (Segment(Kind('R'), 1),))))
    """
    if not isinstance(text, str):
        raise TypeError(f"a layer spec is a string such as 'F* | B*4', got {type(text).__name__}")
    return _Parser(text).spec()
