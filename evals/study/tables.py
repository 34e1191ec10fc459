"""Markdown tables of the study's JSON files (the tables of docs/results/study.md are these, read back by its tests)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from .candidates import NO_TEMPLATE, converted_layers
from .verdicts import effect, interplay

__all__ = [
    "comparisons_table",
    "curves_table",
    "exits_table",
    "interplay_counts_table",
    "interplay_table",
    "ner_table",
    "report_curves",
    "results_table",
    "retrieval_setting",
    "selection_table",
]


def _ci(row: Mapping[str, Any]) -> str:
    return f"{row['report']:.3f} [{row['low']:.3f}, {row['high']:.3f}]"


def _signed_ci(c: Mapping[str, Any]) -> str:
    """A paired comparison's difference with its interval, signed: ``+0.012 [-0.003, +0.027]``."""
    return f"{c['delta']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]"


def _cell(spec: str | None) -> str:
    return "`" + (spec or "").replace("|", "\\|") + "`"


def retrieval_setting(payload: Mapping[str, Any]) -> str | None:
    """The retrieval setting a study JSON records: the full corpus (MTEB's) or the quick mode and its cut;
    ``None`` for a JSON of another task.

    A JSON written before the modes existed says how it was cut (``n_queries``, ``n_other_documents``,
    ``doc_words``); any cut is the quick mode.
    """
    if payload.get("metric") != "ndcg@10":
        return None
    data = payload.get("data", {})
    if "mode" in data:
        return str(data["corpus"])
    cuts = []
    if data.get("n_queries") is not None:
        cuts.append(f"{data['n_queries']} sampled test queries")
    if data.get("n_other_documents") is not None:
        cuts.append(
            f"corpus of {data['n_documents']:,} documents (every judged one + {data['n_other_documents']} random)"
        )
    if data.get("doc_words") is not None:
        cuts.append(f"documents cut to their first {data['doc_words']} words")
    if not cuts:
        return f"full: all {data.get('n_documents', '?'):,} documents, as MTEB scores them"
    return "QUICK MODE, not comparable with MTEB scores: " + "; ".join(cuts)


