"""Sweeps over the paper's configurations (k = converted layers, k0 = no-sink layers).

The configurations, their specs and the choice of each one's best are the study's candidate grid
(:mod:`nosink.evals.study.candidates`); a sweep differs only in its protocol: a dense k grid (:func:`default_ks`),
MASK0&BIDIR at every k0 <= k, EXTEND up to k = 5, and a table of points with their scores (:class:`SweepPoint`).

A sweep evaluates every spec of the chosen configs in one pass over the data: the encoder runs
the specs as a prefix tree, so layers below the lowest converted one (and, for MASK0&BIDIR, the
bidirectional layers shared with INPLACE-BIDIR) run once per batch, not once per spec.

>>> [(c.config, c.k, str(c.spec)) for c in config_specs("MASK0-BIDIR", depth=30, ks=[2, 4])]
[('MASK0-BIDIR', 2, 'F* | M0B*2'), ('MASK0-BIDIR', 4, 'F* | M0B*4')]
>>> [(c.k, c.k0) for c in config_specs("MASK0&BIDIR", depth=30, ks=[4, 8], k0s=[2, 4])]
[(4, 2), (8, 2), (4, 4), (8, 4)]
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nosink.checks import positive_int
from nosink.layerspec import Spec, presets

from .study.candidates import CONFIGS, EXTEND_MAX_K, best_by_config

__all__ = [
    "CONFIGS",
    "SweepPoint",
    "best",
    "default_ks",
    "config_specs",
    "plot_sweep",
    "read_table",
    "write_table",
]


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: a configuration at one k (and k0), its spec and its scores."""

    config: str  # paper name, or BASELINE
    k: int  # converted layers (0 for the baseline)
    spec: Spec
    k0: int | None = None  # no-sink layers, for MASK0&BIDIR
    scores: dict[str, float] = field(default_factory=dict, compare=False)

    def row(self) -> dict[str, Any]:
        """A flat dict for CSV/JSON."""
        return {"config": self.config, "k": self.k, "k0": self.k0, "spec": str(self.spec), **self.scores}


def default_ks(depth: int) -> list[int]:
    """A k grid that is dense where the paper's curves move (small k) and sparse above: 1, 2, 4, 6, 8, ..."""
    ks = [1, 2, 4, 6, 8, 10, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64]
    return [k for k in ks if k < depth] + [depth]


def config_specs(
    config: str, depth: int, ks: Iterable[int] | None = None, k0s: Iterable[int] | None = None
) -> list[SweepPoint]:
    """The specs of one configuration on a model of ``depth`` layers.

    ``BASELINE`` is one spec; ``MASK0&BIDIR`` takes every (k, k0) with k0 <= k from ``ks`` x ``k0s``
    (default k0s: 1, 2, 3). EXTEND is limited to k <= 5 (the paper stops EXTEND at 5).

    Raises:
        ValueError: for an unknown configuration, a k or k0 that is not an integer from 1 to ``depth``,
            or a grid that gives the config no spec at all (EXTEND with every k above 5, say).
    """
    positive_int(depth, "depth")
    key = config.upper().replace("MASKO", "MASK0")
    if key == "BASELINE":
        return [SweepPoint("BASELINE", 0, presets.baseline())]
    if key != "MASK0&BIDIR" and key not in CONFIGS:
        raise ValueError(
            f"unknown configuration {config!r}; expected BASELINE, MASK0&BIDIR or one of {sorted(CONFIGS)}"
        )
    ks = _grid(ks if ks is not None else default_ks(depth), "ks", depth)
    if key == "MASK0&BIDIR":
        k0s = _grid(k0s if k0s is not None else [k0 for k0 in (1, 2, 3) if k0 <= depth], "k0s", depth)
        out = [SweepPoint(key, k, presets.mask0_and_bidir(k, k0), k0) for k0 in k0s for k in ks if k0 <= k]
    else:
        limit = EXTEND_MAX_K if key.startswith("EXTEND") else depth
        out = [SweepPoint(key, k, CONFIGS[key](k)) for k in ks if k <= limit]
    if not out:
        why = f"EXTEND stops at k={EXTEND_MAX_K}" if key.startswith("EXTEND") else "every k0 is above every k"
        raise ValueError(
            f"{key} has no spec for ks={ks}" + (f", k0s={k0s}" if key == "MASK0&BIDIR" else "") + f": {why}"
        )
    return out


