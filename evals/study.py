"""The study of layer specs x prompt templates x early exits, chosen on one split and reported on another.

For one model and one task the study runs, for each template (mean pooling with the task's instruction,
or a published prompt template of :mod:`nosink.models.templates`):

1. **choose**: every candidate of the grid (``F*``, INPLACE-BIDIR ``F* | B*k``, MASK0&BIDIR
   ``F* | B*(k-k0) | M0B*k0`` by default; any of :data:`GRID_CONFIGS`) is scored on the choosing split, all
   specs in one pass per batch (their shared lower layers run once); each config keeps its best spec there;
2. **report**: the kept specs (with ``report_grid``, every spec of the grid), the suggestion of
   :func:`nosink.evals.sinks.suggest_spec`, and early exits (``F*`` and the best config's spec cut after
   layer m) are scored on the reporting split, as
   :class:`~nosink.evals.stats.Statistic` values, so every reported number gets a bootstrap interval
   and any two of them a paired comparison.

Tasks: sentence similarity (:class:`STSTask`, Spearman of cosine similarities, pairs as units: STS-B,
and STS17 reported with specs chosen on STS-B dev), classification (:class:`ClassificationTask`, logistic
regression on frozen embeddings, items as units: Banking77, Emotion, MASSIVE intent) and retrieval
(:class:`RetrievalTask`, nDCG@10 by mteb's own metric code, queries as units: NFCorpus, SciFact);
token-level NER goes through :func:`ner_study` (linear probes, several seeds, CoNLL dev in halves).

>>> [c.name for c in grid(8, ks=[4], k0s=[1, 2])]
['F*', 'F* | B*4', 'F* | B*3 | M0B', 'F* | B*2 | M0B*2']
>>> choose_by_config({Candidate("F*", "F*"): 0.3, Candidate("INPLACE-BIDIR", "F* | B*4"): 0.5})["INPLACE-BIDIR"].name
'F* | B*4'
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from nosink.checks import count_arg, printable
from nosink.evals import stats
from nosink.layerspec import Kind, Plan, SpecError, as_spec, presets
from nosink.models import EncoderFromDecoder

__all__ = [
    "EXIT_CONFIGS",
    "CONFIG_COMPARISONS",
    "GRID_CONFIGS",
    "NER_SPLIT_SEED",
    "NO_TEMPLATE",
    "Candidate",
    "ClassificationTask",
    "EmbeddingCache",
    "NERStudy",
    "RetrievalTask",
    "STSTask",
    "Scored",
    "Task",
    "TemplateResult",
    "add_arguments",
    "choose_by_config",
    "comparisons",
    "comparisons_table",
    "converted_layers",
    "curve_comparisons",
    "curves_table",
    "effect",
    "exit_candidates",
    "exit_configs_of",
    "config_pairs",
    "exits_table",
    "grid",
    "interplay",
    "interplay_counts_table",
    "interplay_table",
    "mean_over_seeds",
    "ner_selection_for",
    "ner_study",
    "ner_table",
    "overall_choice",
    "plot_curves",
    "plot_exits",
    "plot_interplay",
    "plot_study",
    "results_table",
    "run",
    "run_template",
    "selection_for",
    "selection_sample",
    "selection_table",
    "study_task",
    "template_row",
]

logger = logging.getLogger(__name__)

NO_TEMPLATE = "instruction"
"""The name of the configuration without a template: mean pooling over the text, the task's instruction before it."""

NER_SPLIT_SEED = 0
"""The seed of the cut of the NER dev sentences into halves (choose on one, report on the other): the one cut that
:func:`ner_study` reports on and :func:`ner_selection_for` chooses on."""

DEFAULT_CONFIGS = ("F*", "INPLACE-BIDIR", "MASK0&BIDIR")
"""The configs of the default grid, in the order tables show them."""

GRID_CONFIGS = ("INPLACE-BIDIR", "INPLACE-BACK", "MASK0-FOR", "MASK0-BIDIR", "MASK0-ALL", "MASK0&BIDIR")
"""The paper's configs :func:`grid` can sweep beside ``F*`` (their presets in :mod:`nosink.layerspec.presets`):
the top k layers bidirectional, backward, forward without the sink, bidirectional without the sink; every
layer bidirectional without the sink (one spec, ``M0B*``); and ``F* | B*(k-k0) | M0B*k0``."""


@dataclass(frozen=True)
class Candidate:
    """One spec of the study, possibly cut after an exit layer.

    Attributes:
        config: ``F*``, one of :data:`GRID_CONFIGS`, or ``SUGGESTED``.
        spec: the canonical spec string.
        exit_layer: the decoder cut after this many layers, or ``None`` for all of them.
    """

    config: str
    spec: str
    exit_layer: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", str(as_spec(self.spec)))

    @property
    def name(self) -> str:
        """The name :meth:`EncoderFromDecoder.encode_specs` gives its plan (``Plan.name``)."""
        return self.spec if self.exit_layer is None else f"{self.spec} @ exit {self.exit_layer}"

    def plan(self, encoder: EncoderFromDecoder) -> Plan:
        """This candidate compiled for ``encoder`` (``exit_layer`` ``None``: the encoder's own exit, all layers
        for an encoder loaded without one)."""
        return encoder.plan_for(self.spec, exit_layer=self.exit_layer)

    def row(self) -> dict[str, Any]:
        """A flat dict for JSON."""
        # "family": the key of the committed results (docs/results/study), which tables and tests read back
        return {"family": self.config, "spec": self.spec, "exit_layer": self.exit_layer, "name": self.name}


