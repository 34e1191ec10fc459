"""Run a CoNLL-2003 NER sweep and write its table and plot (the command behind `nosink eval sweep`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nosink import EncoderFromDecoder

from .ner import NERConfig, Sentence, evaluate_ner
from .sweeps import Candidate, best, family_specs, plot_sweep, write_table

__all__ = ["ner_sweep"]

logger = logging.getLogger(__name__)


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
) -> list[Candidate]:
    """Evaluate every spec of ``configs`` with the NER probe; write ``ner_sweep.{json,csv,png}`` to ``out_dir``.

    Raises:
        ValueError: for an unknown configuration name.
    """
    config = config or NERConfig()
    depth = encoder.parts.depth
    candidates: list[Candidate] = []
    for name in ["BASELINE", *configs]:
        for c in family_specs(name, depth, ks, k0s):
            if str(c.spec) not in {str(x.spec) for x in candidates}:
                candidates.append(c)
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