def results_table(payload: Mapping[str, Any], baselines: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """A Markdown table of a study JSON: per template and config, the spec chosen, its choosing score, and
    its reported score with the 95% interval; then the baselines' payloads (``baseline_task``) by name.

    A retrieval table opens with its setting (:func:`retrieval_setting`): a quick-mode score never reads
    as one comparable with MTEB's.
    """
    setting = retrieval_setting(payload)
    lines = [] if setting is None else [f"Corpus: {setting}.", ""]
    lines += [
        "| template | family | spec (chosen) | choose | report [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for t in payload["templates"]:
        for cfg, row in t["chosen"].items():
            lines.append(f"| {t['template']} | {cfg} | {_cell(row['name'])} | {row['choose']:.3f} | {_ci(row)} |")
    for name, base in (baselines or {}).items():
        lines.append(f"| - | {name} | (trained encoder) | {base['result']['choose']:.3f} | {_ci(base['result'])} |")
    return "\n".join(lines)


def comparisons_table(payload: Mapping[str, Any]) -> str:
    """A Markdown table of a study JSON's paired comparisons: A - B with its interval and one-sided p-value."""
    lines = ["| comparison | A | B | A - B [95% CI] | p (A not better) |", "|---|---|---|---|---|"]
    for c in payload["comparisons"]:
        a = c["a"] + " " + _cell(c["a_spec"]) if "a_spec" in c else _cell(c["a"])
        b = c["b"] + " " + _cell(c["b_spec"]) if "b_spec" in c else _cell(c["b"])
        lines.append(f"| {c['comparison']} | {a} | {b} | {_signed_ci(c)} | {c['p_value']:.3f} |")
    return "\n".join(lines)


def selection_table(payload: Mapping[str, Any]) -> str:
    """A Markdown table of a study JSON's selection stage (``--select``): each candidate with its sample score."""
    record = payload["suggestion"]
    lines = ["| candidate (k, k0) | sample score |", "|---|---|"]
    for c in record["candidates"]:
        mark = " (selected)" if c["spec"] == record["spec"] else ""
        lines.append(f"| {_cell(c['spec'])} ({c['k']}, {c['k0']}){mark} | {c['score']:.3f} |")
    return "\n".join(lines)


def exits_table(payload: Mapping[str, Any]) -> str:
    """A Markdown table of a study JSON's early exits: per config and exit, both scores (full depth: ``-``)."""
    lines = ["| template | family | exit layer | choose | report [95% CI] |", "|---|---|---|---|---|"]
    for t in payload["templates"]:
        for cfg, rows in t["exits"].items():
            for row in sorted(rows, key=lambda r: r["exit_layer"] or 10**6):
                chosen = " (chosen)" if row["name"] == t["exit_choice"][cfg] else ""
                where = row["exit_layer"] if row["exit_layer"] is not None else "all"
                head = f"| {t['template']} | {cfg} {_cell(row['spec'])} | {where}{chosen}"
                lines.append(f"{head} | {row['choose']:.3f} | {_ci(row)} |")
    return "\n".join(lines)


def ner_table(payload: Mapping[str, Any], baselines: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """A Markdown table of a NER study JSON: every candidate's choosing-half and reporting-half F1 (mean of seeds),
    ``(chosen)`` on each config's own choice (a suggestion that is also a swept spec marks its own row only)."""
    chosen = payload["chosen"]
    lines = ["| family | spec | choose half | report half [95% CI] | per seed |", "|---|---|---|---|---|"]
    for name, base in [(None, payload), *((baselines or {}).items())]:
        for row in base["rows"]:
            label = name or row["family"]
            mine = name is None and chosen.get(row["family"]) == row["name"]
            spec = _cell(row["name"]) + (" (chosen)" if mine else "")
            seeds = ", ".join(f"{x:.3f}" for x in row["per_seed"])
            lines.append(f"| {label} | {spec} | {row['choose']:.3f} | {_ci(row)} | {seeds} |")
    return "\n".join(lines)


def _curve_rows(payload: Mapping[str, Any], template: str) -> tuple[list[Mapping[str, Any]], dict[str, str]]:
    """The rows scored on the reporting split at full depth, and each config's chosen spec name, of a study JSON
    (one template's grid) or a NER study JSON (every candidate).

    Raises:
        ValueError: if the study JSON has no such template.
    """
    if "rows" in payload:
        rows, chosen = payload["rows"], dict(payload["chosen"])
    else:
        found = [t for t in payload["templates"] if t["template"] == template]
        if not found:
            have = [t["template"] for t in payload["templates"]]
            raise ValueError(f"no template {template!r} in this study JSON; it has {have}")
        rows, chosen = found[0]["grid"], {config: row["name"] for config, row in found[0]["chosen"].items()}
    return [r for r in rows if r.get("report") is not None and r["exit_layer"] is None], chosen


def report_curves(
    payload: Mapping[str, Any], template: str
) -> tuple[dict[str, dict[int, Mapping[str, Any]]], dict[str, str]]:
    """config -> k -> row, for the one-parameter configs (MASK0&BIDIR and the suggestion left out); ``F*`` at k 0;
    and each config's chosen spec name."""
    rows, chosen = _curve_rows(payload, template)
    curves: dict[str, dict[int, Mapping[str, Any]]] = {}
    for row in rows:
        if row["family"] not in ("MASK0&BIDIR", "SUGGESTED"):
            curves.setdefault(row["family"], {})[converted_layers(row["spec"], payload["depth"])] = row
    return curves, chosen


def curves_table(payload: Mapping[str, Any], template: str = NO_TEMPLATE) -> str:
    """A Markdown table of the configs' curves over k on the reporting split (a study JSON run with
    ``--report-grid``, or a NER study JSON): one row per k, one column per config, each cell the reported score
    with its 95% interval, ``(chosen)`` where the config's spec was chosen. The ``k = 0`` row is ``F*``, where
    every config starts.

    Raises:
        ValueError: if the payload has no grid scored on the reporting split, or no such template.
    """
    curves, chosen = report_curves(payload, template)
    base = curves.pop("F*", {}).get(0)
    if not curves:
        raise ValueError("no grid rows with a reporting score: run the study with --report-grid")
    configs = list(curves)
    lines = ["| k | " + " | ".join(configs) + " |", "|---" * (len(configs) + 1) + "|"]
    if base is not None:
        lines.append("| 0 (`F*`) | " + " | ".join(_ci(base) for _ in configs) + " |")
    for k in sorted({k for curve in curves.values() for k in curve}):
        cells = []
        for config in configs:
            row = curves[config].get(k)
            mark = " (chosen)" if row is not None and chosen.get(config) == row["name"] else ""
            cells.append("" if row is None else _ci(row) + mark)
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _delta(c: Mapping[str, Any] | None) -> str:
    return "-" if c is None else f"{_signed_ci(c)}, p {c['p_value']:.3f}"


def interplay_table(rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """A Markdown table of :func:`interplay` for several models and tasks (``rows``: a label such as
    ``"SmolLM2-135M, Emotion"`` -> that model's study JSONs on that task): per template, its ``F*`` score, its
    best converted spec's score, the mask under the template, the template on top of the mask, and the
    verdict."""
    lines = [
        "| model, task | template | template alone (`F*`) | with the mask | mask under template | "
        "template on top of mask | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, payloads in rows.items():
        for e in interplay(payloads):
            with_mask = f"{_ci(e['with_mask'])} {_cell(e['with_mask']['name'])}"
            lines.append(
                f"| {label} | {e['template']} | {_ci(e['alone'])} | {with_mask} | {_delta(e['mask'])} | "
                f"{_delta(e['prompt'])} | {e['verdict']} |"
            )
    return "\n".join(lines)


def interplay_counts_table(rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """A Markdown table counting, per template over ``rows`` (as :func:`interplay_table`), how often the mask
    under the template and the template on top of the mask add, tie or cost (:func:`effect`), how often the two
    add up, and how often the template had no "on top" pair (run without the no-template rows); ``-`` where a
    column does not apply (no template has nothing on top of the mask)."""
    effects = ("adds", "ties", "costs")
    counts: dict[str, Counter[str]] = {}
    for payloads in rows.values():
        for e in interplay(payloads):
            c = counts.setdefault(e["template"], Counter())
            c["rows"] += 1
            c["mask " + effect(e["mask"])] += 1
            if e["prompt"] is None:
                c["no pair"] += 1
            else:
                c["template " + effect(e["prompt"])] += 1
                c["add up"] += e["verdict"] == "add up"
    paired = [*(f"template {x}" for x in effects), "add up", "no pair"]
    columns = ["rows", *(f"mask {x}" for x in effects), *paired]
    lines = ["| template | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for template, c in counts.items():
        cells = ["-" if template == NO_TEMPLATE and col in paired else str(c[col]) for col in columns]
        lines.append(f"| {template} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
