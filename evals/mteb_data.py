"""Where MTEB task data comes from: a local folder under ``data_dir``, else the hub.

Two kinds of local folder are read: ``data_dir/<TaskName>/`` holding a copy of the task's hub
dataset (loaded with mteb's own loader and transform), and the plain copies of seven tasks in
their original formats (``stsb/``, ``sts17/``, ``banking77/``, ``emotion/``, ``massive_intent/``,
and ``nfcorpus/``, ``scifact/`` in BEIR format; see :data:`LOCAL_FOLDERS`), parsed into the
structures mteb's task classes expect: a ``DatasetDict`` per subset for STS and classification
(the multilingual STS17 and MASSIVE under their English subsets, ``en-en`` and ``en``), and for
retrieval ``{"default": {"test": {"corpus", "queries", "relevant_docs", "top_ranked"}}}``, which
mteb's own retrieval evaluator scores (nDCG@10 and the rest). A task with neither a local folder
nor a reachable hub has no data: :func:`load_task_data` says why instead of raising.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nosink.checks import printable
from nosink.models.texts import read_lines

from .files import read_jsonl

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict
    from mteb import AbsTask

__all__ = ["LOCAL_FOLDERS", "load_local_data", "load_task_data"]

logger = logging.getLogger(__name__)

# dair-ai/emotion's label ids (the hub copy mteb uses keeps them).
_EMOTION_LABELS = ("sadness", "joy", "love", "anger", "fear", "surprise")


def _labelled(rows: list[tuple[str, str]], names: Sequence[str]) -> Dataset:
    from datasets import Dataset

    index = {name: i for i, name in enumerate(names)}
    unknown = sorted({label for _, label in rows} - index.keys())
    if unknown:
        raise ValueError(f"labels not in the label set: {unknown[:5]}")
    return Dataset.from_dict({"text": [t for t, _ in rows], "label": [index[label] for _, label in rows]})


def _read_stsb(folder: Path) -> DatasetDict:
    from datasets import Dataset, DatasetDict

    splits = {}
    for split, file in (("train", "sts-train.csv"), ("validation", "sts-dev.csv"), ("test", "sts-test.csv")):
        if not (folder / file).is_file():
            continue
        s1, s2, scores = [], [], []
        with (folder / file).open(encoding="utf-8-sig", newline="") as f:
            for n, row in enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
                if not row:
                    continue
                if len(row) < 7:
                    raise ValueError(f"{folder / file}:{n}: expected 7 tab-separated columns, got {len(row)}")
                # genre, file, year, id, score, sentence1, sentence2 (extra columns are ignored)
                try:
                    scores.append(float(row[4]))
                except ValueError:
                    score = printable(repr(row[4]))
                    raise ValueError(f"{folder / file}:{n}: the score {score} is not a number") from None
                s1.append(row[5])
                s2.append(row[6])
        splits[split] = Dataset.from_dict({"sentence1": s1, "sentence2": s2, "score": scores})
    return DatasetDict(splits)


def _read_banking77(folder: Path) -> DatasetDict:
    from datasets import DatasetDict

    data = {}
    for split in ("train", "test"):
        path = folder / f"{split}.csv"
        with path.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.DictReader(f)
            if not {"text", "category"} <= set(reader.fieldnames or ()):
                header = printable(repr(reader.fieldnames))
                raise ValueError(f"{path}: expected a header with text and category, got {header}")
            data[split] = [(r["text"], r["category"]) for r in reader]
    names_file = folder / "categories.json"
    if names_file.is_file():
        names = json.loads(names_file.read_bytes())  # bytes: json drops a byte-order mark itself
    else:
        names = sorted({label for rows in data.values() for _, label in rows})
    return DatasetDict({split: _labelled(rows, names) for split, rows in data.items()})


def _read_emotion(folder: Path) -> DatasetDict:
    from datasets import DatasetDict

    data = {}
    for split, file in (("train", "train.txt"), ("validation", "val.txt"), ("test", "test.txt")):
        if not (folder / file).is_file():
            continue
        lines = read_lines(folder / file)  # not str.splitlines(): a tweet may hold U+2028, \x85 or a form feed
        rows = [tuple(line.rsplit(";", 1)) for line in lines[1:] if line.strip()]  # the first line is a header
        if any(len(r) != 2 for r in rows):
            raise ValueError(f"{folder / file}: every line must be text;label_name")
        data[split] = rows
    present = {label for rows in data.values() for _, label in rows}
    names = list(_EMOTION_LABELS) if present <= set(_EMOTION_LABELS) else sorted(present)
    return DatasetDict({split: _labelled(rows, names) for split, rows in data.items()})


def _read_sts17(folder: Path) -> dict[str, DatasetDict]:
    # SemEval-2017 track 5 (en-en): sentence pairs and gold scores in two files, line for line.
    from datasets import Dataset, DatasetDict

    inputs, gold = folder / "STS.input.track5.en-en.txt", folder / "STS.gs.track5.en-en.txt"
    pairs = [line.split("\t") for line in read_lines(inputs)]
    scores_text = [line.strip() for line in read_lines(gold)]
    while pairs and pairs[-1] == [""]:
        pairs.pop()
    while scores_text and not scores_text[-1]:
        scores_text.pop()
    for n, pair in enumerate(pairs, 1):
        if len(pair) != 2:
            raise ValueError(f"{inputs}:{n}: expected sentence1<TAB>sentence2, got {len(pair)} columns")
    if len(scores_text) != len(pairs):
        raise ValueError(f"{gold} has {len(scores_text)} scores for the {len(pairs)} pairs of {inputs.name}")
    scores = []
    for n, text in enumerate(scores_text, 1):
        try:
            scores.append(float(text))
        except ValueError:
            raise ValueError(f"{gold}:{n}: the score {printable(repr(text))} is not a number") from None
    test = Dataset.from_dict({"sentence1": [a for a, _ in pairs], "sentence2": [b for _, b in pairs], "score": scores})
    return {"en-en": DatasetDict({"test": test})}


def _read_massive_intent(folder: Path) -> dict[str, DatasetDict]:
    # MASSIVE's own intent ids (label_text names them): integer labels, as for Banking77 and Emotion.
    from datasets import Dataset, DatasetDict

    splits = {}
    for split in ("train", "validation", "test"):
        path = folder / f"{split}.jsonl"
        if path.is_file():
            rows = read_jsonl(path, ("text", "label"))
            bad = next((n for n, r in enumerate(rows, 1) if type(r["label"]) is not int), None)
            if bad is not None:
                raise ValueError(f"{path}: row {bad}'s label is not an integer intent id")
            splits[split] = Dataset.from_dict({"text": [r["text"] for r in rows], "label": [r["label"] for r in rows]})
    return {"en": DatasetDict(splits)}


def _read_beir(folder: Path) -> dict[str, dict[str, Any]]:
    # BEIR: corpus.jsonl, queries.jsonl, qrels/<split>.tsv. As mteb's own loader: ids as strings,
    # queries kept only where the split's qrels judge them, qrels as {query: {document: score}}.
    from datasets import Dataset

    docs = read_jsonl(folder / "corpus.jsonl", ("_id", "text"))
    corpus = Dataset.from_dict(
        {
            "id": [str(d["_id"]) for d in docs],
            "title": [d.get("title") or "" for d in docs],
            "text": [d["text"] for d in docs],
        }
    )
    all_queries = read_jsonl(folder / "queries.jsonl", ("_id", "text"))
    splits: dict[str, Any] = {}
    for qrels_file in sorted((folder / "qrels").glob("*.tsv")):
        relevant: dict[str, dict[str, int]] = {}
        with qrels_file.open(encoding="utf-8-sig", newline="") as f:
            for n, row in enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
                if not row or (n == 1 and row[0] == "query-id"):
                    continue
                if len(row) != 3:
                    expected = "query-id<TAB>corpus-id<TAB>score"
                    raise ValueError(f"{qrels_file}:{n}: expected {expected}, got {len(row)} columns")
                try:
                    score = int(float(row[2]))
                except ValueError:
                    raise ValueError(f"{qrels_file}:{n}: the score {printable(repr(row[2]))} is not a number") from None
                relevant.setdefault(row[0], {})[row[1]] = score
        queries = [q for q in all_queries if str(q["_id"]) in relevant]
        splits[qrels_file.stem] = {
            "corpus": corpus,
            "queries": Dataset.from_dict(
                {"id": [str(q["_id"]) for q in queries], "text": [q["text"] for q in queries]}
            ),
            "relevant_docs": relevant,
            "top_ranked": None,
        }
    if not splits:
        raise ValueError(f"{folder / 'qrels'}: no <split>.tsv file of judgements")
    return {"default": splits}


LOCAL_FOLDERS: dict[str, tuple[str, Callable[[Path], Any]]] = {
    "STSBenchmark": ("stsb", _read_stsb),
    "STS17": ("sts17", _read_sts17),
    "Banking77Classification": ("banking77", _read_banking77),
    "EmotionClassification": ("emotion", _read_emotion),
    "MassiveIntentClassification": ("massive_intent", _read_massive_intent),
    "NFCorpus": ("nfcorpus", _read_beir),
    "SciFact": ("scifact", _read_beir),
}
"""Task name -> (folder under ``data_dir``, reader): the plain copies in their original formats.

