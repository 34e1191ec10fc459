"""The study's figures: curves over k, bars per template, scores over exit layers, and the masks x templates heatmaps.

Each reads the study's JSON files (as :mod:`.tables` does) and writes PNG or SVG by the path's suffix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .candidates import NO_TEMPLATE
from .tables import report_curves
from .verdicts import effect, interplay

CHOSEN = "chosen on the choosing half"

__all__ = ["plot_curves", "plot_exits", "plot_interplay", "plot_retrieval", "plot_study"]


def plot_curves(
    payloads: Mapping[str, Mapping[str, Any]], path: str | Path, template: str = NO_TEMPLATE, title: str = ""
) -> Path:
    """The configs' reported scores against k with their 95% intervals, one panel per payload (a study JSON run
    with ``--report-grid``, or a NER study JSON); ``F*`` is the dashed line and its band, chosen specs are ringed."""
    from nosink.evals.plotting import figure, save

    fig, axes = figure(1, len(payloads), figsize=(5.5 * len(payloads), 4), squeeze=False)
    for ax, (name, payload) in zip(axes[0], payloads.items(), strict=True):
        curves, chosen = report_curves(payload, template)
        base = curves.pop("F*", {}).get(0)
        if base is not None:
            ax.axhline(base["report"], color="grey", linestyle="--", label="F*")
            ax.axhspan(base["low"], base["high"], color="grey", alpha=0.15)
        for i, (config, curve) in enumerate(curves.items()):
            ks = sorted(curve)
            ys = [curve[k]["report"] for k in ks]
            err = [
                [curve[k]["report"] - curve[k]["low"] for k in ks],
                [curve[k]["high"] - curve[k]["report"] for k in ks],
            ]
            shift = (i - (len(curves) - 1) / 2) * 0.12  # the intervals of equal k side by side
            xs = [k + shift for k in ks]
            ax.errorbar(xs, ys, yerr=err, marker="o", markersize=3, capsize=2, label=config, color=f"C{i}")
            picked = [
                (x, curve[k]["report"]) for x, k in zip(xs, ks, strict=True) if chosen.get(config) == curve[k]["name"]
            ]
            if picked:
                ax.scatter(*zip(*picked, strict=True), s=90, facecolors="none", edgecolors=f"C{i}", linewidths=1.5)
        ax.set_xticks(sorted({k for curve in curves.values() for k in curve}))
        ax.set_xlabel(f"k, converted layers (of {payload['depth']})")
        ax.set_ylabel(payload["metric"])
        ax.set_title(name)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return save(fig, path)


def plot_study(
    payloads: Mapping[str, Mapping[str, Any]],
    path: str | Path,
    baselines: Mapping[str, Mapping[str, Any]] | None = None,
    title: str = "",
) -> Path:
    """Reported scores with 95% intervals, one panel per model, templates on the x axis, one bar per config;
    baselines as horizontal lines."""
    from nosink.evals.plotting import figure, save

    fig, axes = figure(1, len(payloads), figsize=(5.5 * len(payloads), 4), squeeze=False, sharey=True)
    # every config any panel chose, in the order of first appearance: one colour and slot each across panels
    configs = list(dict.fromkeys(f for p in payloads.values() for t in p["templates"] for f in t["chosen"]))
    width = min(0.2, 0.8 / max(len(configs), 1))
    for ax, (model, payload) in zip(axes[0], payloads.items(), strict=True):
        names = [t["template"] for t in payload["templates"]]
        for j, cfg in enumerate(configs):
            xs, ys, err = [], [], [[], []]
            for i, t in enumerate(payload["templates"]):
                row = t["chosen"].get(cfg)
                if row is not None:
                    xs.append(i + (j - (len(configs) - 1) / 2) * width)
                    ys.append(row["report"])
                    err[0].append(row["report"] - row["low"])
                    err[1].append(row["high"] - row["report"])
            if xs:
                ax.bar(xs, ys, width=width, yerr=err, capsize=2, label=cfg, color=f"C{j}")
        for k, (name, base) in enumerate((baselines or {}).items()):
            ax.axhline(base["result"]["report"], color=f"C{max(5, len(configs)) + k}", linestyle="--", label=name)
        ax.set_xticks(range(len(names)), names, rotation=20)
        ax.set_xlim(-0.6, max(len(names), 3) - 0.4)  # bars keep their width when a model has few templates
        ax.set_title(model)
        ax.set_ylabel(payload["metric"])
    axes[0][0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return save(fig, path)


def plot_exits(payloads: Mapping[str, Mapping[str, Any]], path: str | Path, title: str = "") -> Path:
    """The reported score against the exit layer, per model and config (the full depth is the last point)."""
    from nosink.evals.plotting import figure, save

    fig, ax = figure(1, 1, figsize=(9, 4.5))
    for model, payload in payloads.items():
        for t in payload["templates"]:
            for cfg, rows in t["exits"].items():
                pts = sorted((r["exit_layer"] or payload["depth"], r["report"]) for r in rows)
                ax.plot(*zip(*pts, strict=True), marker="o", label=f"{model} {t['template']} {cfg}")
    ax.set_xlabel("exit layer (layers run; the last point of each line is the full depth)")
    ax.set_ylabel("reported score")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    if title:
        ax.set_title(title)
    return save(fig, path)


def plot_interplay(rows: Mapping[str, Sequence[Mapping[str, Any]]], path: str | Path, title: str = "") -> Path:
    """Two heatmaps over ``rows`` (as :func:`interplay_table`) x templates: the mask under each template, and
    the template on top of the mask, as paired differences on the reporting split, on one colour scale; a star
    marks a difference whose 95% interval is clear of zero, a grey cell a pair that was not run (a template
    with no pair anywhere has no column).

    Raises:
        ValueError: for no rows.
    """
    import matplotlib

    from nosink.evals.plotting import figure, save

    if not rows:
        raise ValueError("no rows to plot: give at least one model and task's study JSONs")
    found = {label: {e["template"]: e for e in interplay(payloads)} for label, payloads in rows.items()}
    templates = list(dict.fromkeys(t for entries in found.values() for t in entries))
    panels = {
        "the mask under the template:\n(template, best converted spec) - (template, F*)": "mask",
        "the template on top of the mask:\n(template, spec) - (no template, same spec)": "prompt",
    }
    cells, columns = {}, {}
    for name, key in panels.items():
        grid_ = np.array([[e.get(t, {}).get(key) for t in templates] for e in found.values()], dtype=object)
        keep = [j for j in range(len(templates)) if any(c is not None for c in grid_[:, j])]
        columns[name] = [templates[j] for j in keep]
        cells[name] = grid_[:, keep]
    deltas = [c["delta"] for v in cells.values() for c in v.flat if c is not None]
    bound = max((abs(d) for d in deltas), default=0.0) or 1.0  # one colour scale for both panels
    cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="0.88")  # grey: not run
    widths = [max(len(columns[name]), 1) for name in panels]
    fig, axes = figure(
        1, 2, figsize=(4.5 + 1.05 * sum(widths), 1.8 + 0.32 * len(rows)), squeeze=False,
        gridspec_kw={"width_ratios": widths},
    )  # fmt: skip
    image = None
    for ax, name in zip(axes[0], panels, strict=True):
        ax.set_title(name, fontsize=9)
        if not columns[name]:
            ax.text(0.5, 0.5, "no pair run", ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        values = np.array([[np.nan if c is None else c["delta"] for c in line] for line in cells[name]], dtype=float)
        image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=-bound, vmax=bound, aspect="auto")
        for (i, j), c in np.ndenumerate(cells[name]):
            if c is not None:  # white on the dark ends of the scale
                text = f"{c['delta']:+.3f}" + ("" if effect(c) == "ties" else "*")
                dark = abs(c["delta"]) > 0.6 * bound
                ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if dark else "black")
        ax.set_xticks(range(len(columns[name])), columns[name], rotation=30, ha="right")
        ax.set_yticks(range(len(rows)), list(rows) if ax is axes[0][0] else [])
    if image is not None:
        fig.colorbar(image, ax=axes[0][-1], shrink=0.8)
    fig.suptitle((title + "\n" if title else "") + "*: the 95% interval of the paired difference is clear of 0")
    return save(fig, path)


def plot_retrieval(
    runs: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]],
    path: str | Path,
    baselines: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    title: str = "",
) -> Path:
    """Full-corpus retrieval from ``benchmarks/retrieval_full.py score`` files: one panel per task of ``runs``
    (task -> model -> that model's score files), a group of bars per model: ``F*`` without a template, ``F*`` with
    each template, and the configuration chosen on the choosing half over all the model's files (named under the
    model), each its reporting-half score with its 95% interval; ``baselines`` (name -> task -> score file of a
    trained encoder) as dashed lines with their intervals as bands. A bar a model did not run is left out.

    Raises:
        ValueError: for no tasks, or a task with no model.
    """
    from nosink.evals.plotting import figure, save

    if not runs or not all(runs.values()):
        raise ValueError("nothing to plot: give each task at least one model's score files")
    bars = {task: {model: _retrieval_bars(files) for model, files in models.items()} for task, models in runs.items()}
    labels = list(dict.fromkeys(label for models in bars.values() for b in models.values() for label in b))
    labels = [label for label in labels if label != CHOSEN] + [CHOSEN]  # the choice the last bar of each group
    width = 0.8 / len(labels)
    most = max(len(m) for m in runs.values())
    fig, axes = figure(len(runs), 1, figsize=(2.6 * most + 1.5, 4.2 * len(runs)), squeeze=False)
    for ax, (task, models) in zip(axes[:, 0], bars.items(), strict=True):
        for j, label in enumerate(labels):
            xs, rows = [], []
            for i, found in enumerate(models.values()):
                if label in found:
                    xs.append(i + (j - (len(labels) - 1) / 2) * width)
                    rows.append(found[label])
            ys = np.array([r["report_half"] for r in rows])
            err = [ys - [r["report_low"] for r in rows], [r["report_high"] for r in rows] - ys]
            ax.bar(xs, ys, width=width, yerr=err, capsize=2, label=label, color=f"C{j}")
        for k, (name, by_task) in enumerate((baselines or {}).items()):
            if task in by_task:
                row = by_task[task]["results"][0]
                colour = f"C{len(labels) + k}"
                ax.axhline(row["report_half"], color=colour, linestyle="--", label=name)
                ax.axhspan(row["report_low"], row["report_high"], color=colour, alpha=0.12)
        ticks = [f"{model}\nchosen: {_configuration(found[CHOSEN])}" for model, found in models.items()]
        ax.set_xticks(range(len(models)), ticks, fontsize=8)
        ax.set_title(task)
        ax.set_ylabel("nDCG@10, reporting half")
    legend = {}  # every panel's entries once: a baseline may stand in one task only
    for ax in axes[:, 0]:
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(name, handle)
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=min(len(legend), 4), fontsize=8)
    if title:
        fig.suptitle(title)
    return save(fig, path, rect=(0, 0.05, 1, 1))


def _configuration(row: Mapping[str, Any]) -> str:
    """A score row's configuration in a few words: template, spec and Token Prepending depth."""
    depth = f", prepend {row['prepend']}" if row.get("prepend") else ""
    return f"{row['template'] or 'no template'}, {row['spec']}{depth}"


def _retrieval_bars(files: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """One model's bars: its ``F*`` rows without prepending, by template, and its chosen configuration over all
    its files (the best choosing-half score), labelled with its template, spec and depth."""
    rows = [{"template": f.get("template"), **r} for f in files for r in f["results"]]  # a row's own template wins
    if not rows:
        raise ValueError("a model's score files hold no results: give the files retrieval_full.py score wrote")
    out = {}
    for row in rows:
        if row["spec"] == "F*" and not row.get("prepend"):
            out.setdefault(f"F*, {row['template'] or 'no template'}", row)
    out = dict(sorted(out.items(), key=lambda kv: kv[0] != "F*, no template"))
    best = max(rows, key=lambda r: r["choose_half"])
    out[CHOSEN] = best
    return out
