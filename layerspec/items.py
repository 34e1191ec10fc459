"""The parts a layer spec is made of: layer kinds, segments of layers, and blocks of segments.

A :class:`~nosink.layerspec.spec.Spec` is a tuple of items, bottom layer first. An item is a plain
:class:`Segment` (``B*7``) or a :class:`Block` (``INTER(...)``, ``EXTRA(...)``, ``EXTEND(...)``) holding
plain segments; each segment has a :class:`Kind`.

    >>> Segment(Kind("B", sink=0), 3)
    Segment(Kind('B', sink=0), 3)
    >>> str(Block("INTER", (Segment(Kind("R"), 2),)))
    'INTER(R*2)'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .errors import SpecError

__all__ = [
    "MAX_COUNT",
    "MAX_SINK",
    "Block",
    "BlockOp",
    "Direction",
    "Item",
    "Kind",
    "Segment",
    "check_count",
    "check_in_block",
    "check_sink",
]

Direction = Literal["F", "B", "R"]
BlockOp = Literal["INTER", "EXTRA", "EXTEND"]

MAX_COUNT = 4096  # more layers than any decoder has; keeps typos like F*99999999 from allocating plans
MAX_SINK = 1_000_000  # M<n> beyond any context length is already the reverse-causal mask

_DIRECTIONS = ("F", "B", "R")
_BLOCK_OPS = ("INTER", "EXTRA", "EXTEND")


@dataclass(frozen=True)
class Kind:
    """How one layer attends.

    Attributes:
        direction: ``'F'`` forward (causal), ``'B'`` bidirectional, ``'R'`` backward
            (reverse causal).
        sink: ``None`` for a plain layer; ``n`` for the sink mask ``M<n>``, which hides
            the row's first ``n + 1`` tokens from every query after them. Only ``F`` and
            ``B`` take a sink mask (a backward layer already hides every earlier token).
    """

    direction: Direction
    sink: int | None = None

    def __post_init__(self) -> None:
        if self.direction not in _DIRECTIONS:
            raise SpecError(f"unknown layer direction {self.direction!r}", expected="one of 'F', 'B', 'R'")
        if self.sink is not None:
            check_sink(self.sink)
            if self.direction == "R":
                raise SpecError("a sink mask M<n> applies to F or B layers, not R (R already hides earlier tokens)")

    def __str__(self) -> str:
        return self.direction if self.sink is None else f"M{self.sink}{self.direction}"

    def __repr__(self) -> str:
        return f"Kind({self.direction!r})" if self.sink is None else f"Kind({self.direction!r}, sink={self.sink})"

    @property
    def is_causal(self) -> bool:
        """True for the stock decoder's own mask (plain forward)."""
        return self.direction == "F" and self.sink is None


@dataclass(frozen=True)
class Segment:
    """``count`` consecutive layers of one kind; ``count=None`` fills the depth left over."""

    kind: Kind
    count: int | None = 1

    def __post_init__(self) -> None:
        if not isinstance(self.kind, Kind):
            raise SpecError(f"a segment's kind must be a Kind, got {type(self.kind).__name__}")
        if self.count is not None:
            check_count(self.count)

    def __str__(self) -> str:
        if self.count is None:
            return f"{self.kind}*"
        return str(self.kind) if self.count == 1 else f"{self.kind}*{self.count}"

    def __repr__(self) -> str:
        return f"Segment({self.kind!r}, {self.count!r})"

    @property
    def is_fill(self) -> bool:
        """True for the count-less segment that fills the remaining depth."""
        return self.count is None


@dataclass(frozen=True)
class Block:
    """A combinator over plain segments: ``INTER(S)``, ``EXTRA(S)`` or ``EXTEND(S)``."""

    op: BlockOp
    segments: tuple[Segment, ...]

    def __post_init__(self) -> None:
        if self.op not in _BLOCK_OPS:
            raise SpecError(f"unknown combinator {self.op!r}", expected="one of INTER, EXTRA, EXTEND")
        object.__setattr__(self, "segments", tuple(self.segments))
        if not self.segments:
            raise SpecError(f"{self.op}() is empty", expected="at least one layer inside")
        for seg in self.segments:
            check_in_block(self.op, seg)

    def __str__(self) -> str:
        return f"{self.op}({' | '.join(map(str, self.segments))})"

    def __repr__(self) -> str:
        return f"Block({self.op!r}, {self.segments!r})"


Item = Segment | Block


# The rules on single values live here, once: the value classes call them, and the parser calls them
# with the text as typed (``shown``) and attaches the column to their errors.


def check_count(count: object, shown: str | None = None) -> int:
    """``count`` if it is a valid layer count (an ``int`` from 1 to :data:`MAX_COUNT`, not a ``bool``).

    Args:
        count: the count to check.
        shown: how to quote it in the message (the parser passes the digits as typed); ``repr`` by default.

    Raises:
        SpecError: naming the count and the accepted range.
    """
    return _check_range(count, shown, "layer count", 1, MAX_COUNT, below=("is not positive", "a count of at least 1"))


def check_sink(sink: object, shown: str | None = None) -> int:
    """``sink`` if it is a valid sink size ``n`` of ``M<n>`` (an ``int`` from 0 to :data:`MAX_SINK`).

    Raises:
        SpecError: naming the size and the accepted range.
    """
    below = ("is negative", f"an integer from 0 to {MAX_SINK}")
    return _check_range(sink, shown, "sink size", 0, MAX_SINK, below=below)


def _check_range(value: object, shown: str | None, what: str, low: int, high: int, below: tuple[str, str]) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) from ``low`` to ``high``: the rule behind the value checks.

    Args:
        value: the value to check.
        shown: how to quote it in the message; ``repr`` when ``None``.
        what: what the value is, in words ("layer count").
        low: the smallest accepted value.
        high: the largest accepted value.
        below: the problem and the expected text for a value under ``low``.

    Raises:
        SpecError: naming ``what``, the value as shown and the accepted range.
    """
    shown = shown if shown is not None else repr(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{what} {shown} is not an integer", expected=f"a whole number from {low} to {high}")
    if value < low:
        raise SpecError(f"{what} {shown} {below[0]}", expected=below[1])
    if value > high:
        raise SpecError(f"{what} {shown} is too large", expected=f"at most {high}")
    return value


def check_in_block(op: str, segment: object) -> None:
    """Check that ``segment`` may go inside ``op(...)``: a plain segment, count-less only inside INTER.

    Raises:
        SpecError: for anything but a :class:`Segment`, or a count-less one inside EXTRA or EXTEND.
    """
    if not isinstance(segment, Segment):
        raise SpecError(f"{op}(...) holds plain segments only, got {type(segment).__name__}")
    if segment.is_fill and op != "INTER":
        raise SpecError(
            f"a count-less segment cannot go inside {op}(...): it has no depth to fill", expected="a count such as '*3'"
        )
