"""The study's tasks from local copies of their data sets (``--data``): seeded samples of each split (retrieval:
the full corpora by default, as MTEB scores them)."""

from __future__ import annotations

import random
from pathlib import Path

from nosink.evals import stats

from .tasks import ClassificationTask, RetrievalTask, STSTask

__all__ = ["load_classification", "load_retrieval", "load_sts", "load_sts17"]


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
    n_queries: int | None = None,
    n_other: int | None = None,
    seed: int = 0,
    doc_words: int | None = None,
) -> RetrievalTask:
    """NFCorpus or SciFact (BEIR folder, test split): the test queries in two seeded halves (choose on the
    first, report on the second) searching the full corpus, as MTEB scores them.

    The quick mode, for smoke tests and small machines, takes any of: a seeded sample of ``n_queries``
    queries; a subsampled corpus (every document judged for a kept query and a seeded random sample of
    ``n_other`` of the rest); documents cut to their first ``doc_words`` words. The task's ``quick``
    then says which, and its scores are not comparable with MTEB's. A document's text is its title and
    text joined as mteb joins them.

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
    cuts = []
    if n_queries is not None and n_queries < len(queries):
        cuts.append(f"{n_queries} of {len(queries)} test queries (seeded sample)")
        queries = rng.sample(queries, n_queries)
    relevant = {q: dict(data["relevant_docs"][q]) for q, _ in queries}
    judged = {d for q, _ in queries for d in relevant[q]}
    docs = data["corpus"]
    texts = {
        i: (f"{title} {text}".strip() if title else text.strip())  # mteb's _create_dataloaders joins them so
        for i, title, text in zip(docs["id"], docs["title"], docs["text"], strict=True)
    }
    if doc_words is not None:
        cuts.append(f"documents cut to their first {doc_words} words")
        texts = {i: " ".join(t.split()[:doc_words]) for i, t in texts.items()}
    others = sorted(set(texts) - judged)
    if n_other is not None and n_other < len(others):
        others = rng.sample(others, n_other)
    keep = set(others) | (judged & set(texts))
    corpus = [(i, texts[i]) for i in docs["id"] if i in keep]
    if len(corpus) < len(texts):
        cuts.append(f"corpus of {len(corpus):,} of {len(texts):,} documents (every judged one + {len(others)} random)")
    first, second = stats.halves(queries, seed=seed)
    quick = "; ".join(cuts) or None
    return RetrievalTask(name, first, second, corpus, relevant, format_instruction(PAPER_TASKS[name]), quick=quick)
