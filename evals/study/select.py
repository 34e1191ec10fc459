"""The suggestion beside the grid: :func:`~nosink.evals.sinks.suggest_spec`'s spec, or the selection stage's.

The selection stage scores the sink profile's candidate specs on a small sample of the choosing split
(``--select N``) and reports the best as the suggestion; NER probes them on the choosing half of dev.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from nosink.evals import stats
from nosink.models import EncoderFromDecoder

from .candidates import Candidate
from .ner import NER_SPLIT_SEED, ner_study
from .tasks import ClassificationTask, STSTask, Task

__all__ = ["ner_selection_for", "selection_for", "selection_sample", "suggestion_for"]


def suggestion_for(encoder: EncoderFromDecoder, texts: Sequence[str]) -> tuple[Candidate, dict[str, Any]]:
    """:func:`nosink.evals.sinks.suggest_spec` on the stock model's sink profile over ``texts``.

    Raises:
        ValueError: if ``encoder``'s own spec is not ``F*`` (the profile is the unconverted model's).
    """
    from nosink.evals.sinks import sink_profile, suggest_spec

    if str(encoder.spec) != "F*":
        raise ValueError(
            f"the suggestion reads the stock model's sink profile: load the encoder with 'F*', not {encoder.spec}"
        )
    s = suggest_spec(sink_profile(encoder, texts), encoder.depth)
    return Candidate("SUGGESTED", str(s.spec)), {"spec": str(s.spec), "k": s.k, "k0": s.k0, "reason": s.reason}


def selection_sample(task: Task, n: int, seed: int = 0) -> Task:
    """A small sample of ``task``'s choosing split, for :func:`selection_for`.

    STS: ``n`` of the choosing pairs (seeded); classification: ``n`` of the training items (seeded,
    label-stratified), with the task's validation holdout inside them. The reporting split is kept.

    Raises:
        ValueError: for ``n`` under 2, or a task of another kind.
    """
    from dataclasses import replace

    from nosink.evals.classify import Example, subsample

    if n < 2:
        raise ValueError(f"the selection sample needs at least 2 items, got {n}")
    if isinstance(task, STSTask):
        pairs = list(task.choose)
        return replace(task, choose=pairs if n >= len(pairs) else random.Random(seed).sample(pairs, n))
    if isinstance(task, ClassificationTask):
        items = subsample([Example(t, y) for t, y in task.train], n, seed)
        return replace(task, train=[(e.text, e.label) for e in items])
    raise ValueError(f"no selection sample for a {type(task).__name__}: STSTask or ClassificationTask")


def selection_for(
    encoder: EncoderFromDecoder, profile: Sequence[Any], task: Task, n: int, seed: int = 0, batch_size: int = 32
) -> tuple[Candidate, dict[str, Any]]:
    """:func:`nosink.evals.sinks.select_spec` among :func:`~nosink.evals.sinks.candidate_specs` of ``profile``,
    scored by ``task``'s choosing score on :func:`selection_sample` ``(task, n, seed)``.

    Returns:
        The selected spec as a ``SUGGESTED`` candidate, and what to record: the candidates with their
        scores, the sample, and the cost (texts encoded, and times the candidates).
    """
    from nosink.evals.sinks import candidate_specs, select_spec

    candidates = candidate_specs(profile, encoder.depth)
    small = selection_sample(task, n, seed)
    chosen = select_spec(
        encoder, candidates, small.texts("choose"), small.choose_score, instruction=task.instruction,
        batch_size=batch_size,
    )  # fmt: skip
    why = {
        "method": "select_spec among candidate_specs, scored on a sample of the choosing split",
        "spec": str(chosen.spec), "sample": n, "sample_seed": seed,
        "candidates": [{"spec": str(c.spec), "k": c.k, "k0": c.k0, "reason": c.reason,
                        "score": chosen.scores[str(c.spec)]} for c in candidates],
        "texts_encoded": chosen.texts_encoded, "text_spec_encodings": chosen.cost,
        "seconds": round(chosen.seconds, 1),
    }  # fmt: skip
    return Candidate("SUGGESTED", str(chosen.spec)), why


def ner_selection_for(
    encoder: EncoderFromDecoder,
    profile: Sequence[Any],
    train: Sequence[Any],
    dev: Sequence[Any],
    n: int,
    seed: int = 0,
    split_seed: int = NER_SPLIT_SEED,
    show_progress_bar: bool = False,
) -> tuple[Candidate, dict[str, Any]]:
    """The selection stage on NER: :func:`~nosink.evals.sinks.candidate_specs` of ``profile``, each probed on a
    seeded sample of ``n`` of the study's training sentences and scored on the choosing half of ``dev``.

    The choosing half is :func:`ner_study`'s (:func:`stats.halves` with ``split_seed``), so no reporting
    sentence is read. Each candidate's probe is trained once, with ``seed``; the best entity F1 on the
    whole choosing half wins, the earliest candidate (the midpoint rule's) on a tie.

    Args:
        encoder: the decoder (its own spec does not matter).
        profile: the stock model's sink profile (:func:`~nosink.evals.sinks.sink_profile` under ``F*``).
        train: the study's training sentences (:class:`nosink.evals.ner.Sentence`).
        dev: the study's dev sentences, all of them: the choosing half is cut here.
        n: training sentences in the sample (all of ``train`` if it has no more).
        seed: the sample's seed and the probe's.
        split_seed: the seed of the dev halves; keep :data:`NER_SPLIT_SEED`, the study's cut.
        show_progress_bar: a bar for the feature extraction of each set.

    Returns:
        The selected spec as a ``SUGGESTED`` candidate, and what to record: the candidates with their
        scores, the sample, and the cost (sentences encoded, and times the candidates).

    Raises:
        ValueError: for ``n`` under 2, or no training or dev sentences.
    """
    from nosink.evals.sinks import candidate_specs

    if n < 2:
        raise ValueError(f"the selection sample needs at least 2 training sentences, got {n}")
    if not train or not dev:
        raise ValueError(f"the NER selection stage needs training and dev sentences, got {len(train)} and {len(dev)}")
    suggestions = candidate_specs(profile, encoder.depth)
    candidates = [Candidate("SUGGESTED", str(s.spec)) for s in suggestions]
    sample = list(train) if n >= len(train) else random.Random(seed).sample(list(train), n)
    choose_half, _ = stats.halves(list(dev), seed=split_seed)
    result = ner_study(
        encoder, sample, choose_half, candidates, seeds=(seed,), split_seed=None, show_progress_bar=show_progress_bar
    )
    best = max(candidates, key=lambda c: result.choose[c])  # the first of equal scores
    sentences = len(sample) + len(choose_half)
    why = {
        "method": "select_spec's rule on NER: candidate_specs probed on a sample of the training sentences, "
        "scored on the choosing half of dev",
        "spec": best.spec, "sample": len(sample), "sample_seed": seed, "choose_sentences": len(choose_half),
        "probe_seeds": [seed],
        "candidates": [{"spec": c.spec, "k": s.k, "k0": s.k0, "reason": s.reason, "score": result.choose[c]}
                       for c, s in zip(candidates, suggestions, strict=True)],
        "texts_encoded": sentences, "text_spec_encodings": sentences * len(candidates),
        "seconds": round(result.seconds, 1),
    }  # fmt: skip
    return best, why
