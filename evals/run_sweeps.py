"""Run a sweep (NER probe or an MTEB task) and write its table and plot (behind `nosink eval sweep`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nosink.models import EncoderFromDecoder
from nosink.models.texts import Template

from .ner import NERConfig, Sentence, evaluate_ner
from .sweeps import SweepPoint, best, config_specs, plot_sweep, write_table

__all__ = ["candidates_for", "mteb_sweep", "ner_sweep", "refine_suggestion"]

logger = logging.getLogger(__name__)


def candidates_for(
    configs: Sequence[str], depth: int, ks: Sequence[int] | None = None, k0s: Sequence[int] | None = None
) -> list[SweepPoint]:
    """BASELINE and every spec of ``configs``, each distinct spec once (the first config to name it keeps it).

    Raises:
        ValueError: for an unknown configuration name.
    """
    candidates: list[SweepPoint] = []
    seen: set[str] = set()
    for name in ["BASELINE", *configs]:
        for c in config_specs(name, depth, ks, k0s):
            if str(c.spec) not in seen:
                seen.add(str(c.spec))
                candidates.append(c)
    return candidates


def mteb_sweep(
    encoder: EncoderFromDecoder,
    task: str,
    configs: Sequence[str],
    out_dir: str | Path,
    data_dir: str | Path | None = None,
    ks: Sequence[int] | None = None,
    k0s: Sequence[int] | None = None,
    limit: int | None = None,
    meta: dict[str, Any] | None = None,
    template: Template | str | None = None,
) -> list[SweepPoint]:
    """Evaluate every spec of ``configs`` on one MTEB task (mteb computes the scores, every spec's texts
    encoded in one shared pass); write ``mteb_sweep.{json,csv,png}`` and mteb's own result files.

    With a ``template`` (a :class:`~nosink.models.texts.Template` or a preset's name), every spec encodes
    through it instead of the task instruction (see :func:`~nosink.evals.mteb_run.run_mteb`); the
    table's metadata records it.

    Raises:
        ValueError: for an unknown configuration name.
        RuntimeError: if the task was skipped (no data).
    """
    from .mteb_run import run_mteb

    candidates = candidates_for(configs, encoder.depth, ks, k0s)
    out_dir = Path(out_dir)
    start = time.perf_counter()
    specs = [c.spec for c in candidates]
    summary = run_mteb(encoder, [task], data_dir, out_dir / "mteb", limit, specs, template=template)
    entry = summary["tasks"][task]
    if entry["status"] != "ok":
        raise RuntimeError(f"{task} was skipped: {entry['reason']}")
    metric = entry["main_score"]
    for c in candidates:
        c.scores[metric] = entry["scores"][str(c.spec)]
    info = {
        "task": task,
        "main_score": metric,
        "source": entry["source"],
        "limit": limit,
        "note": summary["note"],
        "template": summary["template"],
        "depth": encoder.depth,
        "seconds": round(time.perf_counter() - start, 1),
        "best": {k: v.row() for k, v in best(candidates, metric).items()},
        **(meta or {}),
    }
    write_table(candidates, out_dir, "mteb_sweep", info)
    model = (meta or {}).get("model", "")
    plot_sweep(candidates, metric, out_dir / "mteb_sweep.png", title=f"{task} {metric}, {model}")
    return candidates


def ner_sweep(
    encoder: EncoderFromDecoder,
    train: Sequence[Sentence],
    evaluation: Sequence[Sentence],
    configs: Sequence[str],
    out_dir: str | Path,
    ks: Sequence[int] | None = None,
    k0s: Sequence[int] | None = None,
    config: NERConfig | None = None,
    meta: dict[str, Any] | None = None,
    show_progress_bar: bool = True,
) -> list[SweepPoint]:
    """Evaluate every spec of ``configs`` with the NER probe; write ``ner_sweep.{json,csv,png}`` to ``out_dir``.

    Raises:
        ValueError: for an unknown configuration name.
    """
    config = config or NERConfig()
    depth = encoder.depth
    candidates = candidates_for(configs, depth, ks, k0s)
    start = time.perf_counter()
    results = evaluate_ner(
        encoder, train, evaluation, [c.spec for c in candidates], config, show_progress_bar=show_progress_bar
    )
    seconds = time.perf_counter() - start
    by_spec = {r.spec: r for r in results}
    for c in candidates:
        r = by_spec[str(c.spec)]
        c.scores.update(f1=r.f1, precision=r.precision, recall=r.recall)
    info = {
        "task": "CoNLL-2003 NER, linear probe on frozen final-layer features (first sub-token per word)",
        "n_train": len(train),
        "n_eval": len(evaluation),
        "truncated_eval_words": results[0].truncated_words if results else 0,
        "probe": config.__dict__,
        "depth": depth,
        "seconds": round(seconds, 1),
        "best": {k: v.row() for k, v in best(candidates, "f1").items()},
        **(meta or {}),
    }
    out_dir = Path(out_dir)
    write_table(candidates, out_dir, "ner_sweep", info)
    plot_sweep(
        candidates,
        "f1",
        out_dir / "ner_sweep.png",
        title=f"NER F1 (CoNLL-2003 dev), {meta.get('model', '') if meta else ''}",
    )
    return candidates


def refine_suggestion(
    encoder: EncoderFromDecoder,
    suggestion: Any,
    train: Sequence[Sentence],
    evaluation: Sequence[Sentence],
    out_dir: str | Path,
    step: int = 2,
    config: NERConfig | None = None,
    show_progress_bar: bool = True,
) -> tuple[SweepPoint, list[SweepPoint]]:
    """Confirm or refine a suggested MASK0&BIDIR spec with the NER probe on its (k, k0) neighbours.

    A small search (at most 9 specs, sharing their lower layers) instead of a full grid; writes
    ``suggestion_search.{json,csv}``. Returns the best candidate and all of them.
    """
    from .sinks import neighbours

    config = config or NERConfig()
    specs = neighbours(suggestion, encoder.depth, step)
    results = evaluate_ner(encoder, train, evaluation, specs, config, show_progress_bar=show_progress_bar)
    candidates = []
    for spec, r in zip(specs, results, strict=True):
        k0 = sum(seg.count or 0 for seg in spec.segments if seg.kind.sink is not None)
        k = sum(seg.count or 0 for seg in spec.segments if not seg.kind.is_causal)
        candidates.append(SweepPoint("MASK0&BIDIR", k, spec, k0, {"f1": r.f1}))
    chosen = max(candidates, key=lambda c: c.scores["f1"])
    info = {"suggested": str(suggestion.spec), "reason": suggestion.reason, "best": chosen.row(),
            "n_train": len(train), "n_eval": len(evaluation)}  # fmt: skip
    write_table(candidates, out_dir, "suggestion_search", info)
    return chosen, candidates
