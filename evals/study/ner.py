"""The study on NER: linear probes of every candidate, several seeds, dev cut in a choosing and a reporting half."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nosink.evals import stats
from nosink.models import EncoderFromDecoder

from .candidates import Candidate, choose_by_config, converted_configs
from .compare import config_pairs, curve_comparisons

__all__ = ["NER_SPLIT_SEED", "NERStudy", "mean_over_seeds", "ner_payload", "ner_study"]

logger = logging.getLogger(__name__)

NER_SPLIT_SEED = 0
"""The seed of the cut of the NER dev sentences into halves (choose on one, report on the other): the one cut that
:func:`ner_study` reports on and :func:`ner_selection_for` chooses on."""


def mean_over_seeds(statistics: Sequence[stats.Statistic]) -> stats.Statistic:
    """The mean of several statistics of the same units (probe seeds), resampled together.

    Raises:
        ValueError: if there are none, or they are not over the same number of units.
    """
    if not statistics or len({s.n for s in statistics}) != 1:
        raise ValueError("need one or more statistics over the same units")
    return stats.Statistic(
        statistics[0].name,
        statistics[0].n,
        lambda idx: np.mean([s.values(idx) for s in statistics], axis=0),
    )


@dataclass
class NERStudy:
    """The NER probe over a grid: per candidate, the mean F1 of its seeds on each half of the dev set.

    Attributes:
        choose: candidate -> mean F1 over seeds on the choosing half.
        report: candidate -> the seeds' mean F1 on the reporting half, as a statistic of its sentences.
        per_seed: candidate -> each seed's F1 on the reporting half.
        seconds: feature extraction and probe training time.
    """

    choose: dict[Candidate, float]
    report: dict[Candidate, stats.Statistic]
    per_seed: dict[Candidate, list[float]]
    seconds: float


def ner_study(
    encoder: Any,
    train: Sequence[Any],
    dev: Sequence[Any],
    candidates: Sequence[Candidate],
    seeds: Sequence[int] = (0, 1, 2),
    split_seed: int | None = NER_SPLIT_SEED,
    config: Any = None,
    show_progress_bar: bool = False,
) -> NERStudy:
    """Score every candidate's linear NER probe, each trained with every seed, on both halves of ``dev``.

    Features are extracted once for all candidates (shared layers run once); each seed's probe is
    trained on ``train`` and tags all of ``dev``, which :func:`stats.halves` cuts into the choosing and
    the reporting half (the same cut for every candidate).

    Args:
        encoder: a converted decoder, or an ``evals.baselines.TokenFeatures`` (a trained encoder, which has
            no specs: pass ``[Candidate("F*", "F*")]``, a name it passes through).
        train: training sentences (:class:`nosink.evals.ner.Sentence`).
        dev: evaluation sentences, cut in halves.
        candidates: the specs (with exits) to probe.
        seeds: probe seeds (initialisation and batch order).
        split_seed: the seed of the halves; ``None``: no cut, both "halves" are all of ``dev`` (for
            :func:`ner_selection_for`, which is given the choosing half alone).
        config: a :class:`nosink.evals.ner.NERConfig` (its seed is replaced by each of ``seeds``).
        show_progress_bar: a bar for the feature extraction of each set.
    """
    from dataclasses import replace

    import torch

    from nosink.evals.ner import NERConfig, train_probe, word_features

    config = config or NERConfig()
    start = time.perf_counter()
    tags = sorted({t for s in train for t in s.tags})
    index = {t: i for i, t in enumerate(tags)}
    runs = [c.plan(encoder) if isinstance(encoder, EncoderFromDecoder) else c.name for c in candidates]
    train_feats, train_kept = word_features(encoder, train, runs, config, show_progress_bar=show_progress_bar)
    dev_feats, dev_kept = word_features(encoder, dev, runs, config, show_progress_bar=show_progress_bar)
    labels = [
        [index[t] for t, k in zip(s.tags, kept, strict=True) if k] for s, kept in zip(train, train_kept, strict=True)
    ]
    every = list(range(len(dev)))
    first, second = (every, every) if split_seed is None else stats.halves(every, seed=split_seed)
    gold = [list(s.tags) for s in dev]
    out = NERStudy({}, {}, {}, 0.0)
    for c, run in zip(candidates, runs, strict=True):
        name = run if isinstance(run, str) else run.name  # a plan's name carries the encoder's prepend
        halves_stats: tuple[list[stats.Statistic], list[stats.Statistic]] = ([], [])
        for seed in seeds:
            probe = train_probe(train_feats[name], labels, len(tags), replace(config, seed=seed))
            predicted = []
            with torch.no_grad():
                for feats, kept in zip(dev_feats[name], dev_kept, strict=True):
                    guesses = iter(probe(feats.float()).argmax(-1).tolist() if len(feats) else [])
                    predicted.append([tags[next(guesses)] if k else "O" for k in kept])
            for half, rows in zip(halves_stats, (first, second), strict=True):
                half.append(stats.ner_f1([gold[i] for i in rows], [predicted[i] for i in rows]))
        out.choose[c] = float(np.mean([s() for s in halves_stats[0]]))
        out.report[c] = mean_over_seeds(halves_stats[1])
        out.per_seed[c] = [s() for s in halves_stats[1]]
        logger.info("NER %s: choose %.4f, report %.4f", c.name, out.choose[c], out.report[c]())
    out.seconds = time.perf_counter() - start
    return out


def ner_payload(result: NERStudy, candidates: Sequence[Candidate], meta: Mapping[str, Any]) -> dict[str, Any]:
    """A NER study as the JSON the study writes (``ner.json``): every candidate's row, each config's choice on the
    choosing half, and the paired comparisons on the reporting half (:func:`config_pairs`, the suggestion
    against the best converted config, and with ``meta["depth"]`` :func:`curve_comparisons`)."""
    rows = []
    for c in candidates:
        ci = stats.bootstrap_ci(result.report[c])
        rows.append(c.row() | {
            "choose": result.choose[c], "report": ci.estimate, "low": ci.low, "high": ci.high,
            "per_seed": result.per_seed[c], "n_report": result.report[c].n,
        })  # fmt: skip
    full = {c: result.choose[c] for c in candidates if c.exit_layer is None}
    chosen = choose_by_config(full)
    out: dict[str, Any] = {"task": "CoNLL-2003 NER", "metric": "entity F1 (mean of seeds)", **meta, "rows": rows}
    out["chosen"] = {f: c.name for f, c in chosen.items()}
    converted = converted_configs(chosen)
    pairs = [(kind, chosen[a], chosen[b]) for kind, a, b in config_pairs(chosen)]
    if "SUGGESTED" in chosen and converted:
        pairs.append(
            ("suggested vs best swept", chosen["SUGGESTED"], chosen[max(converted, key=lambda f: full[chosen[f]])])
        )
    if meta.get("depth"):
        pairs += curve_comparisons(full, chosen, meta["depth"])
    cmps = []
    for kind, a, b in pairs:
        cmp = stats.compare(result.report[a], result.report[b])
        cmps.append({
            "comparison": kind, "a": a.name, "b": b.name, "delta": cmp.delta.estimate,
            "low": cmp.delta.low, "high": cmp.delta.high, "p_value": cmp.p_value,
        })  # fmt: skip
    out["comparisons"] = cmps
    out["seconds"] = round(result.seconds, 1)
    return out
