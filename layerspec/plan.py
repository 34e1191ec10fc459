"""Compile a :class:`~nosink.layerspec.spec.Spec` for a model depth into a flat plan.

A plan is what the encoder's forward loop reads: a tuple of steps over named streams
(hidden-state tensors), never spec syntax. ``"main"`` starts as the embeddings.

- :class:`LayerStep`: run decoder layer ``layer`` with mask ``kind`` on ``stream``.
- :class:`Fork`: ``target`` becomes a copy of ``source`` (a branch starts).
- :class:`Merge`: ``target += source``; ``source`` is no longer needed.

>>> from nosink.layerspec import parse_spec
>>> print(resolve(parse_spec("F* | INTER(R*2)"), 4).table())
step  stream  layer  kind  role
   0  main        0  F     stack
   1  main        1  F     stack
   2  fork    main -> inter
   3  main        2  F     stack
   4  main        3  F     stack
   5  inter       2  R     inter
   6  inter       3  R     inter
   7  merge   inter -> main
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .errors import SpecError
from .spec import Block, Kind, Segment, Spec

__all__ = ["MAIN", "Fork", "LayerStep", "Merge", "Plan", "Role", "Step", "resolve"]

MAIN = "main"
Role = Literal["stack", "inter", "extra", "extend"]


@dataclass(frozen=True)
class LayerStep:
    """Run decoder layer ``layer`` on ``stream`` with the mask of ``kind``.

    ``role`` says why it runs: ``stack`` (its own position in the main stack, INTER's
    forward copy included), ``inter`` (INTER's converted stream), ``extra`` (an EXTRA
    branch) or ``extend`` (a layer appended on top, reusing the last layer's weights).
    """

    layer: int
    kind: Kind
    stream: str
    role: Role


@dataclass(frozen=True)
class Fork:
    """Start stream ``target`` as a copy of ``source``."""

    source: str
    target: str


@dataclass(frozen=True)
class Merge:
    """Add stream ``source`` into ``target``; ``source`` ends here."""

    source: str
    target: str


Step = LayerStep | Fork | Merge


@dataclass(frozen=True)
class Plan:
    """A spec resolved against a model of ``depth`` layers."""

    spec: Spec
    depth: int
    steps: tuple[Step, ...]

    @property
    def layer_steps(self) -> tuple[LayerStep, ...]:
        """Only the steps that run a layer, in order."""
        return tuple(s for s in self.steps if isinstance(s, LayerStep))

    @property
    def kinds(self) -> frozenset[Kind]:
        """Every kind some step runs with: the masks one batch needs."""
        return frozenset(s.kind for s in self.layer_steps)

    @property
    def stack(self) -> tuple[Kind, ...]:
        """The kind of each main-stack position, bottom up (``len == depth``)."""
        return tuple(s.kind for s in self.layer_steps if s.role == "stack")

    def table(self) -> str:
        """The plan as a fixed-width text table, one row per step."""
        rows = ["step  stream  layer  kind  role"]
        for i, s in enumerate(self.steps):
            if isinstance(s, LayerStep):
                rows.append(f"{i:>4}  {s.stream:<6} {s.layer:>6}  {s.kind!s:<5} {s.role}")
            else:
                op = "fork" if isinstance(s, Fork) else "merge"
                rows.append(f"{i:>4}  {op:<7} {s.source} -> {s.target}")
        return "\n".join(rows)


def resolve(spec: Spec, depth: int) -> Plan:
    """Resolve ``spec`` for a decoder with ``depth`` layers.

    Args:
        spec: a parsed spec.
        depth: the decoder's number of layers (``config.num_hidden_layers``).

    Returns:
        The :class:`Plan`: which layer runs, with which kind, in which stream.

    Raises:
        SpecError: if the spec's positions do not add up to ``depth`` (or exceed it,
            with a fill segment), or an EXTRA branch is deeper than the model.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise SpecError(f"model depth must be a positive integer, got {depth!r}")
    text = str(spec)
    placed = [seg for item in spec.items if not _is_extra_or_extend(item) for seg in _segs(item)]
    fixed = sum(seg.count for seg in placed if seg.count is not None)
    has_fill = any(seg.is_fill for seg in placed)
    if has_fill and fixed > depth:
        raise SpecError(
            f"spec needs at least {fixed} layers besides its fill segment but the model has {depth}",
            text,
            expected="smaller counts",
        )
    if not has_fill and fixed != depth:
        raise SpecError(
            f"spec adds up to {fixed} layers but the model has {depth}",
            text,
            expected=f"counts that add up to {depth}, or a count-less segment such as 'F*' to fill the rest",
        )
    fill = depth - fixed

    def expand(segments: tuple[Segment, ...]) -> list[Kind]:
        return [seg.kind for seg in segments for _ in range(fill if seg.count is None else seg.count)]

    steps: list[Step] = []
    # EXTRA branches start from the embeddings, so they fork before the main stack runs.
    extras = [item for item in spec.items if isinstance(item, Block) and item.op == "EXTRA"]
    for e, block in enumerate(extras):
        kinds = expand(block.segments)
        if len(kinds) > depth:
            raise SpecError(
                f"{block} runs the decoder's first {len(kinds)} layers but the model has {depth}",
                text,
                expected=f"at most {depth} layers inside EXTRA(...)",
            )
        name = f"extra{e}"
        steps.append(Fork(MAIN, name))
        steps.extend(LayerStep(i, kind, name, "extra") for i, kind in enumerate(kinds))

    layer = 0
    for item in spec.items:
        if isinstance(item, Segment):
            for kind in expand((item,)):
                steps.append(LayerStep(layer, kind, MAIN, "stack"))
                layer += 1
        elif item.op == "INTER":
            kinds = expand(item.segments)
            if not kinds:  # an INTER whose only content is a fill of zero layers
                continue
            steps.append(Fork(MAIN, "inter"))
            steps.extend(LayerStep(layer + i, Kind("F"), MAIN, "stack") for i in range(len(kinds)))
            steps.extend(LayerStep(layer + i, kind, "inter", "inter") for i, kind in enumerate(kinds))
            steps.append(Merge("inter", MAIN))
            layer += len(kinds)
        elif item.op == "EXTEND":
            steps.extend(LayerStep(depth - 1, kind, MAIN, "extend") for kind in expand(item.segments))
    steps.extend(Merge(f"extra{e}", MAIN) for e in range(len(extras)))
    return Plan(spec, depth, tuple(steps))


def _is_extra_or_extend(item: Segment | Block) -> bool:
    return isinstance(item, Block) and item.op in ("EXTRA", "EXTEND")


def _segs(item: Segment | Block) -> tuple[Segment, ...]:
    return item.segments if isinstance(item, Block) else (item,)
