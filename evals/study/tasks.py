"""The tasks the study scores: what to embed on each split and how to score the embeddings.

Sentence similarity (:class:`STSTask`, pairs as units), classification (:class:`ClassificationTask`, items
as units) and retrieval (:class:`RetrievalTask`, queries as units); :mod:`.loaders` reads them from local
copies of the data sets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from nosink.evals import stats

__all__ = ["ClassificationTask", "RetrievalTask", "STSTask", "Task"]


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
    ``train`` and scores ``validation``; with ``choose_folds`` k >= 2 (and no ``validation``), it scores
    every training item once instead, by stratified k-fold cross-validation (:func:`stats.folds`): k fits, and a
    choice among many candidates that rests on every training item, not on a fifth of them (with a few hundred
    items, a holdout of a few dozen ranks candidates mostly by chance). Reporting refits on all of ``train`` and
    scores ``test``.

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
    choose_folds: int = 0  # >= 2: choose by stratified k-fold cross-validation over train (no validation split)
    _split: tuple[list[tuple[str, str]], list[tuple[str, str]]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.validation is not None:
            split = (list(self.train), list(self.validation))
        elif self.choose_folds >= 2:
            split = (list(self.train), [])  # choose_score cross-validates over train
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
        """Accuracy on the held-out validation split of the training items (with ``choose_folds``: over every
        training item, each predicted by the classifier fitted on the other folds)."""
        if self.choose_folds >= 2 and self.validation is None:
            truth, predicted = [], []
            for rest, held in stats.folds(list(self.train), [y for _, y in self.train], self.choose_folds, self.seed):
                truth += [y for _, y in held]
                predicted += list(self._predict(vectors, rest, held))
            return stats.accuracy(truth, predicted)()
        rest, validation = self._split
        return stats.accuracy([y for _, y in validation], self._predict(vectors, rest, validation))()

    def report_statistic(self, vectors: Callable[[Sequence[str]], np.ndarray]) -> stats.Statistic:
        """Test accuracy of a classifier fitted on all training items, items as units."""
        return stats.accuracy([y for _, y in self.test], self._predict(vectors, self.train, self.test))


@dataclass(frozen=True)
class RetrievalTask:
    """Retrieval: cosine top-k of the queries over a corpus, nDCG@10 by mteb's own metric code, queries as units.

    Queries get ``query_instruction`` (mean pooling without a template), documents none, as in the
    paper's MTEB protocol. Each query's ranking (its ``top_k`` best documents by cosine similarity) goes
    through mteb's ``calculate_retrieval_scores`` (pytrec_eval), whose per-query nDCG@10 values the
    bootstrap resamples: the mean over all of a data set's test queries is mteb's ``ndcg_at_10``.

    Attributes:
        choose: ``(query id, text)`` queries to choose on.
        report: ``(query id, text)`` queries to report on.
        corpus: ``(document id, text)`` documents, searched by both query sets.
        relevant: query id -> {document id: relevance}; every query needs an entry.
        quick: how the data set was cut (the quick mode: fewer queries, a subsampled corpus, shortened
            documents), or ``None`` when the corpus is the data set's full corpus, uncut, and the queries
            are all its test queries: the setting MTEB scores.
    """

    name: str
    choose: Sequence[tuple[str, str]]
    report: Sequence[tuple[str, str]]
    corpus: Sequence[tuple[str, str]]
    relevant: Mapping[str, Mapping[str, int]]
    query_instruction: str | None = None
    top_k: int = 100
    metric: str = "ndcg@10"
    quick: str | None = None
    query_chunk: int = 256  # queries scored at a time: a (query_chunk, len(corpus)) similarity block

    def __post_init__(self) -> None:
        unjudged = [q for q, _ in [*self.choose, *self.report] if q not in self.relevant]
        if unjudged:
            raise ValueError(f"{self.name}: queries without relevance judgements: {unjudged[:5]}")
        if not self.corpus:
            raise ValueError(f"{self.name}: the corpus is empty")

    @property
    def mode(self) -> str:
        """``"full"`` (the full corpus and every test query: MTEB's setting) or ``"quick"`` (see ``quick``)."""
        return "full" if self.quick is None else "quick"

    @property
    def instruction(self) -> Callable[[str], str | None]:
        """Text -> its instruction: ``query_instruction`` for a query text, none for a document."""
        queries = frozenset(t for _, t in [*self.choose, *self.report])
        return lambda text: self.query_instruction if text in queries else None

    def texts(self, split: str) -> list[str]:
        """The split's queries and the corpus."""
        queries = self.choose if split == "choose" else self.report
        return list(dict.fromkeys([*(t for _, t in queries), *(t for _, t in self.corpus)]))

    def rankings(self, queries: Sequence[tuple[str, str]], vectors: Callable) -> dict[str, dict[str, float]]:
        """Each query's ``top_k`` documents by cosine similarity: ``{query id: {document id: similarity}}``.

        Needs no mteb: a machine that encodes can rank, and :meth:`scores_of` score elsewhere.
        """

        def unit(x: np.ndarray) -> np.ndarray:
            norm = np.linalg.norm(x, axis=1, keepdims=True)
            return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)

        q = unit(np.asarray(vectors([t for _, t in queries]), dtype=np.float32))
        d = unit(np.asarray(vectors([t for _, t in self.corpus]), dtype=np.float32))
        k = min(self.top_k, len(self.corpus))
        results: dict[str, dict[str, float]] = {}
        for start in range(0, len(queries), self.query_chunk):  # one block of similarities at a time
            sims = q[start : start + self.query_chunk] @ d.T
            top = np.argpartition(-sims, k - 1, axis=1)[:, :k] if k < len(self.corpus) else None
            for i, row in enumerate(sims):
                idx = np.arange(len(row)) if top is None else top[i]
                results[queries[start + i][0]] = {self.corpus[j][0]: float(row[j]) for j in idx}
        return results

    def scores_of(self, queries: Sequence[tuple[str, str]], results: Mapping[str, Mapping[str, float]]) -> np.ndarray:
        """Each query's nDCG@10 of its ranking in ``results`` (mteb's ``calculate_retrieval_scores``), in order."""
        from mteb._evaluators.retrieval_metrics import calculate_retrieval_scores

        missing = [qid for qid, _ in queries if qid not in results]
        if missing:
            raise ValueError(f"{self.name}: no ranking for queries {missing[:5]}")
        qrels = {qid: {doc: int(r) for doc, r in self.relevant[qid].items()} for qid, _ in queries}
        ranked = {qid: dict(results[qid]) for qid, _ in queries}
        scores = calculate_retrieval_scores(ranked, qrels, [10]).all_scores
        return np.array([scores[qid]["ndcg_cut_10"] for qid, _ in queries])

    def per_query(self, queries: Sequence[tuple[str, str]], vectors: Callable) -> np.ndarray:
        """Each query's nDCG@10 (mteb's ``calculate_retrieval_scores``), in the order of ``queries``."""
        return self.scores_of(queries, self.rankings(queries, vectors))

    def _statistic(self, queries: Sequence[tuple[str, str]], vectors: Callable) -> stats.Statistic:
        return stats.mean_of("ndcg_at_10", self.per_query(queries, vectors))

    def choose_score(self, vectors: Callable[[Sequence[str]], np.ndarray]) -> float:
        """Mean nDCG@10 over the choosing queries."""
        return self._statistic(self.choose, vectors)()

    def report_statistic(self, vectors: Callable[[Sequence[str]], np.ndarray]) -> stats.Statistic:
        """Mean nDCG@10 over the reporting queries, queries as units."""
        return self._statistic(self.report, vectors)
