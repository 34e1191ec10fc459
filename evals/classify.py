"""Domain classification (paper section 4.1): logistic regression on frozen sentence embeddings.

The protocol: embed each text (mean pooling, no instruction by default, as the paper does for
domain tasks), fit scikit-learn's ``LogisticRegression`` with LBFGS for 100 iterations, and
report accuracy and F1 (macro, micro, weighted) from scikit-learn. Small or imbalanced training
sets are oversampled with imbalanced-learn's SMOTE first.

>>> rows = read_labeled_lines(["text,label", "good loan,finance", "a fever,medicine"])
>>> [(r.text, r.label) for r in rows]
[('good loan', 'finance'), ('a fever', 'medicine')]
"""

from __future__ import annotations

import csv
import io
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from nosink.layerspec import Spec, as_spec
from nosink.models import EncoderFromDecoder

from .files import read_jsonl

__all__ = [
    "ClassificationResult",
    "Example",
    "evaluate_classification",
    "fit_and_score",
    "read_labeled",
    "read_labeled_lines",
    "should_smote",
    "subsample",
]

logger = logging.getLogger(__name__)

SMOTE_BELOW = 1000  # "auto" oversamples training sets smaller than this ...
SMOTE_IMBALANCE = 3.0  # ... or whose largest class is this many times the smallest


@dataclass(frozen=True)
class Example:
    """One labelled text."""

    text: str
    label: str


@dataclass(frozen=True)
class ClassificationResult:
    """Scores of one spec on one test set (all from scikit-learn)."""

    spec: str
    accuracy: float
    f1_macro: float
    f1_micro: float
    f1_weighted: float
    smote: bool
    n_train: int
    n_test: int

    def as_dict(self) -> dict[str, Any]:
        """The result as a plain dict (for JSON)."""
        return asdict(self)


def read_labeled_lines(
    lines: Iterable[str], text_column: str = "text", label_column: str = "label", delimiter: str | None = None
) -> list[Example]:
    """Rows of a delimited file with a header (the delimiter is sniffed among ``,;\\t|`` unless given).

    Raises:
        ValueError: if a column is missing or a row is short.
    """
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    if delimiter is None:
        header = text.split("\n", 1)[0]
        delimiter = max(",;\t|", key=header.count)
    reader = csv.DictReader(io.StringIO(text), delimiter=delimiter)
    fields = reader.fieldnames or []
    for column in (text_column, label_column):
        if column not in fields:
            raise ValueError(f"no column {column!r}; the header has {fields}")
    out = []
    for number, row in enumerate(reader, 2):
        if row.get(text_column) is None or row.get(label_column) is None:
            raise ValueError(f"row {number} is short: {row}")
        out.append(Example(row[text_column], row[label_column]))
    return out


