"""A user's own labelled data for ``nosink tune``: one file (or a BEIR folder) per task, cut into a choosing and a
reporting split.

What ``--data`` holds, per task:

- ``sts``: a ``.tsv`` with a header naming ``sentence1``, ``sentence2`` and ``score`` (other columns ignored),
  or a ``.jsonl`` of ``{"sentence1", "sentence2", "score"}`` objects; scores are numbers. Pairs are cut in
  seeded halves: choose on one, report on the other.
- ``classification``: a ``.tsv`` or ``.csv`` with a header naming ``text`` and ``label``, or a ``.jsonl`` of
  ``{"text", "label"}`` objects; at least 2 items of each label. A seeded, label-stratified half trains and
  chooses (by 5-fold cross-validation over it: every item of the half scored once); the classifier refitted on
  that half reports on the other half.
- ``retrieval``: a BEIR folder: ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``,
  ``text``) and ``qrels/test.tsv`` (``query-id<TAB>corpus-id<TAB>score`` with a header). The judged queries
  are cut in seeded halves; both search the whole corpus.
- ``ner``: a CoNLL file (``WORD ... TAG`` per line, the tag last, IOB2, a blank line between sentences). Its
  sentences are cut in seeded halves: probes train on one; the other is halved again, to choose and to report.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nosink.checks import printable
from nosink.evals import stats

from .tasks import ClassificationTask, RetrievalTask, STSTask

CHOOSE_FOLDS = 5  # classification: choose by 5-fold cross-validation over the choosing half

__all__ = ["FORMATS", "TUNE_TASKS", "load_user_ner", "load_user_task"]

TUNE_TASKS = ("sts", "classification", "retrieval", "ner")

FORMATS = {
    "sts": "a .tsv with a header naming sentence1, sentence2 and score, or a .jsonl of such objects",
    "classification": "a .tsv or .csv with a header naming text and label, or a .jsonl of such objects",
    "retrieval": "a BEIR folder: corpus.jsonl, queries.jsonl and qrels/test.tsv",
    "ner": "a CoNLL file: WORD ... TAG per line (IOB2 tags last), a blank line between sentences",
}
"""What ``--data`` holds for each task of :data:`TUNE_TASKS`."""


def _rows(path: Path, columns: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of a .tsv, .csv or .jsonl file as dicts holding at least ``columns``.

    Raises:
        FileNotFoundError: if ``path`` is not a file.
        ValueError: for another suffix, a header without the columns, or a row that lacks one (naming the line).
    """
    where = printable(str(path))
    if not path.is_file():
        raise FileNotFoundError(f"no data file at {where}")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        from nosink.evals.files import read_jsonl

        return read_jsonl(path, columns)
    if suffix not in (".tsv", ".csv"):
        raise ValueError(f"{where}: expected a .tsv, .csv or .jsonl file, got {suffix or 'no suffix'}")
    with path.open(encoding="utf-8-sig", newline="") as f:
        # A .tsv has no quoting (STS-B's own files hold fields that start with '"'); a .csv has CSV's.
        tsv = suffix == ".tsv"
        reader = csv.DictReader(f, delimiter="\t" if tsv else ",", quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(
                f"{where}: the header {printable(repr(reader.fieldnames))} lacks {', '.join(missing)}; the first "
                f"line must name the columns {', '.join(columns)}"
            )
        rows = []
        for n, row in enumerate(reader, 2):
            if any(row.get(c) in (None, "") for c in columns):
                raise ValueError(f"{where}:{n}: an empty or missing {' or '.join(columns)}")
            rows.append(row)
    return rows


def _text(path: Path, n: int, row: dict[str, Any], column: str) -> str:
    """``row[column]`` if it is a string (a .jsonl's ``null``, number or list is refused, not turned into text)."""
    value = row[column]
    if not isinstance(value, str):
        raise ValueError(f"{printable(str(path))}: row {n}: {column} is {printable(repr(value))}, not a string of text")
    return value


def _sts(path: Path, seed: int) -> STSTask:
    pairs = []
    for n, row in enumerate(_rows(path, ("sentence1", "sentence2", "score")), 1):
        value = row["score"]
        try:
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise TypeError
            score = float(value)
        except (TypeError, ValueError, OverflowError):
            score = math.nan
        if not math.isfinite(score):  # nan, inf and 1e999 (inf once read) would rank every candidate wrongly
            raise ValueError(
                f"{printable(str(path))}: row {n}: the score {printable(repr(value))} is not a finite number"
            )
        pairs.append((_text(path, n, row, "sentence1"), _text(path, n, row, "sentence2"), score))
    if len(pairs) < 8:
        raise ValueError(
            f"{printable(str(path))}: {len(pairs)} pairs; tuning needs at least 8 (4 to choose, 4 to report)"
        )
    choose, report = stats.halves(pairs, seed=seed)
    return STSTask(path.stem, choose, report)


def _classification(path: Path, seed: int) -> ClassificationTask:
    items = []
    for n, row in enumerate(_rows(path, ("text", "label")), 1):
        label = row["label"]
        if not isinstance(label, (str, int)):  # a .jsonl's null, list or float (true/false are labels)
            raise ValueError(
                f"{printable(str(path))}: row {n}: the label {printable(repr(label))} is not a string, an integer "
                "or a boolean"
            )
        items.append((_text(path, n, row, "text"), str(label)))
    train, test = stats.holdout(items, [y for _, y in items], 0.5, seed)
    if not test:
        raise ValueError(f"{printable(str(path))}: {len(items)} items; every label needs at least 2 to report on half")
    return ClassificationTask(path.stem, train, test, seed=seed, choose_folds=CHOOSE_FOLDS)


def _retrieval(folder: Path, seed: int) -> RetrievalTask:
    from nosink.evals.mteb_data import _read_beir

    where = printable(str(folder))
    if not folder.is_dir():
        raise FileNotFoundError(f"no BEIR folder at {where}: retrieval reads {FORMATS['retrieval']}")
    missing = [f for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv") if not (folder / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{where} has no {', '.join(missing)}: retrieval reads {FORMATS['retrieval']}")
    data = _read_beir(folder)["default"]["test"]
    queries = list(zip(data["queries"]["id"], data["queries"]["text"], strict=True))
    if len(queries) < 4:
        raise ValueError(f"{where}: {len(queries)} judged test queries; tuning needs at least 4")
    docs = data["corpus"]
    corpus = [
        (i, f"{title} {text}".strip() if title else text.strip())  # as mteb joins them
        for i, title, text in zip(docs["id"], docs["title"], docs["text"], strict=True)
    ]
    relevant = {q: dict(data["relevant_docs"][q]) for q, _ in queries}
    choose, report = stats.halves(queries, seed=seed)
    return RetrievalTask(folder.name, choose, report, corpus, relevant)


def load_user_task(task: str, data: str | Path, seed: int = 0) -> STSTask | ClassificationTask | RetrievalTask:
    """The study's task for ``task`` (``sts``, ``classification`` or ``retrieval``) from the user's ``data``.

    Raises:
        FileNotFoundError: for a missing file or folder, or a BEIR folder without one of its files.
        ValueError: for an unknown task, a file in another format (naming the line where one is at fault),
            or too little data to cut in two.
    """
    path = Path(data)
    if task == "sts":
        return _sts(path, seed)
    if task == "classification":
        return _classification(path, seed)
    if task == "retrieval":
        return _retrieval(path, seed)
    raise ValueError(f"unknown task {printable(repr(task))}; load_user_task reads sts, classification or retrieval")


def load_user_ner(data: str | Path, seed: int = 0) -> tuple[list[Any], list[Any]]:
    """The sentences of a CoNLL file cut in seeded halves: ``(train, dev)`` for the NER study.

    Raises:
        FileNotFoundError: if the file is missing.
        ValueError: for a malformed line (naming it), or fewer than 8 sentences.
    """
    from nosink.evals.ner import read_conll

    sentences = read_conll(data)
    if len(sentences) < 8:
        raise ValueError(f"{printable(str(data))}: {len(sentences)} sentences; tuning needs at least 8")
    order = list(range(len(sentences)))
    random.Random(seed).shuffle(order)
    half = len(order) // 2
    return [sentences[i] for i in order[:half]], [sentences[i] for i in order[half:]]