def _grid(values: Iterable[int], name: str, depth: int) -> list[int]:
    # A value outside 1..depth would be dropped without a word (a sweep then runs only BASELINE): refuse it.
    values = list(values)
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= depth]
    if bad or not values:
        raise ValueError(
            f"{name} {bad if bad else values} out of range: each must be an integer from 1 to the model's depth {depth}"
        )
    return sorted(set(values))


def best(candidates: Sequence[SweepPoint], metric: str) -> dict[str, SweepPoint]:
    """The best candidate of each configuration by ``metric`` (ties: the smaller k, then the smaller k0).

    The study's choice rule (:func:`nosink.evals.study.candidates.best_by_config`) over the points in (k, k0) order.
    """
    ordered = sorted(candidates, key=lambda c: (c.k, c.k0 or 0))
    return best_by_config((c, c.scores[metric]) for c in ordered if metric in c.scores)


def write_table(candidates: Sequence[SweepPoint], folder: str | Path, name: str, meta: dict[str, Any]) -> list[Path]:
    """Write ``name.json`` (rows plus ``meta``) and ``name.csv`` into ``folder``; returns the paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows = [c.row() for c in candidates]
    json_path, csv_path = folder / f"{name}.json", folder / f"{name}.csv"
    json_path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return [json_path, csv_path]


def read_table(path: str | Path) -> tuple[list[SweepPoint], dict[str, Any]]:
    """Candidates and metadata back from a JSON table written by :func:`write_table` (to re-plot, say).

    Raises:
        ValueError: if the file is not such a table.
    """
    from nosink.layerspec import parse_spec

    data = json.loads(Path(path).read_bytes())  # bytes: json reads UTF-8 (with or without a byte-order mark)
    if not isinstance(data, dict) or "rows" not in data:
        raise ValueError(f"{path} is not a sweep table (no 'rows')")
    fixed = {"config", "k", "k0", "spec"}
    candidates = [
        SweepPoint(r["config"], r["k"], parse_spec(r["spec"]), r.get("k0"),
                  {k: v for k, v in r.items() if k not in fixed})
        for r in data["rows"]
    ]  # fmt: skip
    return candidates, data.get("meta", {})


def plot_sweep(candidates: Sequence[SweepPoint], metric: str, path: str | Path, title: str = "") -> Path:
    """Score against k, one line per configuration (MASK0&BIDIR: one per k0), BASELINE as a dashed line.

    The style of the paper's Figures 2, 4 and 6. Writes PNG or SVG by ``path``'s suffix.
    """
    from .plotting import figure, save

    fig, ax = figure(figsize=(7, 4.2), dpi=120)
    lines: dict[str, list[SweepPoint]] = {}
    for c in candidates:
        if metric not in c.scores:
            continue
        label = c.config if c.k0 is None else f"{c.config} (k0={c.k0})"
        lines.setdefault(label, []).append(c)
    for label, cs in lines.items():
        if label == "BASELINE":
            ax.axhline(cs[0].scores[metric], color="black", linestyle="--", linewidth=1, label="BASELINE")
            continue
        cs = sorted(cs, key=lambda c: c.k)
        ax.plot([c.k for c in cs], [c.scores[metric] for c in cs], marker="o", markersize=3, label=label)
    ax.set_xlabel("k (converted layers)")
    ax.set_ylabel(metric)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return save(fig, path)
