"""What the study keeps of a run: scored candidates, one template's results, and their JSON rows."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nosink.evals import stats

from .candidates import Candidate, converted_configs

__all__ = ["Scored", "TemplateResult", "best_config", "overall_choice", "template_row", "write_json"]


@dataclass
class Scored:
    """A candidate with its score on the choosing split and its statistic on the reporting split."""

    candidate: Candidate
    choose: float | None = None
    report: stats.Statistic | None = None

    def row(self, seed: int = 0) -> dict[str, Any]:
        """A flat dict for JSON: the candidate, the choosing score, and the reported score with its 95% CI."""
        out = self.candidate.row() | {"choose": self.choose}
        if self.report is not None:
            ci = stats.bootstrap_ci(self.report, seed=seed)
            out |= {"report": ci.estimate, "low": ci.low, "high": ci.high, "n_report": self.report.n}
        return out


@dataclass
class TemplateResult:
    """Everything one template gave on one task.

    Attributes:
        template: the template's name, or :data:`NO_TEMPLATE`.
        grid: every grid candidate's choosing score (and its reported statistic, with ``report_grid``).
        chosen: per config (and ``SUGGESTED``), the candidate kept and its reported statistic.
        exits: per config, the early-exit candidates (and the config's full-depth one) with both scores.
        exit_choice: per config, the exit chosen on the choosing split (``None``: all layers).
        seconds: encoding time; texts_encoded: texts run through the encoder (all specs at once).
    """

    template: str
    grid: list[Scored]
    chosen: dict[str, Scored]
    exits: dict[str, list[Scored]]
    exit_choice: dict[str, Scored]
    seconds: float
    texts_encoded: int


def best_config(result: TemplateResult) -> str | None:
    """The converted config (any but ``F*`` and ``SUGGESTED``) with the best choosing score."""
    cfgs = [f for f in converted_configs(result.chosen) if result.chosen[f].choose is not None]
    return max(cfgs, key=lambda f: result.chosen[f].choose) if cfgs else None  # type: ignore[arg-type,return-value]


def template_row(result: TemplateResult, seed: int = 0) -> dict[str, Any]:
    """One template's results as a plain dict for JSON (intervals computed here, 1,000 resamples)."""
    return {
        "template": result.template,
        "seconds": round(result.seconds, 1),
        "texts_encoded": result.texts_encoded,
        "grid": [s.row(seed) for s in result.grid],
        "chosen": {cfg: s.row(seed) for cfg, s in result.chosen.items()},
        "best_family": best_config(result),
        "exits": {cfg: [s.row(seed) for s in rows] for cfg, rows in result.exits.items()},
        "exit_choice": {cfg: s.candidate.name for cfg, s in result.exit_choice.items()},
    }


def overall_choice(results: Sequence[TemplateResult]) -> dict[str, Any]:
    """The (template, config) with the best choosing score over all templates and configs (``SUGGESTED`` aside)."""
    rows = [(r.template, cfg, s) for r in results for cfg, s in r.chosen.items() if cfg != "SUGGESTED"]
    best = max((row for row in rows if row[2].choose is not None), key=lambda x: x[2].choose)  # type: ignore[arg-type,return-value]
    return {"template": best[0], "family": best[1], "spec": best[2].candidate.name, "choose": best[2].choose}


def write_json(path: Path, payload: Mapping[str, Any]) -> None:
    """Write ``payload`` to ``path`` through a temporary file, so a reader never sees half a study JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.replace(path)