def grid(
    depth: int,
    ks: Sequence[int] | None = None,
    k0s: Sequence[int] = (1, 2, 4),
    configs: Sequence[str] = DEFAULT_CONFIGS[1:],
) -> list[Candidate]:
    """The study's grid: ``F*``, then each config of ``configs`` at each k (MASK0&BIDIR at each k0 < k).

    Args:
        depth: the decoder's number of layers.
        ks: the numbers of converted layers; by default a quarter, half and two thirds of the depth.
        k0s: the numbers of top layers that also hide the sink (MASK0&BIDIR).
        configs: some of :data:`GRID_CONFIGS`, in the order the grid lists them; MASK0-ALL takes no k
            (one spec, ``M0B*``).

    Raises:
        ValueError: for a k outside 1..depth, a k0 below 1, or a config not in :data:`GRID_CONFIGS`.

    >>> [c.name for c in grid(8, ks=[2], configs=["INPLACE-BACK", "MASK0-BIDIR", "MASK0-ALL"])]
    ['F*', 'F* | R*2', 'F* | M0B*2', 'M0B*']
    """
    ks = sorted({max(1, depth // 4), max(1, depth // 2), max(1, 2 * depth // 3)}) if ks is None else list(ks)
    if any(not 1 <= k <= depth for k in ks) or any(k0 < 1 for k0 in k0s):
        raise ValueError(f"need 1 <= k <= {depth} and k0 >= 1, got ks={ks}, k0s={list(k0s)}")
    unknown = [f for f in configs if f not in GRID_CONFIGS]
    if unknown:
        raise ValueError(f"unknown configs {unknown}; expected some of {list(GRID_CONFIGS)}")
    out = [Candidate("F*", "F*")]
    for config in dict.fromkeys(configs):
        if config == "MASK0-ALL":
            out.append(Candidate(config, str(presets.mask0_all())))
        elif config == "MASK0&BIDIR":
            out += [Candidate(config, str(presets.mask0_and_bidir(k, k0))) for k in ks for k0 in k0s if k0 < k]
        else:
            out += [Candidate(config, str(presets.by_name(config, k=k))) for k in ks]
    return out


def converted_layers(spec: str, depth: int) -> int:
    """How many layer runs of ``spec`` on ``depth`` layers use a mask other than plain forward: the paper's k
    (for INTER and EXTRA the layers of the converted stream, for EXTEND the layers added on top).

    >>> converted_layers("F* | B*3 | M0B*2", 8), converted_layers("M0B*", 8), converted_layers("F* | INTER(B*2)", 8)
    (5, 8, 2)
    """
    return sum(step.kind != Kind("F") for step in as_spec(spec).resolve(depth).layer_steps)


def exit_candidates(candidate: Candidate, depth: int, exits: Sequence[int]) -> list[Candidate]:
    """``candidate`` cut after each layer of ``exits`` below ``depth`` where its spec fits the cut decoder.

    The spec is resolved against the first m layers (``F* | B*8`` at exit 20 converts layers 12-19),
    so a converted spec at an exit runs its converted layers again above the shared forward ones.
    """
    out = []
    for m in sorted(set(exits)):
        if not 1 <= m < depth:
            continue
        try:
            as_spec(candidate.spec).resolve(depth, exit_layer=m)
        except SpecError:
            continue
        out.append(Candidate(candidate.config, candidate.spec, m))
    return out


def choose_by_config(scores: Mapping[Candidate, float], full_depth_only: bool = True) -> dict[str, Candidate]:
    """Each config's best candidate by ``scores`` (the first of equal scores, in the mapping's order).

    Args:
        scores: candidate -> score on the choosing split.
        full_depth_only: leave early-exit candidates out (they are chosen separately).
    """
    best: dict[str, Candidate] = {}
    for candidate, score in scores.items():
        if full_depth_only and candidate.exit_layer is not None:
            continue
        if candidate.config not in best or score > scores[best[candidate.config]]:
            best[candidate.config] = candidate
    return best


# ---------------------------------------------------------------------------------------- embeddings


class EmbeddingCache:
    """Sentence embeddings of one encoder under one template and instruction, per candidate and text.

    :meth:`vectors` encodes only the texts a candidate has not seen yet, with every candidate that
    lacks any of them in one :meth:`~EncoderFromDecoder.encode_specs` pass (shared layers run once).
    Embeddings are kept unnormalised; :attr:`seconds` and :attr:`texts_encoded` add up the work done;
    ``show_progress_bar`` shows a bar for each pass of more than 8 batches.
    ``instruction`` is one instruction for every text, or a function giving each text its own (retrieval:
    queries get the task's, documents none); a template takes none.
    """

    def __init__(
        self,
        encoder: EncoderFromDecoder,
        template: str | None = None,
        instruction: str | Callable[[str], str | None] | None = None,
        batch_size: int = 32,
        max_length: int = 512,
        show_progress_bar: bool = False,
    ) -> None:
        self.encoder, self.template, self.instruction = encoder, template, instruction
        self.batch_size, self.max_length, self.show_progress_bar = batch_size, max_length, show_progress_bar
        self._store: dict[str, dict[str, np.ndarray]] = {}
        self.seconds = 0.0
        self.texts_encoded = 0

    def vectors(self, candidates: Sequence[Candidate], texts: Sequence[str]) -> dict[str, np.ndarray]:
        """``{candidate name: (len(texts), D) array}`` in the order of ``texts``."""
        unique = list(dict.fromkeys(texts))
        missing = {c.name: [t for t in unique if t not in self._store.get(c.name, {})] for c in candidates}
        todo = [c for c in candidates if missing[c.name]]
        if todo:
            union = list(dict.fromkeys(t for c in todo for t in missing[c.name]))
            groups: dict[str | None, list[str]] = {}
            for t in union:
                groups.setdefault(self._instruction(t), []).append(t)
            start = time.perf_counter()
            for instruction, group in groups.items():  # one pass per instruction (retrieval: queries, documents)
                part = self.encoder.encode_specs(
                    [c.plan(self.encoder) for c in todo],
                    group,
                    instruction,
                    template=self.template,
                    batch_size=self.batch_size,
                    max_length=self.max_length,
                    show_progress_bar=None if self.show_progress_bar else False,
                )
                for c in todo:
                    self._store.setdefault(c.name, {}).update(zip(group, part[c.name], strict=True))
            took = time.perf_counter() - start
            self.seconds += took
            self.texts_encoded += len(union)
            logger.info(
                "%s: %d texts x %d specs in %.1f s (%.1f texts/s)",
                self.template or NO_TEMPLATE, len(union), len(todo), took, len(union) / max(took, 1e-9),
            )  # fmt: skip
        return {c.name: np.stack([self._store[c.name][t] for t in texts]) for c in candidates}

    def _instruction(self, text: str) -> str | None:
        if self.template is not None:
            return None
        return self.instruction(text) if callable(self.instruction) else self.instruction


# ---------------------------------------------------------------------------------------- tasks


class Task(Protocol):
    """A task the study scores: what to embed on each split and how to score the embeddings.

    ``instruction`` goes before every text (mean pooling without a template), or is a function giving
    each text its own (:class:`RetrievalTask`: queries get the task's instruction, documents none).
    """

    name: str
    metric: str

    @property
    def instruction(self) -> str | Callable[[str], str | None] | None:
        """The instruction before every text, or a function text -> its instruction."""
        ...

    def texts(self, split: str) -> list[str]:
        """The texts to embed for ``split`` (``"choose"`` or ``"report"``)."""
        ...

    def choose_score(self, vectors: Callable[[Sequence[str]], np.ndarray]) -> float:
        """The score on the choosing split; ``vectors(texts)`` embeds texts with the candidate under test."""
        ...

    def report_statistic(self, vectors: Callable[[Sequence[str]], np.ndarray]) -> stats.Statistic:
        """The score on the reporting split, as a statistic of its units (for intervals and comparisons)."""
        ...


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.divide((a * b).sum(axis=1), norm, out=np.zeros(len(a)), where=norm > 0)


@dataclass(frozen=True)
class STSTask:
    """Sentence similarity: Spearman correlation of cosine similarities with gold scores, pairs as units.

    Attributes:
        choose: ``(sentence1, sentence2, score)`` pairs to choose on (STS-B dev, say).
        report: pairs to report on (STS-B test).
    """

    name: str
    choose: Sequence[tuple[str, str, float]]
    report: Sequence[tuple[str, str, float]]
    instruction: str | None = None
    metric: str = "spearman"

    def texts(self, split: str) -> list[str]:
        """Both sentences of every pair of ``split``."""
        pairs = self.choose if split == "choose" else self.report
        return list(dict.fromkeys(t for a, b, _ in pairs for t in (a, b)))

    def _statistic(self, pairs: Sequence[tuple[str, str, float]], vectors: Callable) -> stats.Statistic:
        a, b = vectors([p[0] for p in pairs]), vectors([p[1] for p in pairs])
        return stats.spearman(_cosines(a, b), [p[2] for p in pairs])

    def choose_score(self, vectors: Callable[[Sequence[str]], np.ndarray]) -> float:
        """Spearman on the choosing pairs."""
        return self._statistic(self.choose, vectors)()

    def report_statistic(self, vectors: Callable[[Sequence[str]], np.ndarray]) -> stats.Statistic:
        """Spearman on the reporting pairs, pairs as units."""
        return self._statistic(self.report, vectors)


@dataclass(frozen=True)
class ClassificationTask:
    """Logistic regression on frozen embeddings, accuracy with items as units.

    Choosing fits on ``train`` less a seeded stratified validation split (:func:`stats.holdout`) and
    scores that split, or, for a task with its own ``validation`` split (MASSIVE), fits on all of
    ``train`` and scores ``validation``; reporting refits on all of ``train`` and scores ``test``.

    Attributes:
        train: ``(text, label)`` training items (a subsample, typically).
        test: ``(text, label)`` items to report on.
        validation: ``(text, label)`` items to choose on; ``None``: a holdout of ``train``.
    """

    name: str
    train: Sequence[tuple[str, str]]
    test: Sequence[tuple[str, str]]
    instruction: str | None = None
    validation_fraction: float = 0.2
    seed: int = 0
    max_iter: int = 100
    metric: str = "accuracy"
    validation: Sequence[tuple[str, str]] | None = None
    _split: tuple[list[tuple[str, str]], list[tuple[str, str]]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.validation is not None:
            split = (list(self.train), list(self.validation))
        else:
            split = stats.holdout(list(self.train), [y for _, y in self.train], self.validation_fraction, self.seed)
            if not split[1]:
                most = max(Counter(y for _, y in self.train).values(), default=0)
                raise ValueError(
                    f"{self.name}: the validation holdout ({self.validation_fraction:g} of each label's training "
                    f"items, rounded) is empty: {len(self.train)} training items, at most {most} of one label; "
                    "pass more training items (--cls-train) or a validation split"
                )
        object.__setattr__(self, "_split", split)

    def texts(self, split: str) -> list[str]:
        """The training texts (both splits need them), the validation texts for choosing, the test texts for
        reporting."""
        other = self.test if split == "report" else (self.validation or [])
        return list(dict.fromkeys(t for t, _ in [*self.train, *other]))

    def _predict(self, vectors: Callable, fit: Sequence[tuple[str, str]], score: Sequence[tuple[str, str]]) -> Any:
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression(solver="lbfgs", max_iter=self.max_iter, random_state=self.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # 100 iterations is MTEB's protocol
            model.fit(vectors([t for t, _ in fit]), [y for _, y in fit])
        return model.predict(vectors([t for t, _ in score]))

    def choose_score(self, vectors: Callable[[Sequence[str]], np.ndarray]) -> float:
        """Accuracy on the held-out validation split of the training items."""
        rest, validation = self._split
        return stats.accuracy([y for _, y in validation], self._predict(vectors, rest, validation))()

    def report_statistic(self, vectors: Callable[[Sequence[str]], np.ndarray]) -> stats.Statistic:
        """Test accuracy of a classifier fitted on all training items, items as units."""
        return stats.accuracy([y for _, y in self.test], self._predict(vectors, self.train, self.test))


@dataclass(frozen=True)
class RetrievalTask:
    """Retrieval: cosine top-k of the queries over a corpus, nDCG@10 by mteb's own metric code, queries as units.

    Queries get ``query_instruction`` (mean pooling without a template), documents none, as in the
    paper's MTEB protocol. Each query's ranking (its ``top_k`` best documents) goes through mteb's
    ``calculate_retrieval_scores`` (pytrec_eval), whose per-query nDCG@10 values the bootstrap resamples.

    Attributes:
        choose: ``(query id, text)`` queries to choose on.
        report: ``(query id, text)`` queries to report on.
        corpus: ``(document id, text)`` documents, searched by both query sets.
        relevant: query id -> {document id: relevance}; every query needs an entry.
    """

    name: str
    choose: Sequence[tuple[str, str]]
    report: Sequence[tuple[str, str]]
    corpus: Sequence[tuple[str, str]]
    relevant: Mapping[str, Mapping[str, int]]
    query_instruction: str | None = None
    top_k: int = 100
    metric: str = "ndcg@10"

    def __post_init__(self) -> None:
        unjudged = [q for q, _ in [*self.choose, *self.report] if q not in self.relevant]
        if unjudged:
            raise ValueError(f"{self.name}: queries without relevance judgements: {unjudged[:5]}")
        if not self.corpus:
            raise ValueError(f"{self.name}: the corpus is empty")

    @property
    def instruction(self) -> Callable[[str], str | None]:
        """Text -> its instruction: ``query_instruction`` for a query text, none for a document."""
        queries = frozenset(t for _, t in [*self.choose, *self.report])
        return lambda text: self.query_instruction if text in queries else None

    def texts(self, split: str) -> list[str]:
        """The split's queries and the corpus."""
        queries = self.choose if split == "choose" else self.report
        return list(dict.fromkeys([*(t for _, t in queries), *(t for _, t in self.corpus)]))

    def per_query(self, queries: Sequence[tuple[str, str]], vectors: Callable) -> np.ndarray:
        """Each query's nDCG@10 (mteb's ``calculate_retrieval_scores``), in the order of ``queries``."""
        from mteb._evaluators.retrieval_metrics import calculate_retrieval_scores

        def unit(x: np.ndarray) -> np.ndarray:
            norm = np.linalg.norm(x, axis=1, keepdims=True)
            return np.divide(x, norm, out=np.zeros_like(x, dtype=float), where=norm > 0)

        q = unit(np.asarray(vectors([t for _, t in queries]), dtype=float))
        d = unit(np.asarray(vectors([t for _, t in self.corpus]), dtype=float))
        sims = q @ d.T
        k = min(self.top_k, len(self.corpus))
        results = {}
        for (qid, _), row in zip(queries, sims, strict=True):
            top = np.argsort(-row, kind="stable")[:k]
            results[qid] = {self.corpus[j][0]: float(row[j]) for j in top}
        qrels = {qid: {doc: int(r) for doc, r in self.relevant[qid].items()} for qid, _ in queries}
        scores = calculate_retrieval_scores(results, qrels, [10]).all_scores
        return np.array([scores[qid]["ndcg_cut_10"] for qid, _ in queries])

    def _statistic(self, queries: Sequence[tuple[str, str]], vectors: Callable) -> stats.Statistic:
        values = self.per_query(queries, vectors)
        return stats.Statistic("ndcg_at_10", len(values), lambda idx: values[idx].mean(axis=1))

    def choose_score(self, vectors: Callable[[Sequence[str]], np.ndarray]) -> float:
        """Mean nDCG@10 over the choosing queries."""
        return self._statistic(self.choose, vectors)()

    def report_statistic(self, vectors: Callable[[Sequence[str]], np.ndarray]) -> stats.Statistic:
        """Mean nDCG@10 over the reporting queries, queries as units."""
        return self._statistic(self.report, vectors)


# ---------------------------------------------------------------------------------------- one template


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


EXIT_CONFIGS = ("F*", "best", *GRID_CONFIGS)
"""What ``exit_configs`` may name: a config of the grid, or ``"best"`` (see :func:`exit_configs_of`)."""


def _converted(configs: Iterable[str]) -> list[str]:
    """The converted configs among ``configs`` (not ``F*``, not the suggestion), in order."""
    return [f for f in configs if f not in ("F*", "SUGGESTED")]


def exit_configs_of(
    configs: Sequence[str], chosen: Mapping[str, Candidate], choose_scores: Mapping[Candidate, float]
) -> list[str]:
    """The configs whose chosen spec is tried at the exits: ``configs`` with ``"best"`` resolved, in order.

    ``"best"`` is the converted config (any but ``F*`` and ``SUGGESTED``) whose chosen spec scores best on the
    choosing split; a config not in ``chosen`` is left out.

    Raises:
        ValueError: for a config not in :data:`EXIT_CONFIGS`.
    """
    unknown = [f for f in configs if f not in EXIT_CONFIGS]
    if unknown:
        raise ValueError(f"unknown exit configs {unknown}; expected some of {list(EXIT_CONFIGS)}")
    converted = _converted(chosen)
    best = max(converted, key=lambda f: choose_scores[chosen[f]]) if converted else None
    resolved = (best if f == "best" else f for f in configs)
    return [f for f in dict.fromkeys(resolved) if f is not None and f in chosen]


def run_template(
    encoder: EncoderFromDecoder,
    task: Task,
    candidates: Sequence[Candidate],
    template: str | None = None,
    suggestion: Candidate | None = None,
    exits: Sequence[int] = (),
    exit_configs: Sequence[str] = ("F*",),
    batch_size: int = 32,
    restrict: Mapping[str, Candidate] | None = None,
    report_grid: bool = False,
    show_progress_bar: bool = False,
) -> TemplateResult:
    """Choose each config's spec on ``task``'s choosing split, then score the chosen ones on its reporting split.

    Args:
        encoder: the converted decoder (its own spec does not matter).
        task: what to embed and how to score.
        candidates: the grid.
        template: a preset's name, or ``None`` for mean pooling with ``task.instruction``.
        suggestion: a spec to score beside the chosen ones (``suggest_spec``'s), on both splits.
        exits: exit layers to try for the chosen spec of each config in ``exit_configs``; the exit is
            chosen on the choosing split like any other choice.
        exit_configs: the configs whose chosen spec is tried at ``exits`` (see :func:`exit_configs_of`;
            ``"best"`` names the better converted config on the choosing split).
        batch_size: texts per forward pass.
        restrict: skip the grid and take these candidates (config -> candidate) as chosen: for costly
            templates (MetaEOL's eight prompts) scored only at the specs another template chose.
        report_grid: score every grid candidate on the reporting split too, not only the chosen ones (the
            configs' curves over k, for :func:`curve_comparisons` and :func:`curves_table`).
        show_progress_bar: a bar for each encoding pass of more than 8 batches.
    """
    cache = EmbeddingCache(encoder, template, task.instruction, batch_size, show_progress_bar=show_progress_bar)
    name = template or NO_TEMPLATE

    def embed(c: Candidate) -> Callable[[Sequence[str]], np.ndarray]:
        return lambda texts: cache.vectors([c], texts)[c.name]

    def score_choose(cands: Sequence[Candidate]) -> dict[Candidate, float]:
        cache.vectors(cands, task.texts("choose"))  # all at once: shared layers run once per batch
        return {c: task.choose_score(embed(c)) for c in cands}

    grid_cands = list(restrict.values()) if restrict is not None else list(candidates)
    extra = [suggestion] if suggestion is not None and suggestion not in grid_cands else []
    # F*'s exits share every layer with F*: they come free in the grid's pass
    f_exits = exit_candidates(Candidate("F*", "F*"), encoder.depth, exits) if "F*" in exit_configs else []
    choose_scores = score_choose(grid_cands + extra + f_exits)
    if restrict is not None:
        chosen_cands = dict(restrict)
    else:
        chosen_cands = choose_by_config({c: choose_scores[c] for c in grid_cands})
    configs = exit_configs_of(exit_configs, chosen_cands, choose_scores)
    if suggestion is not None:
        chosen_cands["SUGGESTED"] = suggestion
    exit_cands = {cfg: exit_candidates(chosen_cands[cfg], encoder.depth, exits) for cfg in configs}
    exit_cands = {cfg: cs for cfg, cs in exit_cands.items() if cs}
    every_exit = [c for cs in exit_cands.values() for c in cs]
    if every_exit:
        choose_scores |= score_choose(every_exit)
    report_cands = list(dict.fromkeys([*chosen_cands.values(), *every_exit, *(grid_cands if report_grid else [])]))
    cache.vectors(report_cands, task.texts("report"))
    reported = {c: task.report_statistic(embed(c)) for c in report_cands}

    def scored(c: Candidate) -> Scored:
        return Scored(c, choose_scores.get(c), reported.get(c))

    exit_rows = {cfg: [scored(c) for c in [*cs, chosen_cands[cfg]]] for cfg, cs in exit_cands.items()}
    exit_choice = {cfg: max(rows, key=lambda s: s.choose) for cfg, rows in exit_rows.items()}
    logger.info("%s %s: chosen %s", task.name, name, {f: c.name for f, c in chosen_cands.items()})
    return TemplateResult(
        template=name,
        grid=[scored(c) if report_grid else Scored(c, choose_scores[c]) for c in grid_cands + extra],
        chosen={cfg: scored(c) for cfg, c in chosen_cands.items()},
        exits=exit_rows,
        exit_choice=exit_choice,
        seconds=cache.seconds,
        texts_encoded=cache.texts_encoded,
    )


# ---------------------------------------------------------------------------------------- NER


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
    for c in candidates:
        halves_stats: tuple[list[stats.Statistic], list[stats.Statistic]] = ([], [])
        for seed in seeds:
            probe = train_probe(train_feats[c.name], labels, len(tags), replace(config, seed=seed))
            predicted = []
            with torch.no_grad():
                for feats, kept in zip(dev_feats[c.name], dev_kept, strict=True):
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


# ---------------------------------------------------------------------------------------- comparisons, JSON


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
        best = _best_config(r)
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


def _best_config(result: TemplateResult) -> str | None:
    """The converted config (any but ``F*`` and ``SUGGESTED``) with the best choosing score."""
    cfgs = [f for f in _converted(result.chosen) if result.chosen[f].choose is not None]
    return max(cfgs, key=lambda f: result.chosen[f].choose) if cfgs else None  # type: ignore[arg-type,return-value]


def template_row(result: TemplateResult, seed: int = 0) -> dict[str, Any]:
    """One template's results as a plain dict for JSON (intervals computed here, 1,000 resamples)."""
    return {
        "template": result.template,
        "seconds": round(result.seconds, 1),
        "texts_encoded": result.texts_encoded,
        "grid": [s.row(seed) for s in result.grid],
        "chosen": {cfg: s.row(seed) for cfg, s in result.chosen.items()},
        "best_family": _best_config(result),
        "exits": {cfg: [s.row(seed) for s in rows] for cfg, rows in result.exits.items()},
        "exit_choice": {cfg: s.candidate.name for cfg, s in result.exit_choice.items()},
    }


def overall_choice(results: Sequence[TemplateResult]) -> dict[str, Any]:
    """The (template, config) with the best choosing score over all templates and configs (``SUGGESTED`` aside)."""
    rows = [(r.template, cfg, s) for r in results for cfg, s in r.chosen.items() if cfg != "SUGGESTED"]
    best = max((row for row in rows if row[2].choose is not None), key=lambda x: x[2].choose)  # type: ignore[arg-type,return-value]
    return {"template": best[0], "family": best[1], "spec": best[2].candidate.name, "choose": best[2].choose}


# ---------------------------------------------------------------------------------------- tables and plots


def _ci(row: Mapping[str, Any]) -> str:
    return f"{row['report']:.3f} [{row['low']:.3f}, {row['high']:.3f}]"


def _signed_ci(c: Mapping[str, Any]) -> str:
    """A paired comparison's difference with its interval, signed: ``+0.012 [-0.003, +0.027]``."""
    return f"{c['delta']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]"


def _cell(spec: str | None) -> str:
    return "`" + (spec or "").replace("|", "\\|") + "`"


def results_table(payload: Mapping[str, Any], baselines: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """A Markdown table of a study JSON: per template and config, the spec chosen, its choosing score, and
    its reported score with the 95% interval; then the baselines' payloads (``baseline_task``) by name."""
    lines = [
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


def _curves(
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
    curves, chosen = _curves(payload, template)
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


def plot_curves(
    payloads: Mapping[str, Mapping[str, Any]], path: str | Path, template: str = NO_TEMPLATE, title: str = ""
) -> Path:
    """The configs' reported scores against k with their 95% intervals, one panel per payload (a study JSON run
    with ``--report-grid``, or a NER study JSON); ``F*`` is the dashed line and its band, chosen specs are ringed."""
    from nosink.evals.plotting import figure, save

    fig, axes = figure(1, len(payloads), figsize=(5.5 * len(payloads), 4), squeeze=False)
    for ax, (name, payload) in zip(axes[0], payloads.items(), strict=True):
        curves, chosen = _curves(payload, template)
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


# ---------------------------------------------------------------------------------------- masks x templates


def effect(comparison: Mapping[str, Any]) -> str:
    """``"adds"``, ``"costs"`` or ``"ties"``: whether a paired comparison's 95% interval lies above zero, below it,
    or across it (so the word agrees with the interval the tables print).

    >>> effect({"delta": 0.03, "low": 0.01, "high": 0.05}), effect({"delta": 0.03, "low": -0.004, "high": 0.07})
    ('adds', 'ties')
    """
    return "adds" if comparison["low"] > 0 else "costs" if comparison["high"] < 0 else "ties"


def _verdict(mask: Mapping[str, Any], prompt: Mapping[str, Any] | None) -> str:
    """The rule of :func:`interplay`'s ``verdict``."""
    if prompt is None:
        return f"mask {effect(mask)}"
    if effect(mask) == effect(prompt) == "adds":
        return "add up"
    return f"mask {effect(mask)}, template {effect(prompt)}"


def interplay(payloads: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """How the masks and each prompt template combine, from one model's study JSONs on one task.

    The JSONs must share the model, task, samples and seed; a template in several of them (the no-template one
    often is) must choose the same best config and have the same spec and score for the configs they share;
    of its copies, the first with the no-template rows beside it is read (else the first). One entry per
    template, in order of appearance:

    - ``alone`` and ``with_mask``: the template's ``F*`` row and its best converted config's row (the config
      chosen on the choosing split);
    - ``mask``: the comparison of ``with_mask`` against ``alone`` on the reporting split (the mask under the
      template);
    - ``prompt``: the comparison of ``with_mask`` against no template's same config (the template on top of the
      mask); ``None`` for no template itself, and for a template run in a JSON without the no-template rows
      (the pair needs both in one run);
    - ``verdict``, from the two comparisons' 95% intervals (:func:`effect`): ``"add up"`` where each adds to the
      other, else ``"mask E, template F"`` with E and F each ``adds``, ``ties`` or ``costs`` (``"mask ties,
      template costs"``); without ``prompt``, ``"mask E"``.

    Raises:
        ValueError: if no JSON is given, if one is not a study JSON with templates, if they differ in model,
            task, samples or seed, if they give one template different choices or rows, or if a template has
            no ``F*``, no converted config or no comparison of the two.
    """
    if not payloads:
        raise ValueError("no study JSON given")
    first = payloads[0]
    for payload in payloads[1:]:
        differ = [key for key in ("model", "task", "data", "seed") if payload.get(key) != first.get(key)]
        if differ:
            raise ValueError(f"these study JSONs differ in {', '.join(differ)}: give one model's runs on one task")
    copies: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for i, payload in enumerate(payloads):
        if "templates" not in payload:
            raise ValueError(f"JSON {i} is not a study JSON with templates (a NER study JSON has none)")
        for t in payload["templates"]:
            copies.setdefault(t["template"], []).append((i, t))
    entries = []
    for name, found in copies.items():
        for other in found[1:]:
            _same_rows(name, found[0], other)
        read = [_template_entry(i, payloads[i], t) for i, t in found]
        # a copy with the no-template rows beside it has the "on top" comparison: it is the one read
        entries.append(next((e for e in read if e["prompt"] is not None), read[0]))
    return entries


def _same_rows(name: str, a: tuple[int, Mapping[str, Any]], b: tuple[int, Mapping[str, Any]]) -> None:
    """Refuse two copies of one template (JSON index, template row) that choose differently or score differently."""
    (i, t), (j, other) = a, b
    if t["best_family"] != other["best_family"]:
        raise ValueError(
            f"template {name!r}: JSON {i} chose {t['best_family']} as its best family and JSON {j} "
            f"{other['best_family']}; read runs of one grid together"
        )
    for config in sorted(set(t["chosen"]) & set(other["chosen"])):
        x, y = t["chosen"][config], other["chosen"][config]
        if x["name"] != y["name"] or not np.isclose(x["report"], y["report"], rtol=0, atol=1e-6):
            raise ValueError(
                f"template {name!r}, family {config}: JSON {i} has {x['name']!r} reporting {x['report']:.6f}, "
                f"JSON {j} {y['name']!r} reporting {y['report']:.6f}; runs that differ there (another grid, "
                "sample or thread count) cannot be read together"
            )


def _template_entry(i: int, payload: Mapping[str, Any], t: Mapping[str, Any]) -> dict[str, Any]:
    """One template's :func:`interplay` entry from JSON ``i``'s rows and comparisons."""
    name, best = t["template"], t["best_family"]
    if best is None or "F*" not in t["chosen"]:
        raise ValueError(f"template {name!r} in JSON {i} needs F* and a converted family; it has {list(t['chosen'])}")
    compared = {(c["comparison"], c["a"], c["b"]): c for c in payload["comparisons"]}
    mask = compared.get(("template+mask vs template alone", f"{name} / {best}", f"{name} / F*"))
    if mask is None:
        raise ValueError(
            f"template {name!r} in JSON {i} has no 'template+mask vs template alone' comparison: a row without "
            "a reporting score? rerun the study"
        )
    prompt = compared.get(("template+mask vs mask alone", f"{name} / {best}", f"{NO_TEMPLATE} / {best}"))
    return {
        "template": name,
        "alone": t["chosen"]["F*"],
        "with_mask": t["chosen"][best],
        "mask": mask,
        "prompt": prompt,
        "verdict": _verdict(mask, prompt),
    }


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


# ---------------------------------------------------------------------------------------- the driver


def load_sts(folder: str | Path, n_choose: int | None, n_report: int | None, seed: int = 0) -> STSTask:
    """STS-B from a folder: seeded samples of ``n_choose`` dev and ``n_report`` test pairs (all: ``None``)."""
    from nosink.evals.mteb_data import LOCAL_FOLDERS
    from nosink.evals.mteb_tasks import STS_INSTRUCTION, format_instruction

    data = LOCAL_FOLDERS["STSBenchmark"][1](Path(folder))

    def pairs(split: str, n: int | None) -> list[tuple[str, str, float]]:
        rows = list(zip(data[split]["sentence1"], data[split]["sentence2"], data[split]["score"], strict=True))
        return rows if n is None or n >= len(rows) else random.Random(seed).sample(rows, n)

    return STSTask(
        "STSBenchmark", pairs("validation", n_choose), pairs("test", n_report), format_instruction(STS_INSTRUCTION)
    )


def load_sts17(stsb_folder: str | Path, sts17_folder: str | Path, n_choose: int | None, seed: int = 0) -> STSTask:
    """STS17 (en-en, its one split of 250 pairs) to report on, with specs chosen on a seeded sample of STS-B dev.

    The STS-B dev sample is :func:`load_sts`'s for the same ``n_choose`` and ``seed``, so the choice is
    the one the STS-B study made.
    """
    from nosink.evals.mteb_data import LOCAL_FOLDERS

    sts17 = LOCAL_FOLDERS["STS17"][1](Path(sts17_folder))["en-en"]["test"]
    pairs = list(zip(sts17["sentence1"], sts17["sentence2"], sts17["score"], strict=True))
    stsb = load_sts(stsb_folder, n_choose, 0, seed)
    return STSTask("STS17 (en-en)", stsb.choose, pairs, stsb.instruction)


def load_classification(
    name: str,
    folder: str | Path,
    n_train: int | None,
    n_test: int | None,
    seed: int = 0,
    n_validation: int | None = None,
) -> ClassificationTask:
    """Banking77, Emotion or MASSIVE intent (en-US) from a local folder, each split subsampled (seeded,
    label-stratified). MASSIVE chooses on its own validation split (``n_validation`` items); the others on
    a holdout of the training items.

    Raises:
        ValueError: for another task name.
    """
    from nosink.evals.classify import Example, subsample
    from nosink.evals.mteb_data import LOCAL_FOLDERS
    from nosink.evals.mteb_tasks import PAPER_TASKS, format_instruction

    known = ("Banking77Classification", "EmotionClassification", "MassiveIntentClassification")
    if name not in known:
        raise ValueError(f"unknown classification task {name!r}; expected one of {', '.join(known)}")
    data = LOCAL_FOLDERS[name][1](Path(folder))
    massive = name == "MassiveIntentClassification"
    if massive:
        data = data["en"]

    def items(split: str, n: int | None) -> list[tuple[str, str]]:
        examples = [Example(t, str(y)) for t, y in zip(data[split]["text"], data[split]["label"], strict=True)]
        return [(e.text, e.label) for e in subsample(examples, n, seed)]

    return ClassificationTask(
        name,
        items("train", n_train),
        items("test", n_test),
        format_instruction(PAPER_TASKS[name]),
        seed=seed,
        validation=items("validation", n_validation) if massive else None,
    )


def load_retrieval(
    name: str,
    folder: str | Path,
    n_queries: int | None,
    n_other: int | None,
    seed: int = 0,
    doc_words: int | None = None,
) -> RetrievalTask:
    """NFCorpus or SciFact (BEIR folder, test split): a seeded sample of queries in two halves (choose on the
    first, report on the second) and a subsampled corpus.

    The corpus keeps every document judged for a sampled query and a seeded random sample of ``n_other``
    of the rest (all of them: ``None``). A document's text is its title and text joined as mteb joins
    them, cut to its first ``doc_words`` words when given.

    Raises:
        ValueError: for another task name.
    """
    from nosink.evals.mteb_data import LOCAL_FOLDERS
    from nosink.evals.mteb_tasks import PAPER_TASKS, format_instruction

    if name not in ("NFCorpus", "SciFact"):
        raise ValueError(f"unknown retrieval task {name!r}; expected NFCorpus or SciFact")
    data = LOCAL_FOLDERS[name][1](Path(folder))["default"]["test"]
    rng = random.Random(seed)
    queries = list(zip(data["queries"]["id"], data["queries"]["text"], strict=True))
    if n_queries is not None and n_queries < len(queries):
        queries = rng.sample(queries, n_queries)
    relevant = {q: dict(data["relevant_docs"][q]) for q, _ in queries}
    judged = {d for q, _ in queries for d in relevant[q]}
    docs = data["corpus"]
    texts = {
        i: (f"{title} {text}".strip() if title else text)
        for i, title, text in zip(docs["id"], docs["title"], docs["text"], strict=True)
    }
    if doc_words is not None:
        texts = {i: " ".join(t.split()[:doc_words]) for i, t in texts.items()}
    others = sorted(set(texts) - judged)
    if n_other is not None and n_other < len(others):
        others = rng.sample(others, n_other)
    keep = set(others) | (judged & set(texts))
    corpus = [(i, texts[i]) for i in docs["id"] if i in keep]
    first, second = stats.halves(queries, seed=seed)
    return RetrievalTask(name, first, second, corpus, relevant, format_instruction(PAPER_TASKS[name]))


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


def _write(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.replace(path)


def study_task(
    encoder: EncoderFromDecoder,
    task: Task,
    path: str | Path,
    templates: Sequence[str | None],
    candidates: Sequence[Candidate],
    suggestion: Candidate | None = None,
    exits: Sequence[int] = (),
    exit_templates: Sequence[str | None] = (None,),
    restricted: Sequence[str] = ("MetaEOL",),
    meta: Mapping[str, Any] | None = None,
    batch_size: int = 32,
    exit_configs: Sequence[str] = ("F*", "best"),
    report_grid: bool = False,
    show_progress_bar: bool = False,
) -> dict[str, Any]:
    """Run :func:`run_template` for each template and write the JSON at ``path`` after each one.

    Templates named in ``restricted`` are scored only at the specs the first template chose (no grid).
    ``exits`` are tried for the chosen specs of ``exit_configs`` (by default ``F*`` and the better converted
    config), for the templates in ``exit_templates``. ``report_grid`` scores every grid candidate of the templates
    with a grid on the reporting split too (see :func:`run_template`); ``show_progress_bar`` shows a bar per long
    encoding pass.

    Returns:
        The JSON payload: each template's rows, the overall choice, the paired comparisons, and ``meta``.
    """
    path = Path(path)
    results: list[TemplateResult] = []
    payload: dict[str, Any] = {"task": task.name, "metric": task.metric, **(meta or {})}
    for template in templates:
        restrict = None
        if template in restricted and results:
            restrict = {f: s.candidate for f, s in results[0].chosen.items() if f != "SUGGESTED"}
        result = run_template(
            encoder,
            task,
            candidates,
            template,
            suggestion=suggestion if template is None else None,
            exits=exits if template in exit_templates else (),
            exit_configs=exit_configs,
            batch_size=batch_size,
            restrict=restrict,
            report_grid=report_grid,
            show_progress_bar=show_progress_bar,
        )
        results.append(result)
        payload["templates"] = [template_row(r) for r in results]
        payload["overall_choice"] = overall_choice(results)
        payload["comparisons"] = comparisons(results, depth=encoder.depth if report_grid else None)
        payload["seconds"] = round(sum(r.seconds for r in results), 1)
        _write(path, payload)
        logger.info("%s %s done in %.0f s; wrote %s", task.name, result.template, result.seconds, path)
    return payload


def baseline_task(folder: str | Path, task: Task, path: str | Path, meta: Mapping[str, Any] | None = None) -> dict:
    """A sentence-transformers encoder (no instruction, no template) on ``task``'s reporting split, with its CI."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    start = time.perf_counter()
    cache: dict[str, np.ndarray] = {}

    def vectors(texts: Sequence[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in cache]
        if todo:
            cache.update(zip(todo, model.encode(todo, batch_size=32, show_progress_bar=False), strict=True))
        return np.stack([cache[t] for t in texts])

    scored = Scored(Candidate("F*", "F*"), task.choose_score(vectors), task.report_statistic(vectors))
    row = scored.row() | {"family": "trained encoder", "spec": None, "name": Path(folder).name}
    payload = {"task": task.name, "metric": task.metric, "result": row, **(meta or {})}
    payload["seconds"] = round(time.perf_counter() - start, 1)
    _write(Path(path), payload)
    return payload


def _ner_payload(result: NERStudy, candidates: Sequence[Candidate], meta: Mapping[str, Any]) -> dict[str, Any]:
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
    converted = _converted(chosen)
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


def _template_name(text: str) -> str:
    """An argparse ``type``: :data:`NO_TEMPLATE` or a preset's name (any case; ``-``, ``_`` ignored), as spelt there."""
    from nosink.models.templates import PRESETS, by_name

    if text == NO_TEMPLATE:
        return text
    try:
        return by_name(text).name
    except ValueError:
        known = ", ".join([NO_TEMPLATE, *PRESETS])
        raise argparse.ArgumentTypeError(f"unknown template {printable(repr(text))}; expected one of {known}") from None


def add_arguments(parser: argparse.ArgumentParser, data_env: str | None = None) -> None:
    """Add the study's arguments to ``parser``: ``python -m nosink.evals.study`` and ``nosink eval study`` share them.

    Args:
        parser: the parser (or subparser) to add them to; :func:`run` takes what it parses.
        data_env: an environment variable that names the data folder when ``--data`` is not given (the caller
            reads it after parsing); without one, ``--data`` is required.
    """
    from nosink.models.weights import MODELS

    where = f"; default: ${data_env}" if data_env else ""
    parser.add_argument("model", help=f"a decoder (a folder, a hub id, or {', '.join(MODELS)}), or a baseline's "
                        "name (all-MiniLM-L6-v2, all-mpnet-base-v2)")  # fmt: skip
    parser.add_argument("--data", required=data_env is None,
                        help="the folder holding stsb/, sts17/, banking77/, emotion/, massive_intent/, nfcorpus/, "
                        f"scifact/, conll2003/{where}")  # fmt: skip
    parser.add_argument("--out", required=True, help="the folder for the JSON files (one per task)")
    tasks = ["sts", "sts17", "banking77", "emotion", "massive", "nfcorpus", "scifact", "ner"]
    parser.add_argument("--tasks", nargs="+", default=["sts"], choices=tasks)
    parser.add_argument("--templates", nargs="+", type=_template_name, default=[NO_TEMPLATE, "PromptEOL",
                        "PretendedCoT", "KnowledgeEnhancement", "Echo", "MetaEOL"],
                        help=f"'{NO_TEMPLATE}' (mean pooling, the task's instruction) or template presets")  # fmt: skip
    parser.add_argument(
        "--ks", type=count_arg(), nargs="+", help="converted layers (default: depth/4, depth/2, 2 depth/3)"
    )
    parser.add_argument(
        "--k0s",
        type=count_arg(),
        nargs="+",
        default=[1, 2, 4],
        help="top layers that also hide the sink (k0 = 0 is F* | B*k, already in the grid)",
    )
    # --families and --exit-families: the flags' first names, still taken
    parser.add_argument("--configs", "--families", dest="configs", nargs="+", choices=GRID_CONFIGS,
                        default=list(DEFAULT_CONFIGS[1:]),
                        help="the paper's configurations to sweep over --ks beside F* (MASK0-ALL is one spec, M0B*; "
                        "MASK0&BIDIR also sweeps --k0s)")  # fmt: skip
    parser.add_argument("--report-grid", action="store_true",
                        help="score every grid spec on the reporting split too, not only each config's chosen one "
                        "(the configs' curves over k, with paired comparisons along k; NER always does)")  # fmt: skip
    parser.add_argument("--exits", type=count_arg(), nargs="*", default=[], help="exit layers to try")
    parser.add_argument("--exit-configs", "--exit-families", dest="exit_configs", nargs="+", choices=EXIT_CONFIGS,
                        default=["F*", "best"],
                        help="configs whose chosen spec is tried at --exits ('best': the converted config that "
                        "scores best on the choosing split; the others must be in --configs)")  # fmt: skip
    parser.add_argument("--exit-templates", nargs="*", type=_template_name, default=[NO_TEMPLATE],
                        help="templates whose chosen specs are tried at --exits")  # fmt: skip
    parser.add_argument(
        "--restricted",
        nargs="*",
        type=_template_name,
        default=["MetaEOL"],
        help="templates scored only at the specs the first template chose (no grid of their own)",
    )
    parser.add_argument("--sts-choose", type=count_arg(2), default=300, help="STS-B dev pairs to choose on")
    parser.add_argument("--sts-report", type=count_arg(2), help="STS-B test pairs to report on (default all 1,379)")
    parser.add_argument("--cls-train", type=count_arg(), default=1000)
    parser.add_argument("--cls-test", type=count_arg(), default=1000)
    parser.add_argument(
        "--cls-validation", type=count_arg(), default=1000, help="MASSIVE validation items to choose on"
    )
    parser.add_argument("--ret-queries", type=count_arg(2), help="retrieval test queries, in halves (default all)")
    parser.add_argument(
        "--ret-other",
        type=count_arg(0),
        help="unjudged documents kept beside the judged ones (default all; 0: the judged ones only)",
    )
    parser.add_argument(
        "--ret-doc-words", type=count_arg(), help="cut documents to their first N words (default: no cut)"
    )
    parser.add_argument("--ner-train", type=count_arg(), default=1000)
    parser.add_argument("--ner-dev", type=count_arg(2), default=1000)
    parser.add_argument("--seed", type=count_arg(0), default=0)
    parser.add_argument("--batch-size", type=count_arg(), default=32, help="texts per forward pass")
    parser.add_argument("--no-suggestion", action="store_true")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bars (by default each long encoding pass shows one on stderr)")  # fmt: skip
    parser.add_argument("--select", type=count_arg(2, zero="no selection stage"), default=0, metavar="N",
                        help="score the sink profile's candidate specs (nosink.evals.sinks.candidate_specs) on N "
                        "choosing pairs (STS), training items (classification) or training sentences (NER, "
                        "scored on the choosing half of dev) and report the best as the suggestion (default 0: "
                        "suggest_spec's spec)")  # fmt: skip


def run(args: argparse.Namespace, command: str) -> int:
    """Run the study that ``args`` (parsed with :func:`add_arguments`) describes; write one JSON file per task.

    Args:
        args: the parsed arguments.
        command: the command line, kept in every JSON file (``meta["command"]``).

    Returns:
        0 (the exit status).

    Raises:
        FileNotFoundError: if ``--data`` is not a folder, or lacks the folder of a task asked for (or
            ``stsb/``, whose training sentences the suggestion profiles).
        ValueError: for a ``--select`` sample of 1 or fewer than 0 items, or with ``--no-suggestion``; for an
            exit config not in ``--configs``; for an exit layer at or above the model's depth.
    """
    import torch

    from nosink.evals.baselines import BASELINES
    from nosink.models.weights import MODELS, model_path

    select = getattr(args, "select", 0)
    if select < 0 or select == 1:
        raise ValueError(f"--select takes the sample size, at least 2 (0: no selection stage), got {select}")
    if select and args.no_suggestion:
        raise ValueError("--select picks the suggestion: it cannot go with --no-suggestion; drop one of them")
    configs = list(getattr(args, "configs", DEFAULT_CONFIGS[1:]))
    exit_configs = list(getattr(args, "exit_configs", ["F*", "best"]))
    outside = [f for f in exit_configs if f not in ("F*", "best", *configs)]
    if outside:
        raise ValueError(
            f"--exit-configs {' '.join(outside)}: not swept, so never chosen; add them to --configs "
            f"(now {' '.join(configs)}) or drop them"
        )
    data, out = Path(args.data), Path(args.out)
    _check_data(data, args.tasks, suggestion=not args.no_suggestion and args.model not in BASELINES)
    model = model_path(args.model) if args.model in MODELS else args.model
    templates = [None if t == NO_TEMPLATE else t for t in args.templates]
    exit_templates = [None if t == NO_TEMPLATE else t for t in args.exit_templates]
    meta: dict[str, Any] = {
        "model": Path(model).name, "command": command,
        "threads": torch.get_num_threads(), "seed": args.seed, "resamples": stats.RESAMPLES,
    }  # fmt: skip
    tasks: dict[str, Task] = {}
    if "sts" in args.tasks:
        tasks["sts"] = load_sts(data / "stsb", args.sts_choose, args.sts_report, args.seed)
    if "sts17" in args.tasks:
        tasks["sts17"] = load_sts17(data / "stsb", data / "sts17", args.sts_choose, args.seed)
    for key, name in (("banking77", "Banking77Classification"), ("emotion", "EmotionClassification")):
        if key in args.tasks:
            tasks[key] = load_classification(name, data / key, args.cls_train, args.cls_test, args.seed)
    if "massive" in args.tasks:
        tasks["massive"] = load_classification(
            "MassiveIntentClassification", data / "massive_intent", args.cls_train, args.cls_test, args.seed,
            n_validation=args.cls_validation,
        )  # fmt: skip
    for key, name in (("nfcorpus", "NFCorpus"), ("scifact", "SciFact")):
        if key in args.tasks:
            tasks[key] = load_retrieval(
                name, data / key, args.ret_queries, args.ret_other, args.seed, args.ret_doc_words
            )
    retrieval = {
        "queries": "seeded sample of the test queries, in seeded halves: choose on the first, report on the second",
        "n_queries": args.ret_queries, "n_other_documents": args.ret_other, "doc_words": args.ret_doc_words,
        "corpus": "subsampled: every document judged for a sampled query, plus n_other_documents seeded random "
        "others (all when null)",
        "metric": "nDCG@10 by mteb's calculate_retrieval_scores (pytrec_eval), per query; cosine top 100",
    }  # fmt: skip
    sizes = {
        "sts": {"choose": "STS-B dev, seeded sample", "n_choose": args.sts_choose, "n_report": args.sts_report},
        "sts17": {"choose": "STS-B dev, seeded sample (STS17 has one split)", "n_choose": args.sts_choose,
                  "report": "STS17 en-en, all 250 pairs"},
        "banking77": {"n_train": args.cls_train, "n_test": args.cls_test, "validation_fraction": 0.2},
        "emotion": {"n_train": args.cls_train, "n_test": args.cls_test, "validation_fraction": 0.2},
        "massive": {"n_train": args.cls_train, "n_validation": args.cls_validation, "n_test": args.cls_test,
                    "choose": "MASSIVE en-US validation split (seeded, label-stratified sample)"},
        "nfcorpus": retrieval, "scifact": retrieval,
    }  # fmt: skip
    for key in ("nfcorpus", "scifact"):
        if key in tasks:
            task = tasks[key]
            assert isinstance(task, RetrievalTask)
            sizes[key] = retrieval | {
                "n_choose_queries": len(task.choose), "n_report_queries": len(task.report),
                "n_documents": len(task.corpus),
            }  # fmt: skip
    from nosink.evals.baselines import BASELINES, TokenFeatures, baseline_folder

    if args.model in BASELINES:
        folder = baseline_folder(args.model)
        for key, task in tasks.items():
            baseline_task(folder, task, out / f"{key}.json", meta | {"data": sizes[key]})
        if "ner" in args.tasks:
            train, dev = _conll(data, args.ner_train, args.ner_dev)
            cands = [Candidate("F*", "F*")]
            result = ner_study(TokenFeatures(folder), train, dev, cands)
            _write(out / "ner.json", _ner_payload(result, cands, meta | {"data": _ner_sizes(args)}))
        return 0
    encoder = EncoderFromDecoder.from_pretrained(model, "F*", dtype=torch.float32)
    too_deep = sorted({m for m in args.exits if m >= encoder.depth})
    if too_deep:
        raise ValueError(
            f"--exits {' '.join(map(str, too_deep))}: the model has {encoder.depth} layers, so an exit layer is 1 to "
            f"{encoder.depth - 1} (every spec is scored at full depth anyway); drop or lower those exits"
        )
    report_grid = bool(getattr(args, "report_grid", False))
    progress = bool(getattr(args, "progress", False))
    candidates = grid(encoder.depth, args.ks, args.k0s, configs)
    conll = _conll(data, args.ner_train, args.ner_dev) if "ner" in args.tasks else None
    suggestion = None
    selections: dict[str, tuple[Candidate, dict[str, Any]]] = {}
    if not args.no_suggestion:
        texts = _sink_texts(data)
        suggestion, why = suggestion_for(encoder, texts)
        meta["suggestion"] = why | {"profile_texts": len(texts)}
        if select:
            from nosink.evals.sinks import sink_profile

            profile = sink_profile(encoder, texts)
            for key, task in tasks.items():
                chosen, record = selection_for(encoder, profile, task, select, args.seed, args.batch_size)
                selections[key] = chosen, record | {"profile_texts": len(texts), "midpoint": why}
            if conll is not None:
                chosen, record = ner_selection_for(
                    encoder, profile, *conll, select, args.seed, show_progress_bar=progress
                )
                selections["ner"] = chosen, record | {"profile_texts": len(texts), "midpoint": why}
    meta |= {
        "depth": encoder.depth, "grid": [c.name for c in candidates], "exits": args.exits,
        # the keys of the committed results (docs/results/study), which tables and tests read back
        "exit_families": exit_configs, "restricted_templates": args.restricted, "families": configs,
        "report_grid": report_grid,
    }  # fmt: skip
    for key, task in tasks.items():
        task_suggestion, task_meta = suggestion, meta
        if key in selections:  # the selection stage's spec stands in for suggest_spec's
            task_suggestion, record = selections[key]
            task_meta = meta | {"suggestion": record}
        study_task(
            encoder, task, out / f"{key}.json", templates, candidates, task_suggestion, args.exits, exit_templates,
            restricted=args.restricted, meta=task_meta | {"data": sizes[key]}, batch_size=args.batch_size,
            exit_configs=exit_configs, report_grid=report_grid, show_progress_bar=progress,
        )  # fmt: skip
    if conll is not None:
        train, dev = conll
        ner_suggestion, ner_meta = suggestion, meta
        if "ner" in selections:  # as for the other tasks
            ner_suggestion, record = selections["ner"]
            ner_meta = meta | {"suggestion": record}
        ner_cands = list(candidates) + ([ner_suggestion] if ner_suggestion is not None else [])
        if "F*" in exit_configs:  # F*'s exits share every layer with F*: they come free in the first pass
            ner_cands += exit_candidates(Candidate("F*", "F*"), encoder.depth, args.exits)
        result = ner_study(encoder, train, dev, ner_cands, show_progress_bar=progress)
        chosen = choose_by_config({c: result.choose[c] for c in ner_cands if c.exit_layer is None})
        if args.exits:
            configs = [f for f in exit_configs_of(exit_configs, chosen, result.choose) if f != "F*"]
            more = [c for f in configs for c in exit_candidates(chosen[f], encoder.depth, args.exits)]
            if more:
                extra = ner_study(encoder, train, dev, more, show_progress_bar=progress)
                for d in ("choose", "report", "per_seed"):
                    getattr(result, d).update(getattr(extra, d))
                result.seconds += extra.seconds
                ner_cands += more
        _write(out / "ner.json", _ner_payload(result, ner_cands, ner_meta | {"data": _ner_sizes(args)}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nosink.evals.study``: the study of one model (or baseline) on the chosen tasks."""
    parser = argparse.ArgumentParser(prog="python -m nosink.evals.study", description=main.__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return run(args, "python -m nosink.evals.study " + " ".join(sys.argv[1:] if argv is None else argv))


TASK_FOLDERS: dict[str, tuple[str, ...]] = {
    "sts": ("stsb",), "sts17": ("stsb", "sts17"), "banking77": ("banking77",), "emotion": ("emotion",),
    "massive": ("massive_intent",), "nfcorpus": ("nfcorpus",), "scifact": ("scifact",), "ner": ("conll2003",),
}  # fmt: skip
"""The folders under ``--data`` that each task of ``--tasks`` reads (STS17 is chosen on STS-B dev)."""


def _check_data(data: Path, tasks: Sequence[str], suggestion: bool = False) -> None:
    """Refuse a ``--data`` that is not a folder, or lacks a folder the tasks (or the suggestion) read,
    before any model loads."""
    needed = {folder: task for task in tasks for folder in TASK_FOLDERS.get(task, ())}  # folder -> a task needing it
    if suggestion:
        needed.setdefault("stsb", "the suggestion's sink profile, or give --no-suggestion")
    if not data.is_dir():
        folders = ", ".join(f"{folder}/" for folder in needed)
        raise FileNotFoundError(f"no data folder at {printable(str(data))}: --data names the folder holding {folders}")
    missing = [f"{folder}/ (for {task})" for folder, task in needed.items() if not (data / folder).is_dir()]
    if missing:
        raise FileNotFoundError(f"the data folder {printable(str(data))} has no {', '.join(missing)}")


def _sink_texts(data: Path, n: int = 16) -> list[str]:
    # The sink profile reads STS-B *train* sentences: no text the study chooses or reports on.
    from nosink.evals.mteb_data import _read_stsb

    return list(_read_stsb(data / "stsb")["train"]["sentence1"][:n])


def _conll(data: Path, n_train: int, n_dev: int) -> tuple[list[Any], list[Any]]:
    from nosink.evals.ner import load_conll

    return load_conll(data / "conll2003", "train")[:n_train], load_conll(data / "conll2003", "dev")[:n_dev]


def _ner_sizes(args: Any) -> dict[str, Any]:
    return {
        "train": f"first {args.ner_train} CoNLL-2003 train sentences",
        "dev": f"first {args.ner_dev} dev sentences, in seeded halves (choose on one, report on the other)",
        "seeds": [0, 1, 2],
        "max_length": 32,
    }


if __name__ == "__main__":
    sys.exit(main())
