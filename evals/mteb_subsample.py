"""Quick MTEB runs: every split of a task cut to at most ``limit`` items, reproducibly.

Such scores are not comparable to full ones; :func:`~nosink.evals.mteb_run.run_mteb` records the
limit in mteb's results and in its summary.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from nosink.checks import positive_int

if TYPE_CHECKING:
    from datasets import Dataset
    from mteb import AbsTask

__all__ = ["subsample"]


def _take(n: int, limit: int, rng: np.random.Generator) -> list[int]:
    return sorted(rng.permutation(n)[:limit].tolist()) if n > limit else list(range(n))


def _subsample_rows(ds: Dataset, limit: int, rng: np.random.Generator) -> Dataset:
    return ds.select(_take(len(ds), limit, rng))


def _subsample_within_rows(ds: Dataset, limit: int, rng: np.random.Generator) -> Dataset:
    # Old mteb layout: each row holds whole lists (a clustering set, all pairs of a split).
    from datasets import Dataset

    rows = []
    for row in ds:
        lists = [c for c, v in row.items() if isinstance(v, list)]
        keep = _take(len(row[lists[0]]), limit, rng) if lists else []
        rows.append({c: ([v[i] for i in keep] if c in lists else v) for c, v in row.items()})
    return Dataset.from_list(rows, features=ds.features)


def _subsample_retrieval(split: dict[str, Any], limit: int, rng: np.random.Generator) -> dict[str, Any]:
    # Keep `limit` queries, their judged and top-ranked documents, and up to `limit` other documents.
    queries = _subsample_rows(split["queries"], limit, rng)
    qids = set(queries["id"])
    relevant = {q: d for q, d in split["relevant_docs"].items() if q in qids}
    top = split.get("top_ranked")
    top = {q: d for q, d in top.items() if q in qids} if top is not None else None
    needed = {d for docs in relevant.values() for d in docs} | {d for docs in (top or {}).values() for d in docs}
    corpus = split["corpus"]
    ids = corpus["id"]
    others = [i for i, d in enumerate(ids) if d not in needed]
    extra = {others[i] for i in _take(len(others), limit, rng)}
    corpus = corpus.select([i for i, d in enumerate(ids) if d in needed or i in extra])
    return {**split, "queries": queries, "relevant_docs": relevant, "top_ranked": top, "corpus": corpus}


def subsample(task: AbsTask, limit: int, seed: int) -> None:
    """Cut every split of a loaded task, in place, to at most ``limit`` items (rows, pairs, queries), reproducibly.

    Rows of plain splits are a seeded random subset, kept in their order. Old-style clustering and
    pair classification tasks keep every row and cut the lists inside each. Retrieval keeps
    ``limit`` queries, every document judged or top-ranked for them, and up to ``limit`` others.

    Args:
        task: a loaded mteb task.
        limit: at most this many items per split.
        seed: seed of the random choice.

    Raises:
        ValueError: if ``limit`` is not a positive integer.
    """
    positive_int(limit, "limit")
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.clustering_legacy import AbsTaskClusteringLegacy
    from mteb.abstasks.pair_classification import AbsTaskPairClassification

    rng = np.random.default_rng(seed)

    def cut(obj: Any) -> Any:
        if isinstance(obj, Dataset):
            legacy = isinstance(task, AbsTaskClusteringLegacy) or (
                isinstance(task, AbsTaskPairClassification) and len(obj) == 1
            )
            return _subsample_within_rows(obj, limit, rng) if legacy else _subsample_rows(obj, limit, rng)
        if isinstance(obj, Mapping) and "queries" in obj and "corpus" in obj:
            return _subsample_retrieval(dict(obj), limit, rng)
        if isinstance(obj, DatasetDict):
            return DatasetDict({k: cut(v) for k, v in obj.items()})
        if isinstance(obj, Mapping):
            return {k: cut(v) for k, v in obj.items()}
        return obj

    task.dataset = cut(task.dataset)
