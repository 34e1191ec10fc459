"""Error bars and clean selection: bootstrap confidence intervals, paired bootstrap tests, held-out splits.

A score is a statistic of a test set's *units*: sentences for NER (entity F1), sentence pairs for STS
(Spearman), items for classification (accuracy, macro-F1). The bootstrap resamples those units with
replacement (1,000 times by default, seeded), recomputes the statistic on each resample, and reads the
95% interval off the percentiles of the recomputed values. Two systems scored on the same units are
compared on the *same* resamples (a paired bootstrap): the p-value of "A beats B" is the share of
resamples on which A does not beat B (ties count half).

>>> import numpy as np
>>> gold = np.array([0, 1, 1, 0, 1, 0, 1, 1])
>>> a = accuracy(gold, np.array([0, 1, 1, 0, 1, 0, 1, 0]))  # 7 of 8 right
>>> ci = bootstrap_ci(a, seed=0)
>>> round(ci.estimate, 3), ci.low <= ci.estimate <= ci.high
(0.875, True)
>>> compare(a, a).p_value  # a system against itself: every resample ties
0.5

Choosing on the data one reports on flatters the winner. :func:`halves` cuts a set in two seeded
halves (choose on one, report on the other), :func:`holdout` takes a seeded, stratified validation
split out of a training set, and :func:`select` picks on one split's scores and reports the other's.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "RESAMPLES",
    "Comparison",
    "Interval",
    "Selection",
    "Statistic",
    "accuracy",
    "bootstrap_ci",
    "compare",
    "f1_macro",
    "halves",
    "holdout",
    "mean_of",
    "ner_f1",
    "resample_indices",
    "select",
    "spearman",
]

RESAMPLES = 1000  # bootstrap resamples per interval (the protocol)
T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Statistic:
    """A score as a function of which units a (re)sample holds.

    Attributes:
        name: what it measures (``"ner_f1"``, ``"spearman"``, ...).
        n: how many units the test set has.
        values: ``(R, n)`` integer unit indices, one resample per row -> ``(R,)`` scores.
    """

    name: str
    n: int
    values: Callable[[np.ndarray], np.ndarray]

    def __call__(self, indices: Sequence[int] | np.ndarray | None = None) -> float:
        """The score on the units ``indices`` (with repeats); all units once when ``None``."""
        idx = np.arange(self.n) if indices is None else np.asarray(indices, dtype=np.int64)
        return float(self.values(idx[None, :])[0])


@dataclass(frozen=True)
class Interval:
    """A score and its percentile bootstrap confidence interval."""

    estimate: float  # the score on the whole test set
    low: float
    high: float
    level: float = 0.95
    resamples: int = RESAMPLES

    def __str__(self) -> str:
        return f"{self.estimate:.4f} [{self.low:.4f}, {self.high:.4f}]"


@dataclass(frozen=True)
class Comparison:
    """A paired bootstrap comparison of system A with system B on the same units."""

    delta: Interval  # A's score minus B's, with its interval
    p_value: float  # share of resamples on which A does not beat B (ties count half): small = A is better


@dataclass(frozen=True)
class Selection:
    """What :func:`select` chose on one split and what it scores on the other."""

    choice: Any  # the candidate with the best score on the choosing split
    choose_score: float  # its score on the choosing split (optimistic: it was picked there)
    report_score: float  # its score on the reporting split: the number to publish
    oracle: Any  # the candidate that is best on the reporting split (what choosing there would pick)
    oracle_score: float


def resample_indices(n: int, resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """``(resamples, n)`` unit indices drawn with replacement, the same for the same ``n`` and ``seed``.

    Raises:
        ValueError: if ``n`` or ``resamples`` is not positive.
    """
    if n < 1 or resamples < 1:
        raise ValueError(f"need at least one unit and one resample, got n={n}, resamples={resamples}")
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def bootstrap_ci(statistic: Statistic, *, resamples: int = RESAMPLES, level: float = 0.95, seed: int = 0) -> Interval:
    """The percentile bootstrap confidence interval of ``statistic``.

    Raises:
        ValueError: if ``level`` is not strictly between 0 and 1, or as :func:`resample_indices`.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, got {level}")
    samples = statistic.values(resample_indices(statistic.n, resamples, seed))
    return _interval(statistic(), samples, level)


def compare(
    a: Statistic, b: Statistic, *, resamples: int = RESAMPLES, level: float = 0.95, seed: int = 0
) -> Comparison:
    """Paired bootstrap of "A beats B": both scored on the same resamples of the same units.

    Returns:
        The difference A - B with its interval, and the one-sided p-value: the share of resamples on
        which A's score is below B's, ties counting half (0.5 for identical systems; near 0 when A is
        clearly better; ``compare(a, b).p_value + compare(b, a).p_value == 1``).

    Raises:
        ValueError: if the two statistics are not over the same number of units, or as :func:`bootstrap_ci`.
    """
    if a.n != b.n:
        raise ValueError(f"a paired comparison needs the same units: A has {a.n}, B has {b.n}")
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, got {level}")
    idx = resample_indices(a.n, resamples, seed)
    delta = a.values(idx) - b.values(idx)
    p_value = float((np.sum(delta < 0) + 0.5 * np.sum(delta == 0)) / len(delta))
    return Comparison(_interval(a() - b(), delta, level), p_value)