def read_labeled(
    path: str | Path, text_column: str = "text", label_column: str = "label", delimiter: str | None = None
) -> list[Example]:
    """Labelled texts from a CSV/TSV file with a header, or a JSONL file (one object per line).

    Raises:
        FileNotFoundError: if the file is missing.
        ValueError: for a missing column or a malformed line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no data file at {path}")
    if path.suffix.lower() in (".jsonl", ".json"):
        rows = read_jsonl(path, (text_column, label_column))
        return [Example(str(row[text_column]), str(row[label_column])) for row in rows]
    # newline="": the csv reader keeps line breaks inside quoted fields; utf-8-sig drops a byte-order mark
    with open(path, encoding="utf-8-sig", newline="") as f:
        return read_labeled_lines(f, text_column, label_column, delimiter)


def subsample(examples: Sequence[Example], n: int | None, seed: int = 0) -> list[Example]:
    """A seeded, label-stratified subsample of at most ``n`` examples (all of them for ``None``).

    Files are often sorted by label, so the first n rows would hold a few classes only.
    """
    if n is None or n >= len(examples):
        return list(examples)
    import random

    rng = random.Random(seed)
    by_label: dict[str, list[Example]] = {}
    for e in examples:
        by_label.setdefault(e.label, []).append(e)
    for group in by_label.values():
        rng.shuffle(group)
    # Round-robin over the labels keeps their proportions close and every label present while n allows.
    out: list[Example] = []
    queues = [list(g) for g in by_label.values()]
    while len(out) < n:
        for q in queues:
            if q and len(out) < n:
                out.append(q.pop())
    rng.shuffle(out)
    return out


def should_smote(labels: Sequence[str]) -> bool:
    """The "auto" rule: oversample a training set that is small or imbalanced."""
    counts = Counter(labels)
    return len(labels) < SMOTE_BELOW or max(counts.values()) >= SMOTE_IMBALANCE * min(counts.values())


def fit_and_score(
    train_x: np.ndarray,
    train_y: Sequence[str],
    test_x: np.ndarray,
    test_y: Sequence[str],
    smote: bool | Literal["auto"] = "auto",
    max_iter: int = 100,
    seed: int = 0,
) -> tuple[dict[str, float], bool]:
    """Fit logistic regression (LBFGS, ``max_iter`` iterations) and score it with scikit-learn.

    Returns:
        ``({accuracy, f1_macro, f1_micro, f1_weighted}, whether SMOTE ran)``.

    Raises:
        ValueError: for fewer than two classes in training.
    """
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score

    if len(set(train_y)) < 2:
        raise ValueError("classification needs at least two classes in the training set")
    use_smote = should_smote(train_y) if smote == "auto" else bool(smote)
    x, y = np.asarray(train_x), np.asarray(train_y)
    if use_smote:
        smallest = min(Counter(train_y).values())
        if smallest < 2:
            logger.warning("SMOTE skipped: a class has a single training example")
            use_smote = False
        else:
            from imblearn.over_sampling import SMOTE

            x, y = SMOTE(k_neighbors=min(5, smallest - 1), random_state=seed).fit_resample(x, y)
    model = LogisticRegression(solver="lbfgs", max_iter=max_iter, random_state=seed)
    with warnings.catch_warnings():
        # 100 iterations is the protocol (MTEB's too); not converging within them is expected, not an error.
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(x, y)
    predicted = model.predict(np.asarray(test_x))
    scores = {
        "accuracy": float(accuracy_score(test_y, predicted)),
        "f1_macro": float(f1_score(test_y, predicted, average="macro")),
        "f1_micro": float(f1_score(test_y, predicted, average="micro")),
        "f1_weighted": float(f1_score(test_y, predicted, average="weighted")),
    }
    return scores, use_smote


def evaluate_classification(
    encoder: EncoderFromDecoder,
    train: Sequence[Example],
    test: Sequence[Example],
    specs: Sequence[str | Spec] | None = None,
    instruction: str | None = None,
    smote: bool | Literal["auto"] = "auto",
    max_iter: int = 100,
    batch_size: int = 32,
    show_progress_bar: bool | None = None,
) -> list[ClassificationResult]:
    """Scores of each spec (default: the encoder's own) on a labelled train/test split.

    Embeddings are mean-pooled and not normalised (as MTEB's classification does); all specs are
    encoded in one pass that shares their common layers.

    Raises:
        ValueError: for an empty split or fewer than two training classes.
    """
    if not train or not test:
        raise ValueError(f"need training and test examples, got {len(train)} and {len(test)}")
    unseen = sorted({e.label for e in test} - {e.label for e in train})
    if unseen:
        raise ValueError(f"test labels {unseen[:10]} never occur in the training examples")
    plans = [encoder.plan_for(as_spec(s)) for s in (specs or [encoder.spec])]
    names = list(dict.fromkeys(plan.name for plan in plans))  # the spec, and its exit when the encoder has one
    kwargs = {"batch_size": batch_size, "show_progress_bar": show_progress_bar}
    train_x = encoder.encode_specs(plans, [e.text for e in train], instruction, **kwargs)
    test_x = encoder.encode_specs(plans, [e.text for e in test], instruction, **kwargs)
    results = []
    for name in names:
        scores, used = fit_and_score(
            train_x[name], [e.label for e in train], test_x[name], [e.label for e in test], smote, max_iter
        )
        results.append(ClassificationResult(name, **scores, smote=used, n_train=len(train), n_test=len(test)))
        logger.info("classification %s: accuracy %.4f, macro-F1 %.4f", name, scores["accuracy"], scores["f1_macro"])
    return results
