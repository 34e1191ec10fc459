"""Compile a :class:`~nosink.layerspec.spec.Spec` for a model depth into a flat plan.

A plan is what the encoder's forward loop reads: a tuple of steps over named streams
(hidden-state tensors), never spec syntax. :data:`MAIN` (``"main"``) starts as the embeddings.

- :class:`LayerStep`: run decoder layer ``layer`` with mask ``kind`` on ``stream``, keeping the
  stock sliding ``window`` when the step has one.
- :class:`Fork`: ``target`` becomes a copy of ``source`` (a branch starts).
- :class:`Merge`: ``target += source``; ``source`` is no longer needed.
- :class:`Prepend`: Token Prepending: before layer ``layer`` runs on the main stream, each row's
  placeholder (its second token) takes the state of the row's last token.

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

Resolved against a decoder's per-layer sliding windows (``windows=``), plain forward steps keep their
layer's window and converted steps drop it; the table then shows a window column.

With ``exit_layer=m`` the plan stops after the decoder's first ``m`` layers (an early exit): the spec is
resolved against those ``m`` layers, as if the decoder had been cut after layer ``m``, and the layers
above never run. ``F* | M0B*2`` with ``exit_layer=3`` on a 4-layer decoder runs layers 0-2, the top two
of them converted:

>>> print(resolve(parse_spec("F* | M0B*2"), 4, exit_layer=3).table())
step  stream  layer  kind  role
   0  main        0  F     stack
   1  main        1  M0B   stack
   2  main        2  M0B   stack

With ``prepend`` (Token Prepending, Fu et al. 2024, arXiv:2412.11556) a :class:`Prepend` step comes before
each of the main stack's layers ``start..stop-1``: ``prepend=2`` (layers 1 and 2, the authors' start) on
``F*`` for 4 layers:

>>> print(resolve(parse_spec("F*"), 4, prepend=2).table())
step  stream  layer  kind  role
   0  main        0  F     stack
   1  prepend main before layer 1
   2  main        1  F     stack
   3  prepend main before layer 2
   4  main        2  F     stack
   5  main        3  F     stack

Limits, checked before anything proportional to them is built: a depth of at most :data:`MAX_DEPTH`
(4096) layers, and at most :data:`STEPS_PER_LAYER` (32) steps per layer of the model in all (forks and
merges included), so ``EXTEND`` and ``EXTRA`` cannot turn a small spec into a huge loop.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from nosink.checks import positive_int

from .errors import SpecError
from .items import Block, Kind, Segment

if TYPE_CHECKING:
    from .spec import Spec

__all__ = [
    "MAIN",
    "MAX_DEPTH",
    "STEPS_PER_LAYER",
    "Fork",
    "LayerStep",
    "Merge",
    "Plan",
    "Prepend",
    "Role",
    "Step",
    "check_prepend",
    "resolve",
]

MAIN = "main"  # the stream that starts as the embeddings and reaches the final norm
MAX_DEPTH = 4096  # far above any released decoder (hundreds of layers); a typo'd config fails fast
STEPS_PER_LAYER = 32  # steps a plan may take per layer of the model (INTER doubles, each EXTRA adds <= 1)
Role = Literal["stack", "inter", "extra", "extend"]


@dataclass(frozen=True)
class LayerStep:
    """Run decoder layer ``layer`` on ``stream`` with the mask of ``kind``.

    ``role`` says why it runs: ``stack`` (its own position in the main stack, INTER's
    forward copy included), ``inter`` (INTER's converted stream), ``extra`` (an EXTRA
    branch) or ``extend`` (a layer appended on top, reusing the last layer's weights).
    ``window`` is the stock sliding window the step keeps (``None``: none): a plain forward
    step keeps its layer's own window, a converted step drops it (a bidirectional layer limited
    to the past would not be bidirectional).
    """

    layer: int
    kind: Kind
    stream: str
    role: Role
    window: int | None = None


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


@dataclass(frozen=True)
class Prepend:
    """Token Prepending before layer ``layer``: each row's placeholder takes its last token's state on ``stream``.

    The placeholder is each row's second token (the one right after the sink token), the last token the
    row's last real one (the state a last-token or prompt-based embedding reads): under causal attention
    every later token then sees a summary of the whole input in the layer that follows.
    """

    layer: int
    stream: str = MAIN


Step = LayerStep | Fork | Merge | Prepend


@dataclass(frozen=True)
class Plan:
    """A spec resolved against a model of ``depth`` layers (and its sliding ``windows``, if given).

    With an ``exit_layer`` the steps cover only the decoder's first ``exit_layer`` layers (the spec was
    resolved against them); ``depth`` and ``windows`` stay the whole decoder's, so the plan is still
    checked to be that decoder's.
    """

    spec: Spec
    depth: int
    steps: tuple[Step, ...]
    windows: tuple[int | None, ...] | None = None  # the per-layer windows it was resolved with
    exit_layer: int | None = None  # the main stream is read after this many layers; None: after all of them
    prepend: tuple[int, int] | None = None  # Token Prepending before layers start..stop-1; None: none

    @functools.cached_property  # read per row by a server's batches: computed once (the plan is frozen)
    def name(self) -> str:
        """What results are filed under: the canonical spec, ``@ exit <m>`` for an early exit and
        ``@ prepend <a>..<b>`` for Token Prepending before layers ``a`` to ``b``.

        >>> from nosink.layerspec import parse_spec
        >>> parse_spec("F* | B*2").resolve(6, exit_layer=4).name
        'F* | B*2 @ exit 4'
        >>> parse_spec("F*").resolve(6, prepend=3).name
        'F* @ prepend 1..3'
        """
        name = str(self.spec) if self.exit_layer is None else f"{self.spec} @ exit {self.exit_layer}"
        if self.prepend is not None:
            name += f" @ prepend {self.prepend[0]}..{self.prepend[1] - 1}"
        return name

    @property
    def layers(self) -> int:
        """How many of the decoder's layers the main stack runs: ``exit_layer``, else ``depth``."""
        return self.depth if self.exit_layer is None else self.exit_layer

    @property
    def layer_steps(self) -> tuple[LayerStep, ...]:
        """Only the steps that run a layer, in order."""
        return tuple(s for s in self.steps if isinstance(s, LayerStep))

    @property
    def stack(self) -> tuple[Kind, ...]:
        """The kind of each main-stack position, bottom up (``len == layers``: ``depth`` unless it exits early)."""
        return tuple(s.kind for s in self.layer_steps if s.role == "stack")

    def table(self) -> str:
        """The plan as a fixed-width text table, one row per step (a window column when a step has one)."""
        windowed = any(isinstance(s, LayerStep) and s.window is not None for s in self.steps)
        header = "step  stream  layer  kind  role"
        rows = [f"{header:<32}  window" if windowed else header]
        for i, s in enumerate(self.steps):
            if isinstance(s, LayerStep):
                row = f"{i:>4}  {s.stream:<6} {s.layer:>6}  {s.kind!s:<5} {s.role}"
                if windowed:
                    row = f"{row:<32}  {'-' if s.window is None else s.window}"
                rows.append(row)
            elif isinstance(s, Prepend):
                rows.append(f"{i:>4}  prepend {s.stream} before layer {s.layer}")
            else:
                op = "fork" if isinstance(s, Fork) else "merge"
                rows.append(f"{i:>4}  {op:<7} {s.source} -> {s.target}")
        return "\n".join(rows)