Each reader returns what the task's ``dataset`` attribute holds once loaded: a ``DatasetDict`` of
splits; for a multilingual task, ``{subset: DatasetDict}`` (STS17 ``en-en``, MASSIVE ``en``); for
retrieval (BEIR folders), ``{"default": {split: {"corpus", "queries", "relevant_docs", "top_ranked"}}}``."""


def load_local_data(task: AbsTask, data_dir: str | Path) -> Path | None:
    """Fill ``task.dataset`` from a local folder under ``data_dir``; return the folder, or ``None`` if none.

    ``data_dir/<task name>/`` (a copy of the task's hub dataset) is loaded by mteb itself, with the
    task's own transform; else the plain copy named in :data:`LOCAL_FOLDERS` is parsed into the
    columns mteb's task classes expect (``sentence1``/``sentence2``/``score`` for STS,
    ``text``/``label`` for classification, corpus/queries/qrels for retrieval) and the task is
    marked loaded. A multilingual task keeps only the subsets the copy holds (STS17 ``en-en``,
    MASSIVE ``en``), with a log warning when it asked for more.

    Args:
        task: an mteb task object (not yet loaded).
        data_dir: the folder holding local copies (``~`` is expanded).

    Raises:
        ValueError: for a plain copy that is not in its format (naming the file, and the line
            where there is one), or with labels outside the task's label set.
    """
    data_dir = Path(data_dir).expanduser()
    name = task.metadata.name
    hub_copy = data_dir / name
    if hub_copy.is_dir():
        dataset = {**task.metadata.dataset, "path": str(hub_copy)}
        task.metadata = task.metadata.model_copy(update={"dataset": dataset})  # a copy: the class keeps its own
        task.load_data()
        return hub_copy
    if name in LOCAL_FOLDERS:
        folder_name, reader = LOCAL_FOLDERS[name]
        folder = data_dir / folder_name
        if folder.is_dir():
            task.dataset = reader(folder)
            task.data_loaded = True
            if task.metadata.is_multilingual and task.hf_subsets:
                held = [s for s in task.hf_subsets if s in task.dataset]
                if len(held) < len(task.hf_subsets):
                    logger.warning(
                        "%s: the local copy %s holds only the subsets %s; the others are not evaluated",
                        name,
                        folder,
                        ", ".join(task.dataset),
                    )
                    task.hf_subsets = held
            return folder
    return None


def load_task_data(task: AbsTask, data_dir: str | Path | None) -> tuple[str | None, str | None]:
    """Load a task's data, from ``data_dir`` first, else the hub; report where it came from or why it did not.

    Args:
        task: an mteb task object; one already loaded is left as it is.
        data_dir: the folder holding local copies (see :func:`load_local_data`), or ``None``.

    Returns:
        ``(source, None)`` on success, where ``source`` is ``"preloaded"``, ``"local:<folder>"`` or
        ``"hub:<dataset>"``; ``(None, reason)`` when there is no data (no local copy and the hub
        failed), the reason naming both.
    """
    if task.data_loaded:
        return "preloaded", None
    if data_dir is not None:
        folder = load_local_data(task, data_dir)
        if folder is not None:
            return f"local:{folder}", None
    try:
        task.load_data()
    except Exception as err:  # the hub (or its offline mode) fails in many ways; all mean "no data"
        where = f"no local copy under {data_dir}" if data_dir is not None else "no data_dir given"
        return None, f"{where} and the hub failed: {type(err).__name__}: {err}"
    return f"hub:{task.metadata.dataset.get('path')}", None
