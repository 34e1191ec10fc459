"""SVG text of masks (:func:`~nosink.layerspec.masks.build_mask`'s tensor) and of resolved plans.

>>> svg = mask_svg("M0B", length=4)
>>> svg.startswith("<svg")
True
>>> svg.count('class="attend"')  # M0B on 4 tokens: 16 pairs minus the 3 later queries' view of token 0
13
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import torch

from .grammar import parse_spec
from .items import Kind
from .masks import build_mask
from .plan import MAIN, Fork, LayerStep, Merge, Plan

__all__ = ["kind_colour", "mask_svg", "plan_svg"]

_COLOURS = {"F": "#4c72b0", "B": "#dd8452", "R": "#55a868"}
_SINK_COLOURS = {"F": "#8172b3", "B": "#c44e52"}
_FONT = 'font-family="Helvetica, Arial, sans-serif"'


def kind_colour(kind: Kind) -> str:
    """The fill colour used for ``kind`` in every picture (one colour per direction and sink)."""
    return _COLOURS[kind.direction] if kind.sink is None else _SINK_COLOURS[kind.direction]


def _kind(kind: Kind | str) -> Kind:
    if isinstance(kind, Kind):
        return kind
    spec = parse_spec(kind)
    kinds = spec.kinds
    if len(spec.items) != 1 or len(kinds) != 1:
        raise ValueError(f"mask_svg() draws one layer kind such as 'M0B', got {kind!r}")
    return next(iter(kinds))


def mask_svg(
    kind: Kind | str,
    length: int = 6,
    attention_mask: Sequence[int] | None = None,
    tokens: Sequence[str] | None = None,
    sliding_window: int | None = None,
    title: str | None = None,
    cell: int = 22,
) -> str:
    """SVG of ``kind``'s mask for one sequence: rows are queries, columns keys, filled = attended.

    Args:
        kind: a :class:`Kind` or its spec name (``"F"``, ``"M0B"``, ...).
        length: the number of positions when neither ``attention_mask`` nor ``tokens`` is given.
        attention_mask: one row of 1 (real) and 0 (padding); padding rows and columns are shaded.
        tokens: labels for the positions (default: their indices).
        sliding_window: draw the mask of a sliding-window layer.
        title: a caption above the grid (default: the kind's name).
        cell: the side of one cell in pixels.

    Raises:
        ValueError: for labels that do not match the positions, or a string that is not one kind.
    """
    kind = _kind(kind)
    if attention_mask is not None:
        row = [int(v) for v in attention_mask]
    else:
        row = [1] * (len(tokens) if tokens is not None else length)
    n = len(row)
    labels = [str(i) for i in range(n)] if tokens is None else [str(t) for t in tokens]
    if len(labels) != n:
        raise ValueError(f"{len(labels)} token labels for {n} positions")
    mask = build_mask(kind, torch.tensor([row]), sliding_window)[0, 0].tolist()

    label_w = max(2 + 7 * max(len(s) for s in labels), 24)
    top = 26 + label_w
    width, height = label_w + n * cell + 8, top + n * cell + 8
    colour = kind_colour(kind)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img">',
        f"<title>{escape(title or str(kind))} mask</title>",
        f'<text x="{width / 2:.0f}" y="16" text-anchor="middle" font-size="14" font-weight="bold" {_FONT}>'
        f"{escape(title or str(kind))}</text>",
    ]
    for i, label in enumerate(labels):
        y = top + i * cell + cell / 2 + 4
        x = label_w + i * cell + cell / 2 + 4
        out.append(
            f'<text x="{label_w - 4}" y="{y:.0f}" text-anchor="end" font-size="11" {_FONT}>{escape(label)}</text>'
        )
        out.append(
            f'<text x="{x:.0f}" y="{top - 4}" font-size="11" transform="rotate(-90 {x:.0f} {top - 4})" {_FONT}>'
            f"{escape(label)}</text>"
        )
    for i in range(n):
        for j in range(n):
            x, y = label_w + j * cell, top + i * cell
            if mask[i][j]:
                fill, cls = (colour if row[i] else "#bbbbbb"), "attend"
            else:
                fill, cls = ("#ffffff" if row[i] and row[j] else "#eeeeee"), "blocked"
            out.append(
                f'<rect class="{cls}" x="{x}" y="{y}" width="{cell}" height="{cell}" fill="{fill}" '
                'stroke="#999999" stroke-width="0.5"/>'
            )
    out.append("</svg>")
    return "\n".join(out)


def plan_svg(plan: Plan, title: str | None = None) -> str:
    """SVG of a plan from embeddings (bottom) to final norm: one column per stream, one box per layer step.

    A line leaving a column is a fork, a ``+`` where two columns meet a merge.

    Args:
        plan: a resolved plan, e.g. ``parse_spec("F* | INTER(B*2)").resolve(6)``.
        title: a caption above the diagram (default: the plan's spec).
    """
    depth = plan.layers  # an early exit draws only the layers it runs
    columns: dict[str, int] = {MAIN: 0}
    level: dict[str, float] = {MAIN: -1.0}  # where each stream's latest element sits; -1 = embeddings
    extend = 0
    boxes: list[tuple[int, float, LayerStep]] = []
    links: list[tuple[int, float, int, float]] = []  # (col, level) -> (col, level)
    merges: list[tuple[int, float]] = []
    for step in plan.steps:
        if isinstance(step, Fork):
            columns.setdefault(step.target, len(columns))
            level[step.target] = level[step.source]
            links.append((columns[step.source], level[step.source], columns[step.target], level[step.source]))
        elif isinstance(step, LayerStep):
            if step.role == "extend":
                y = float(depth + extend)
                extend += 1
            else:
                y = float(step.layer)
            col = columns[step.stream]
            links.append((col, level[step.stream], col, y))
            boxes.append((col, y, step))
            level[step.stream] = y
        elif isinstance(step, Merge):
            y = max(level[step.source], level[step.target]) + 0.5
            tcol, scol = columns[step.target], columns[step.source]
            links.append((scol, level[step.source], tcol, y))
            links.append((tcol, level[step.target], tcol, y))
            merges.append((tcol, y))
            level[step.target] = y
            del level[step.source]
    top_level = max(level[MAIN], float(depth + extend - 1)) + 1
    links.append((0, level[MAIN], 0, top_level))

    col_w, row_h, box_w, box_h, margin = 120, 36, 96, 22, 20
    head = 30
    width = margin * 2 + col_w * len(columns)
    height = head + int((top_level + 2) * row_h) + margin

    def xy(col: int, lvl: float) -> tuple[float, float]:
        return margin + col * col_w + box_w / 2, head + (top_level - lvl) * row_h + box_h / 2

    caption = escape(title or str(plan.spec))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img">',
        f"<title>plan of {caption}</title>",
        f'<text x="{margin}" y="18" font-size="14" font-weight="bold" {_FONT}>{caption}</text>',
    ]
    for name, col in columns.items():
        x, _ = xy(col, top_level)
        out.append(f'<text x="{x:.0f}" y="{height - 6}" text-anchor="middle" font-size="11" {_FONT}>{name}</text>')
    for c1, l1, c2, l2 in links:
        (x1, y1), (x2, y2) = xy(c1, l1), xy(c2, l2)
        if c1 != c2 and l1 == l2:  # a fork: step sideways, then up into the branch
            out.append(f'<polyline points="{x1:.0f},{y1:.0f} {x2:.0f},{y1:.0f}" fill="none" stroke="#555555"/>')
        else:
            out.append(f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}" stroke="#555555"/>')
    for label, lvl in (("embeddings", -1.0), ("final norm", top_level)):
        x, y = xy(0, lvl)
        out.append(
            f'<rect x="{x - box_w / 2:.0f}" y="{y - box_h / 2:.0f}" width="{box_w}" height="{box_h}" rx="4" '
            'fill="#f2f2f2" stroke="#555555"/>'
        )
        out.append(f'<text x="{x:.0f}" y="{y + 4:.0f}" text-anchor="middle" font-size="11" {_FONT}>{label}</text>')
    for col, lvl in merges:
        x, y = xy(col, lvl)
        out.append(f'<circle class="merge" cx="{x:.0f}" cy="{y:.0f}" r="8" fill="#ffffff" stroke="#555555"/>')
        out.append(f'<text x="{x:.0f}" y="{y + 4:.0f}" text-anchor="middle" font-size="13" {_FONT}>+</text>')
    for col, lvl, step in boxes:
        x, y = xy(col, lvl)
        label = f"L{step.layer} {step.kind}" + (" (again)" if step.role == "extend" else "")
        out.append(
            f'<rect class="layer" x="{x - box_w / 2:.0f}" y="{y - box_h / 2:.0f}" width="{box_w}" height="{box_h}" '
            f'rx="4" fill="{kind_colour(step.kind)}" stroke="#333333"/>'
        )
        out.append(
            f'<text x="{x:.0f}" y="{y + 4:.0f}" text-anchor="middle" font-size="11" fill="#ffffff" {_FONT}>'
            f"{escape(label)}</text>"
        )
    out.append("</svg>")
    return "\n".join(out)
