"""The immutable value a layer spec parses into.

A :class:`Spec` is a tuple of items (see :mod:`nosink.layerspec.items`), bottom layer first. ``str()``
prints the canonical spec text and ``repr()`` is Python that rebuilds the value::

    >>> from nosink.layerspec import parse_spec
    >>> spec = parse_spec("fwd* | bidir*7|m0b*3")
    >>> str(spec)
    'F* | B*7 | M0B*3'
    >>> spec
    Spec((Segment(Kind('F'), None), Segment(Kind('B'), 7), Segment(Kind('B', sink=0), 3)))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import plan
from .errors import SpecError
from .items import Block, Item, Kind, Segment

__all__ = ["Spec", "check_items"]


@dataclass(frozen=True)
class Spec:
    """A parsed layer spec: items from the bottom layer (next to the embeddings) up.

    Build one with :func:`~nosink.layerspec.parse_spec`, a preset, or directly::

        >>> Spec((Segment(Kind("F"), None), Segment(Kind("R"), 2)))
        Spec((Segment(Kind('F'), None), Segment(Kind('R'), 2)))

    Raises:
        SpecError: for two count-less segments, or ``EXTEND`` anywhere but last.
    """

    items: tuple[Item, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))
        check_items(self.items)

    def __str__(self) -> str:
        return " | ".join(map(str, self.items))

    def __repr__(self) -> str:
        return f"Spec({self.items!r})"

    def resolve(
        self,
        depth: int,
        windows: Sequence[int | None] | None = None,
        *,
        exit_layer: int | None = None,
        prepend: int | tuple[int, int] | None = None,
    ) -> plan.Plan:
        """Compile this spec for a decoder of ``depth`` layers; see :func:`~nosink.layerspec.plan.resolve`.

        Raises:
            SpecError: if the spec does not fit ``depth`` (or the first ``exit_layer`` layers), or its plan
                would be too large.
            ValueError: if ``windows`` does not give one window (or ``None``) per layer, or ``exit_layer``
                is not from 1 to ``depth``, or ``prepend`` does not fit the layers the plan runs.
        """
        return plan.resolve(self, depth, windows, exit_layer=exit_layer, prepend=prepend)

    @property
    def segments(self) -> tuple[Segment, ...]:
        """Every plain segment, inside blocks or not, in order."""
        out: list[Segment] = []
        for item in self.items:
            out.extend(item.segments if isinstance(item, Block) else (item,))
        return tuple(out)

    @property
    def kinds(self) -> frozenset[Kind]:
        """The layer kinds used anywhere in the spec (the INTER forward stream adds ``F``)."""
        kinds = {seg.kind for seg in self.segments}
        if any(isinstance(item, Block) and item.op == "INTER" for item in self.items):
            kinds.add(Kind("F"))
        return frozenset(kinds)


def check_items(items: Sequence[object], text: str = "", columns: Sequence[int] | None = None) -> None:
    """Check the rules that span items; ``columns`` (one per item) locate errors in ``text``.

    Raises:
        SpecError: for an empty spec, a non-item, two count-less segments, or an
            ``EXTEND`` that is not last.
    """

    def col(i: int) -> int | None:
        return columns[i] if columns is not None else None

    if not items:
        raise SpecError("empty spec", text, 1 if columns is not None else None, "at least one layer such as 'F*'")
    fills = 0
    for i, item in enumerate(items):
        if not isinstance(item, (Segment, Block)):
            raise SpecError(f"a spec holds Segment and Block items, got {type(item).__name__}")
        segs = item.segments if isinstance(item, Block) else (item,)
        fills += sum(seg.is_fill for seg in segs)
        if fills > 1:
            raise SpecError(
                "a second count-less segment", text, col(i), "a count such as '*3': only one segment may fill the depth"
            )
        if isinstance(item, Block) and item.op == "EXTEND" and i != len(items) - 1:
            raise SpecError("EXTEND(...) must be the last item", text, col(i), "nothing after EXTEND(...)")