def _interval(estimate: float, samples: np.ndarray, level: float) -> Interval:
    tail = (1 - level) / 2
    low, high = np.quantile(samples, [tail, 1 - tail])
    return Interval(float(estimate), float(low), float(high), level, len(samples))


# ---------------------------------------------------------------------------------------- statistics


def ner_f1(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> Statistic:
    """seqeval's entity-level micro F1 over sentences (the NER probe's score), sentences as units.

    Entities are found by seqeval (``get_entities``, its default IOB2 reading) in each sentence once;
    a resample's F1 is ``2 TP / (predicted + gold entities)`` summed over its sentences, which is what
    ``seqeval.metrics.f1_score`` gives on the resampled list of sentences (0 when there are no entities).

    Raises:
        ValueError: if gold and predicted do not have the same sentences and lengths.
    """
    from seqeval.metrics.sequence_labeling import get_entities

    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    counts = np.zeros((3, len(gold)))  # true positives, predicted entities, gold entities
    for s, (g, p) in enumerate(zip(gold, predicted, strict=True)):
        if len(g) != len(p):
            raise ValueError(f"sentence {s} has {len(g)} gold tags but {len(p)} predicted")
        true, guessed = set(get_entities(list(g))), set(get_entities(list(p)))
        counts[:, s] = (len(true & guessed), len(guessed), len(true))

    def values(idx: np.ndarray) -> np.ndarray:
        tp, n_pred, n_gold = (c[idx].sum(axis=1) for c in counts)
        total = n_pred + n_gold
        return np.divide(2 * tp, total, out=np.zeros_like(total), where=total > 0)

    return Statistic("ner_f1", len(gold), values)


def spearman(scores: Sequence[float] | np.ndarray, gold: Sequence[float] | np.ndarray) -> Statistic:
    """Spearman correlation of a system's pair scores (cosine similarities) with gold scores, pairs as units.

    Ranks are averaged over ties (as ``scipy.stats.spearmanr``; a resample repeats pairs, so it has ties).
    A resample whose scores or gold are all equal scores 0.

    Raises:
        ValueError: if the two arrays differ in length or hold fewer than two pairs.
    """
    x, y = np.asarray(scores, dtype=float), np.asarray(gold, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError(f"need two 1-d arrays of the same length >= 2, got shapes {x.shape} and {y.shape}")

    def values(idx: np.ndarray) -> np.ndarray:
        from scipy.stats import rankdata

        rx, ry = rankdata(x[idx], axis=1), rankdata(y[idx], axis=1)
        rx, ry = rx - rx.mean(axis=1, keepdims=True), ry - ry.mean(axis=1, keepdims=True)
        norm = np.sqrt((rx**2).sum(axis=1) * (ry**2).sum(axis=1))
        return np.divide((rx * ry).sum(axis=1), norm, out=np.zeros(len(idx)), where=norm > 0)

    return Statistic("spearman", len(x), values)


def accuracy(gold: Sequence[Hashable] | np.ndarray, predicted: Sequence[Hashable] | np.ndarray) -> Statistic:
    """The share of items predicted right, items as units.

    Raises:
        ValueError: if the two differ in length or are empty.
    """
    g, p = _labels(gold, predicted)
    return mean_of("accuracy", (g == p).astype(float))


def mean_of(name: str, values: Sequence[float] | np.ndarray) -> Statistic:
    """The mean of per-unit values (each query's nDCG@10, each item's correctness), units resampled.

    Raises:
        ValueError: if there are no values.
    """
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or not len(v):
        raise ValueError(f"{name}: need a non-empty list of per-unit values, got shape {v.shape}")
    return Statistic(name, len(v), lambda idx: v[idx].mean(axis=1))


def f1_macro(gold: Sequence[Hashable] | np.ndarray, predicted: Sequence[Hashable] | np.ndarray) -> Statistic:
    """Macro-averaged F1 over classes, items as units (scikit-learn's ``f1_score(average="macro")``).

    On each resample the average runs over the classes that occur in its gold or predicted labels,
    as scikit-learn's does on the resampled lists.

    Raises:
        ValueError: if the two differ in length or are empty.
    """
    g, p = _labels(gold, predicted)
    classes, codes = np.unique(np.concatenate([g, p]), return_inverse=True)
    g_code, p_code = codes[: len(g)], codes[len(g) :]
    eye = np.eye(len(classes))
    gold_hot, pred_hot = eye[g_code], eye[p_code]  # (n, C)
    hit_hot = gold_hot * pred_hot

    def values(idx: np.ndarray) -> np.ndarray:
        weights = np.stack([np.bincount(row, minlength=len(g)) for row in idx]).astype(float)  # (R, n) multiplicities
        tp, n_gold, n_pred = weights @ hit_hot, weights @ gold_hot, weights @ pred_hot  # (R, C)
        present = (n_gold + n_pred) > 0
        f1 = np.divide(2 * tp, n_gold + n_pred, out=np.zeros_like(tp), where=present)
        return (f1 * present).sum(axis=1) / present.sum(axis=1)

    return Statistic("f1_macro", len(g), values)


def _labels(gold: Any, predicted: Any) -> tuple[np.ndarray, np.ndarray]:
    g, p = np.asarray(gold), np.asarray(predicted)
    if g.shape != p.shape or g.ndim != 1 or len(g) == 0:
        raise ValueError(f"need gold and predicted labels of the same non-zero length, got {g.shape} and {p.shape}")
    return g, p


# ---------------------------------------------------------------------------------------- clean selection


def halves(items: Sequence[T], seed: int = 0) -> tuple[list[T], list[T]]:
    """``items`` shuffled with ``seed`` and cut in two halves (the first gets the odd one): choose on one,
    report on the other (CoNLL-2003 dev for the NER probe's k and k0).

    >>> halves(list(range(5)), seed=0)
    ([2, 1, 0], [4, 3])
    """
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    cut = (len(order) + 1) // 2
    return [items[i] for i in order[:cut]], [items[i] for i in order[cut:]]


def holdout(
    items: Sequence[T], labels: Sequence[Hashable] | None = None, fraction: float = 0.2, seed: int = 0
) -> tuple[list[T], list[T]]:
    """A seeded validation split out of a training set: ``(rest, validation)``.

    For classification tasks without a validation split (Banking77): fit on ``rest``, choose on
    ``validation``, then refit on the whole training set and report on the test set. With ``labels``
    the split is stratified (each label keeps its share, and at least one item of each label with two
    or more stays in ``rest``).

    Raises:
        ValueError: if ``fraction`` is not strictly between 0 and 1, or labels do not line up with items.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be between 0 and 1, got {fraction}")
    if labels is not None and len(labels) != len(items):
        raise ValueError(f"{len(items)} items but {len(labels)} labels")
    rng = random.Random(seed)
    groups: dict[Hashable, list[int]] = {}
    for i in range(len(items)):
        groups.setdefault(labels[i] if labels is not None else None, []).append(i)
    chosen: set[int] = set()
    for members in groups.values():
        rng.shuffle(members)
        take = min(round(len(members) * fraction), len(members) - 1) if len(members) > 1 else 0
        chosen.update(members[:take])
    return [x for i, x in enumerate(items) if i not in chosen], [x for i, x in enumerate(items) if i in chosen]


def folds(items: Sequence[T], labels: Sequence[Hashable], k: int = 5, seed: int = 0) -> list[tuple[list[T], list[T]]]:
    """Seeded stratified k-fold cross-validation: ``k`` pairs ``(rest, held)``, every item held out exactly once.

    Each label's items are shuffled and dealt round the folds in turn (the deal starts where the last label's
    ended, so fold sizes differ by at most one); a fold that would hold nothing is dropped.

    >>> [(len(rest), len(held)) for rest, held in folds(list(range(10)), [0] * 5 + [1] * 5, k=5)]
    [(8, 2), (8, 2), (8, 2), (8, 2), (8, 2)]

    Raises:
        ValueError: for ``k`` below 2, or labels that do not line up with items.
    """
    if k < 2:
        raise ValueError(f"cross-validation needs at least 2 folds, got {k}")
    if len(labels) != len(items):
        raise ValueError(f"{len(items)} items but {len(labels)} labels")
    rng = random.Random(seed)
    groups: dict[Hashable, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(label, []).append(i)
    fold_of: dict[int, int] = {}
    turn = 0
    for members in groups.values():
        rng.shuffle(members)
        for i in members:
            fold_of[i] = turn % k
            turn += 1
    out = []
    for f in range(k):
        held = [x for i, x in enumerate(items) if fold_of[i] == f]
        if held:
            out.append(([x for i, x in enumerate(items) if fold_of[i] != f], held))
    return out


def select(choose: Mapping[K, float], report: Mapping[K, float]) -> Selection:
    """Pick the best candidate on the ``choose`` split and report its score on the ``report`` split.

    >>> s = select({"k=4": 0.71, "k=8": 0.74}, {"k=4": 0.70, "k=8": 0.69})
    >>> s.choice, s.report_score, s.oracle
    ('k=8', 0.69, 'k=4')

    Raises:
        ValueError: if ``choose`` is empty or a candidate has no score on the ``report`` split.
    """
    if not choose:
        raise ValueError("no candidates to choose from")
    missing = [k for k in choose if k not in report]
    if missing:
        raise ValueError(f"candidates {missing[:5]} have no score on the reporting split")
    choice = max(choose, key=lambda k: choose[k])  # the first of equal scores, in the mapping's order
    oracle = max(choose, key=lambda k: report[k])
    return Selection(choice, float(choose[choice]), float(report[choice]), oracle, float(report[oracle]))