def check_prepend(prepend: object, layers: int) -> tuple[int, int] | None:
    """``prepend`` as ``(start, stop)``: Token Prepending before layers ``start`` to ``stop - 1`` of ``layers``.

    An integer ``k`` means layers ``1..k`` (``(1, k + 1)``: the first layer reads the placeholder as it
    enters, as in the authors' code, whose LLaMA-2-7B setting is ``k = 6``); a pair ``(start, stop)`` is
    taken as it is, ``0 <= start < stop <= layers``; ``None`` and ``0`` mean no prepending.

    >>> check_prepend(6, 24), check_prepend((0, 3), 24), check_prepend(None, 24)
    ((1, 7), (0, 3), None)

    Raises:
        ValueError: for a depth or range that does not fit the ``layers`` the plan runs.
        TypeError: for anything but ``None``, an integer or a pair of integers.
    """
    if prepend is None or (isinstance(prepend, int) and not isinstance(prepend, bool) and prepend == 0):
        return None
    if isinstance(prepend, int) and not isinstance(prepend, bool):
        if prepend < 0 or prepend + 1 > layers:
            raise ValueError(
                f"prepend={prepend} asks for Token Prepending before layers 1 to {prepend}, but the plan runs "
                f"{layers} layers (0 to {layers - 1}): give 1 to {layers - 1}"
            )
        return (1, prepend + 1)
    if (
        isinstance(prepend, (tuple, list))
        and len(prepend) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in prepend)
    ):
        start, stop = prepend
        if not 0 <= start < stop <= layers:
            raise ValueError(
                f"prepend=({start}, {stop}) must be layers start..stop-1 with 0 <= start < stop <= {layers} "
                "(the layers the plan runs)"
            )
        return (start, stop)
    raise TypeError(
        "prepend must be None, a number of layers k (prepend before layers 1..k) or a pair (start, stop), "
        f"got {type(prepend).__name__}"
    )


