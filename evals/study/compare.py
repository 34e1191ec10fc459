"""The paired comparisons the study's verdicts rest on: configs against configs, templates against none, along k."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nosink.evals import stats

from .candidates import NO_TEMPLATE, Candidate, converted_layers
from .results import TemplateResult, best_config

__all__ = ["CONFIG_COMPARISONS", "comparisons", "config_pairs", "curve_comparisons"]


CONFIG_COMPARISONS = (
    ("MASK0&BIDIR", "INPLACE-BIDIR"),
    ("MASK0&BIDIR", "F*"),
    ("INPLACE-BIDIR", "F*"),
    ("INPLACE-BACK", "INPLACE-BIDIR"),
    ("INPLACE-BACK", "F*"),
    ("MASK0-BIDIR", "INPLACE-BIDIR"),
    ("MASK0-BIDIR", "INPLACE-BACK"),
    ("MASK0-BIDIR", "MASK0-FOR"),
    ("MASK0-BIDIR", "F*"),
    ("MASK0-FOR", "F*"),
    ("MASK0-ALL", "INPLACE-BIDIR"),
)
"""The pairs of chosen configs the verdicts compare (A, B), where both ran: MASK0&BIDIR and INPLACE-BIDIR
(the paper's Finding 5), BACK against BIDIR (Finding 2), MASK0-BIDIR against the others (Finding 3), MASK0-ALL
against INPLACE-BIDIR's chosen spec, and the k-configs against ``F*``. Finding 4 proper, ``M0B*`` against
``B*`` everywhere, is a :func:`curve_comparisons` pair (it needs ``F* | B*n`` in the grid)."""


def _label(config: str) -> str:
    return config if config == "F*" else config.lower()


def config_pairs(configs: Iterable[str]) -> list[tuple[str, str, str]]:
    """``(kind, A, B)`` for the pairs of :data:`CONFIG_COMPARISONS` whose configs are both in ``configs``.

    >>> [kind for kind, a, b in config_pairs(["F*", "INPLACE-BIDIR", "INPLACE-BACK"])]
    ['inplace-bidir vs F*', 'inplace-back vs inplace-bidir', 'inplace-back vs F*']
    """
    present = set(configs)
    return [(f"{_label(a)} vs {_label(b)}", a, b) for a, b in CONFIG_COMPARISONS if a in present and b in present]


def curve_comparisons(
    candidates: Iterable[Candidate], chosen: Mapping[str, Candidate], depth: int
) -> list[tuple[str, Candidate, Candidate]]:
    """``(kind, A, B)`` along the k axis of a grid scored on the reporting split, for the paper's Findings 1, 2, 4.

    - INPLACE-BACK against INPLACE-BIDIR at every k both ran (Finding 2: backward wins when k is small);
    - each config's chosen spec against the same config with every layer converted, where the grid has
      ``k = depth`` (Finding 1: keep some layers forward);
    - MASK0-ALL (``M0B*``) against INPLACE-BIDIR at ``k = depth`` (Finding 4: hiding the first token in
      every layer behaves like not hiding it).

    Early-exit candidates and MASK0&BIDIR (two parameters) are left out.

    >>> from nosink.evals.study.candidates import grid
    >>> cands = grid(4, ks=[2, 4], configs=["INPLACE-BIDIR", "INPLACE-BACK"])
    >>> [(a.name, b.name) for _, a, b in curve_comparisons(cands, {"INPLACE-BACK": cands[3]}, depth=4)]
    [('F* | R*2', 'F* | B*2'), ('F* | R*4', 'F* | B*4'), ('F* | R*2', 'F* | R*4')]
    """
    at = {
        (c.config, converted_layers(c.spec, depth)): c
        for c in candidates
        if c.exit_layer is None and c.config not in ("F*", "SUGGESTED", "MASK0&BIDIR")
    }
    out = [
        (f"inplace-back vs inplace-bidir at k={k}", c, at["INPLACE-BIDIR", k])
        for (config, k), c in sorted(at.items(), key=lambda item: item[0][1])
        if config == "INPLACE-BACK" and ("INPLACE-BIDIR", k) in at
    ]
    for config, c in chosen.items():
        top = at.get((config, depth))
        if top is not None and top != c and config != "MASK0-ALL":
            out.append((f"{config.lower()} chosen vs all layers", c, top))
    if ("MASK0-ALL", depth) in at and ("INPLACE-BIDIR", depth) in at:
        out.append(("mask0-all vs inplace-bidir at k=n", at["MASK0-ALL", depth], at["INPLACE-BIDIR", depth]))
    return out


def _compared(kind: str, a: str, a_spec: str, b: str, b_spec: str, cmp: stats.Comparison) -> dict[str, Any]:
    return {
        "comparison": kind, "a": a, "a_spec": a_spec, "b": b, "b_spec": b_spec, "delta": cmp.delta.estimate,
        "low": cmp.delta.low, "high": cmp.delta.high, "p_value": cmp.p_value,
    }  # fmt: skip


def comparisons(results: Sequence[TemplateResult], seed: int = 0, depth: int | None = None) -> list[dict[str, Any]]:
    """Paired bootstrap comparisons on the reporting split, for the comparisons the study's verdicts rest on.

    Within each template: the chosen configs' pairs of :func:`config_pairs`, and the suggestion vs the best
    converted config. Across templates: each template with ``F*`` against no template with ``F*`` (the prompt
    alone), and each template's best config against no template's same config (the prompt on top of the mask);
    a config's "best" is chosen on the choosing split. With ``depth`` and a grid scored on the reporting split
    (``report_grid``), also :func:`curve_comparisons` within each template.
    """
    by_name = {r.template: r for r in results}
    base = by_name.get(NO_TEMPLATE)
    pairs: list[tuple[str, str, str, str, str]] = []  # (kind, template A, config A, template B, config B)
    out = []
    for r in results:
        t = r.template
        pairs += [(kind, t, a, t, b) for kind, a, b in config_pairs(r.chosen)]
        best = best_config(r)
        if best is not None:
            pairs.append(("template+mask vs template alone", t, best, t, "F*"))
            if "SUGGESTED" in r.chosen:
                pairs.append(("suggested vs best swept", t, "SUGGESTED", t, best))
        if base is not None and t != NO_TEMPLATE:
            pairs.append(("template alone vs nothing", t, "F*", NO_TEMPLATE, "F*"))
            if best is not None:
                pairs.append(("template+mask vs mask alone", t, best, NO_TEMPLATE, best))
    for kind, ta, fa, tb, fb in pairs:
        a, b = by_name[ta].chosen.get(fa), by_name[tb].chosen.get(fb)
        if a is None or b is None or a.report is None or b.report is None:
            continue
        cmp = stats.compare(a.report, b.report, seed=seed)
        out.append(_compared(kind, f"{ta} / {fa}", a.candidate.name, f"{tb} / {fb}", b.candidate.name, cmp))
    if depth is not None:
        for r in results:
            reported = {s.candidate: s.report for s in r.grid if s.report is not None}
            chosen = {f: s.candidate for f, s in r.chosen.items()}
            for kind, a, b in curve_comparisons(reported, chosen, depth):
                cmp = stats.compare(reported[a], reported[b], seed=seed)
                out.append(
                    _compared(kind, f"{r.template} / {a.config}", a.name, f"{r.template} / {b.config}", b.name, cmp)
                )
    return out
