"""The paper's configurations as specs, and a translation from the official code's arguments.

Every preset fills the depth with ``F*`` (or ``M0B*``), so it works on any model deep enough.

>>> str(mask0_bidir(k=10))
'F* | M0B*10'
>>> str(mask0_and_bidir(k=10, k0=3))
'F* | B*7 | M0B*3'
>>> str(by_name("INTER-BACK", k=4))
'F* | INTER(R*4)'
>>> str(from_official(architecture="INPLACE", mask_type="MASK0", num_unsink_layers=3, num_bidir_layers=7))
'F* | B*7 | M0B*3'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from nosink.checks import positive_int

from .errors import SpecError
from .items import Block, Kind, Segment
from .spec import Spec

__all__ = [
    "PRESETS",
    "baseline",
    "by_name",
    "extend_back",
    "extend_bidir",
    "extra_back",
    "extra_bidir",
    "from_official",
    "inplace_back",
    "inplace_bidir",
    "inter_back",
    "inter_bidir",
    "mask0_all",
    "mask0_and_bidir",
    "mask0_bidir",
    "mask0_for",
    "sink_mask",
]

F, B, R = Kind("F"), Kind("B"), Kind("R")
M0F, M0B = Kind("F", sink=0), Kind("B", sink=0)
FILL = Segment(F, None)


def _k(k: int, name: str = "k", minimum: int = 1) -> int:
    try:
        return positive_int(k, name, minimum=minimum)
    except ValueError as err:
        raise SpecError(str(err)) from None


def _name(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {type(value).__name__}")
    return value.strip().upper()


def baseline() -> Spec:
    """BASELINE: the stock decoder, every layer forward (``F*``)."""
    return Spec((FILL,))


def inplace_bidir(k: int) -> Spec:
    """INPLACE-BIDIR: the top ``k`` layers bidirectional (``F* | B*k``)."""
    return Spec((FILL, Segment(B, _k(k))))


def inplace_back(k: int) -> Spec:
    """INPLACE-BACK: the top ``k`` layers backward (``F* | R*k``)."""
    return Spec((FILL, Segment(R, _k(k))))


def inter_bidir(k: int) -> Spec:
    """INTER-BIDIR: the top ``k`` layers run forward and bidirectional, summed (``F* | INTER(B*k)``)."""
    return Spec((FILL, Block("INTER", (Segment(B, _k(k)),))))


def inter_back(k: int) -> Spec:
    """INTER-BACK: the top ``k`` layers run forward and backward, summed (``F* | INTER(R*k)``)."""
    return Spec((FILL, Block("INTER", (Segment(R, _k(k)),))))


def extra_bidir(k: int) -> Spec:
    """EXTRA-BIDIR: a bidirectional branch through the first ``k`` layers (``F* | EXTRA(B*k)``)."""
    return Spec((FILL, Block("EXTRA", (Segment(B, _k(k)),))))


def extra_back(k: int) -> Spec:
    """EXTRA-BACK: a backward branch through the first ``k`` layers (``F* | EXTRA(R*k)``)."""
    return Spec((FILL, Block("EXTRA", (Segment(R, _k(k)),))))


def extend_bidir(k: int) -> Spec:
    """EXTEND-BIDIR: ``k`` bidirectional copies of the last layer on top (``F* | EXTEND(B*k)``)."""
    return Spec((FILL, Block("EXTEND", (Segment(B, _k(k)),))))


def extend_back(k: int) -> Spec:
    """EXTEND-BACK: ``k`` backward copies of the last layer on top (``F* | EXTEND(R*k)``)."""
    return Spec((FILL, Block("EXTEND", (Segment(R, _k(k)),))))


def mask0_for(k: int) -> Spec:
    """MASK0-FOR: the top ``k`` layers forward with the first token hidden (``F* | M0F*k``)."""
    return Spec((FILL, Segment(M0F, _k(k))))


def mask0_bidir(k: int) -> Spec:
    """MASK0-BIDIR: the top ``k`` layers bidirectional with the first token hidden (``F* | M0B*k``)."""
    return Spec((FILL, Segment(M0B, _k(k))))


def mask0_all() -> Spec:
    """MASK0-ALL: every layer bidirectional with the first token hidden (``M0B*``)."""
    return Spec((Segment(M0B, None),))


def mask0_and_bidir(k: int, k0: int) -> Spec:
    """MASK0&BIDIR: ``k`` converted layers, the top ``k0`` of them no-sink (``F* | B*(k-k0) | M0B*k0``).

    Raises:
        SpecError: unless ``0 <= k0 <= k``.
    """
    _k(k)
    if isinstance(k0, bool) or not isinstance(k0, int) or not 0 <= k0 <= k:
        raise SpecError(f"k0 must be an integer from 0 to k={k}, got {k0!r}")
    segs = [FILL]
    if k - k0:
        segs.append(Segment(B, k - k0))
    if k0:
        segs.append(Segment(M0B, k0))
    return Spec(tuple(segs))


def sink_mask(n: int, k: int, direction: str = "B") -> Spec:
    """The paper's sink masks MASK<n> (appendix F.2) on the top ``k`` layers (``F* | M<n>B*k``).

    Raises:
        SpecError: for a negative ``n``, a non-positive ``k`` or a direction other than F or B.
    """
    if direction not in ("F", "B"):
        raise SpecError(f"a sink mask applies to F or B layers, got direction {direction!r}")
    return Spec((FILL, Segment(Kind(direction, sink=n), _k(k))))  # type: ignore[arg-type]


PRESETS: dict[str, Callable[..., Spec]] = {
    "BASELINE": baseline,
    "INPLACE-BIDIR": inplace_bidir,
    "INPLACE-BACK": inplace_back,
    "INTER-BIDIR": inter_bidir,
    "INTER-BACK": inter_back,
    "EXTRA-BIDIR": extra_bidir,
    "EXTRA-BACK": extra_back,
    "EXTEND-BIDIR": extend_bidir,
    "EXTEND-BACK": extend_back,
    "MASK0-FOR": mask0_for,
    "MASK0-BIDIR": mask0_bidir,
    "MASK0-ALL": mask0_all,
    "MASK0&BIDIR": mask0_and_bidir,
}


def by_name(name: str, **params: int) -> Spec:
    """A preset by its paper name, case-insensitive (``by_name("mask0&bidir", k=10, k0=3)``).

    Raises:
        SpecError: for an unknown name, or parameters the preset does not take.
        TypeError: if ``name`` is not a string.
    """
    key = _name(name, "a configuration name").replace("_", "-").replace("MASKO", "MASK0")
    if key not in PRESETS:
        raise SpecError(f"unknown configuration {name!r}", expected="one of " + ", ".join(PRESETS))
    try:
        return PRESETS[key](**params)
    except TypeError as err:
        raise SpecError(f"{key} does not take {sorted(params)}: {err}") from None


def from_official(
    architecture: str = "INPLACE",
    mask_type: str = "MASK0",
    num_unsink_layers: int = 0,
    num_bidir_layers: int = 0,
    unsink_layers: Iterable[int] | None = None,
    bidir_layers: Iterable[int] | None = None,
    num_layers: int | None = None,
) -> Spec:
    """Translate the official implementation's arguments into a spec.

    The top ``num_bidir_layers`` + ``num_unsink_layers`` layers are converted: ``B``, then the
    "unsink" layers above (``M0B`` for ``mask_type="MASK0"``, ``R`` for ``"BACK"``). ``unsink_layers``
    and ``bidir_layers`` list 0-based indices instead (INPLACE only, with ``num_layers``).
    ``architecture="NONE"`` gives ``F*``. The official ``res_connect`` is not in the paper and has no translation.

    Raises:
        SpecError: for an unknown architecture or mask type, negative counts, bad layer lists (overlapping,
            out of range, without ``num_layers``, or given with counts).
        TypeError: if ``architecture`` or ``mask_type`` is not a string.
    """
    arch = _name(architecture, "architecture")
    if arch not in ("NONE", "INPLACE", "INTER", "EXTRA", "EXTEND"):
        raise SpecError(f"unknown architecture {architecture!r}", expected="NONE, INPLACE, INTER, EXTRA or EXTEND")
    mtype = _name(mask_type, "mask_type")
    if mtype not in ("MASK0", "BACK"):
        raise SpecError(f"unknown mask_type {mask_type!r}", expected="MASK0 or BACK")
    unsink = M0B if mtype == "MASK0" else R
    if arch == "NONE":  # the official code zeroes the counts and lists
        return baseline()

    unsink_list = tuple(unsink_layers) if unsink_layers is not None else ()
    bidir_list = tuple(bidir_layers) if bidir_layers is not None else ()
    if unsink_list or bidir_list:
        if num_unsink_layers or num_bidir_layers:
            raise SpecError(
                "both layer counts (num_unsink_layers/num_bidir_layers) and layer lists (unsink_layers/bidir_layers)",
                expected="either the counts or the lists",
            )
        return _from_layer_lists(arch, unsink, unsink_list, bidir_list, num_layers)

    for name, value in (("num_unsink_layers", num_unsink_layers), ("num_bidir_layers", num_bidir_layers)):
        _k(value, name, minimum=0)
    converted = [Segment(kind, n) for kind, n in ((B, num_bidir_layers), (unsink, num_unsink_layers)) if n]
    if not converted:
        return baseline()
    if arch == "INPLACE":
        return Spec((FILL, *converted))
    return Spec((FILL, Block(arch, tuple(converted))))  # type: ignore[arg-type]


def _from_layer_lists(
    arch: str, unsink: Kind, unsink_layers: Iterable[int], bidir_layers: Iterable[int], num_layers: int | None
) -> Spec:
    if arch != "INPLACE":
        raise SpecError(f"layer lists translate for INPLACE only, not {arch}", expected="num_*_layers counts")
    if num_layers is None:
        raise SpecError("unsink_layers/bidir_layers need num_layers (the model's depth)")
    kinds = [F] * _k(num_layers, "num_layers")
    seen: dict[int, str] = {}
    for name, layers, kind in (("unsink_layers", unsink_layers, unsink), ("bidir_layers", bidir_layers, B)):
        for i in layers:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_layers:
                raise SpecError(f"{name} has {i!r}, not a layer index from 0 to {num_layers - 1}")
            if i in seen:
                raise SpecError(f"layer {i} is in both {seen[i]} and {name}")
            seen[i] = name
            kinds[i] = kind
    segs: list[Segment] = []
    for kind in kinds:
        if segs and segs[-1].kind == kind:
            segs[-1] = Segment(kind, segs[-1].count + 1)  # type: ignore[operator]
        else:
            segs.append(Segment(kind, 1))
    return Spec(tuple(segs))