def resolve(
    spec: Spec,
    depth: int,
    windows: Sequence[int | None] | None = None,
    *,
    exit_layer: int | None = None,
    prepend: int | tuple[int, int] | None = None,
) -> Plan:
    """Resolve ``spec`` for a decoder with ``depth`` layers.

    Args:
        spec: a parsed spec.
        depth: the decoder's number of layers (``config.num_hidden_layers``), at most :data:`MAX_DEPTH`.
        windows: the decoder's own sliding window per layer (``None`` for full attention), ``depth``
            entries; plain forward steps keep theirs, converted steps drop it. ``None``: no windows.
        exit_layer: stop after the decoder's first ``exit_layer`` layers (1 to ``depth``): the spec is
            resolved against those layers only (its counts add up to ``exit_layer``, a fill segment fills
            up to it, ``EXTEND`` reuses layer ``exit_layer - 1``) and the layers above never run.
            ``None`` (default): all ``depth`` layers.
        prepend: Token Prepending (see :func:`check_prepend`): a :class:`Prepend` step before each of the
            main stack's layers in the range. ``None`` (default): none.

    Returns:
        The :class:`Plan`: which layer runs, with which kind and window, in which stream.

    Raises:
        SpecError: if ``depth`` is not an integer from 1 to :data:`MAX_DEPTH`, the spec's positions do
            not add up to ``depth`` (or exceed it, with a fill segment), an EXTRA branch is deeper than
            the model, or the plan would take more than :data:`STEPS_PER_LAYER` steps per layer.
        ValueError: if ``windows`` does not hold ``depth`` positive integers or ``None``, ``exit_layer``
            is not an integer from 1 to ``depth``, or ``prepend`` does not fit the layers the plan runs.
    """
    if prepend is not None:
        plan = resolve(spec, depth, windows, exit_layer=exit_layer)
        return _prepended(plan, check_prepend(prepend, plan.layers))
    try:
        positive_int(depth, "model depth")
    except ValueError as err:
        raise SpecError(str(err)) from None
    if depth > MAX_DEPTH:
        raise SpecError(f"model depth {depth} is more than nosink supports", expected=f"at most {MAX_DEPTH} layers")
    if windows is not None:
        windows = tuple(windows)
        if len(windows) != depth:
            raise ValueError(f"windows has {len(windows)} entries for a model of {depth} layers")
        for w in windows:
            if w is not None:
                positive_int(w, "a sliding window")
    if exit_layer is not None:
        # An early exit is the same spec on the decoder cut after layer exit_layer; only the plan's
        # identity (depth, windows) stays the whole decoder's.
        if positive_int(exit_layer, "exit_layer") > depth:
            raise ValueError(f"exit_layer must be from 1 to the model's {depth} layers, got {exit_layer}")
        try:
            cut = resolve(spec, exit_layer, None if windows is None else windows[:exit_layer])
        except SpecError as err:
            raise SpecError(
                f"{err.problem} (exit_layer={exit_layer} keeps the first {exit_layer} of {depth} layers)",
                err.spec,
                err.column,
                err.expected,
            ) from None
        return Plan(spec, depth, cut.steps, windows, exit_layer)
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

    def size(segments: tuple[Segment, ...]) -> int:
        return sum(fill if seg.count is None else seg.count for seg in segments)

    # Count the steps before building any: a spec is short, but its counts multiply.
    extras = [item for item in spec.items if isinstance(item, Block) and item.op == "EXTRA"]
    for block in extras:
        if size(block.segments) > depth:
            raise SpecError(
                f"{block} runs the decoder's first {size(block.segments)} layers but the model has {depth}",
                text,
                expected=f"at most {depth} layers inside EXTRA(...)",
            )
    n_steps = depth + sum(size(b.segments) + 2 for b in extras)
    for item in spec.items:
        if isinstance(item, Block) and item.op == "INTER" and size(item.segments):
            n_steps += size(item.segments) + 2  # the converted stream, its fork and its merge
        elif isinstance(item, Block) and item.op == "EXTEND":
            n_steps += size(item.segments)
    if n_steps > STEPS_PER_LAYER * depth:
        raise SpecError(
            f"spec takes {n_steps} steps on a model of {depth} layers, more than nosink runs",
            text,
            expected=f"at most {STEPS_PER_LAYER} steps per layer ({STEPS_PER_LAYER * depth} here)",
        )

    def expand(segments: tuple[Segment, ...]) -> list[Kind]:
        return [seg.kind for seg in segments for _ in range(fill if seg.count is None else seg.count)]

    def step(layer: int, kind: Kind, stream: str, role: Role) -> LayerStep:
        window = windows[layer] if windows is not None and kind.is_causal else None
        return LayerStep(layer, kind, stream, role, window)

    steps: list[Step] = []
    # EXTRA branches start from the embeddings, so they fork before the main stack runs.
    for e, block in enumerate(extras):
        name = f"extra{e}"
        steps.append(Fork(MAIN, name))
        steps.extend(step(i, kind, name, "extra") for i, kind in enumerate(expand(block.segments)))

    layer = 0
    for item in spec.items:
        if isinstance(item, Segment):
            for kind in expand((item,)):
                steps.append(step(layer, kind, MAIN, "stack"))
                layer += 1
        elif item.op == "INTER":
            kinds = expand(item.segments)
            if not kinds:  # an INTER whose only content is a fill of zero layers
                continue
            steps.append(Fork(MAIN, "inter"))
            steps.extend(step(layer + i, Kind("F"), MAIN, "stack") for i in range(len(kinds)))
            steps.extend(step(layer + i, kind, "inter", "inter") for i, kind in enumerate(kinds))
            steps.append(Merge("inter", MAIN))
            layer += len(kinds)
        elif item.op == "EXTEND":
            steps.extend(step(depth - 1, kind, MAIN, "extend") for kind in expand(item.segments))
    steps.extend(Merge(f"extra{e}", MAIN) for e in range(len(extras)))
    return Plan(spec, depth, tuple(steps), windows)


def _prepended(plan: Plan, prepend: tuple[int, int] | None) -> Plan:
    # A Prepend step before the main stack's step of each layer in the range.
    if prepend is None:
        return plan
    steps: list[Step] = []
    for s in plan.steps:
        if isinstance(s, LayerStep) and s.stream == MAIN and s.role == "stack" and prepend[0] <= s.layer < prepend[1]:
            steps.append(Prepend(s.layer))
        steps.append(s)
    return Plan(plan.spec, plan.depth, tuple(steps), plan.windows, plan.exit_layer, prepend)


def _is_extra_or_extend(item: Segment | Block) -> bool:
    return isinstance(item, Block) and item.op in ("EXTRA", "EXTEND")


def _segs(item: Segment | Block) -> tuple[Segment, ...]:
    return item.segments if isinstance(item, Block) else (item,)
