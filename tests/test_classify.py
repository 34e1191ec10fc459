"""Domain classification end to end on labelled texts built here, with a tiny random model."""

import json
import random

import numpy as np
import pytest
from resources import missing
from tiny import tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder
from nosink.evals.classify import (
    Example,
    evaluate_classification,
    fit_and_score,
    read_labeled,
    read_labeled_lines,
    should_smote,
)

pytest.importorskip("sklearn")  # the eval extra
pytest.importorskip("imblearn")  # the eval extra

TOPICS = {"finance": ["bank", "money", "loan"], "travel": ["paris", "london", "city", "park"]}
FILLER = ["the", "is", "very", "good", "we", "like"]


def make(n: int, seed: int) -> list[Example]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        label = rng.choice(sorted(TOPICS))
        words = [rng.choice(TOPICS[label]) for _ in range(2)] + [rng.choice(FILLER) for _ in range(3)]
        rng.shuffle(words)
        out.append(Example(" ".join(words), label))
    return out


def test_readers(tmp_path):
    assert read_labeled_lines(["text;label_name", "i am happy;joy"], label_column="label_name") == [
        Example("i am happy", "joy")
    ]
    (tmp_path / "d.jsonl").write_text(json.dumps({"text": "a loan", "label": 1}) + "\n\n")
    assert read_labeled(tmp_path / "d.jsonl") == [Example("a loan", "1")]
    (tmp_path / "d.csv").write_text("sentence,label\nx,y\n")
    with pytest.raises(ValueError, match="no column 'text'; the header has \\['sentence', 'label'\\]"):
        read_labeled(tmp_path / "d.csv")
    (tmp_path / "bad.jsonl").write_text("{nope\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: not a JSON line"):
        read_labeled(tmp_path / "bad.jsonl")
    (tmp_path / "keys.jsonl").write_text(json.dumps({"text": "a loan"}) + "\n")
    with pytest.raises(ValueError, match=r"keys\.jsonl:1: expected the keys text, label; missing label"):
        read_labeled(tmp_path / "keys.jsonl")


def test_labeled_files_split_only_at_line_ends_and_drop_a_byte_order_mark(tmp_path):
    # A JSON string may hold U+2028 or \x85 as they are (json.dumps with ensure_ascii=False): splitlines() cuts there.
    rows = [{"text": "one\u2028line", "label": "a"}, {"text": "next\x85line", "label": "b"}]
    body = "\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows)
    (tmp_path / "lab.jsonl").write_bytes(("\ufeff" + body).encode("utf-8"))
    assert read_labeled(tmp_path / "lab.jsonl") == [Example("one\u2028line", "a"), Example("next\x85line", "b")]
    (tmp_path / "lab.csv").write_bytes('\ufefftext,label\n"two\u2028parts",c\n'.encode())
    assert read_labeled(tmp_path / "lab.csv") == [Example("two\u2028parts", "c")]


def test_shared_banking77_copy_reads():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "shared" / "data" / "banking77" / "test.csv"
    if not path.is_file():
        missing("../shared/data is absent")
    rows = read_labeled(path, label_column="category")
    assert len(rows) == 3080 and len({r.label for r in rows}) == 77


def test_constructed_scores():
    # Separable features: a perfect classifier scores 1.0 everywhere; shuffled training labels do not.
    rng = np.random.default_rng(0)
    y = ["a"] * 50 + ["b"] * 50
    x = np.concatenate([rng.normal(-3, 1, (50, 4)), rng.normal(3, 1, (50, 4))])
    scores, used = fit_and_score(x, y, x, y, smote=False)
    assert scores == {"accuracy": 1.0, "f1_macro": 1.0, "f1_micro": 1.0, "f1_weighted": 1.0} and not used
    shuffled = list(rng.permutation(y))
    worse, _ = fit_and_score(x, shuffled, x, y, smote=False)
    assert worse["accuracy"] < 0.9


def test_smote_rule_and_run():
    assert should_smote(["a"] * 10 + ["b"] * 10)  # small
    assert not should_smote(["a"] * 600 + ["b"] * 600)
    assert should_smote(["a"] * 1500 + ["b"] * 400)  # imbalanced
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(-3, 1, (30, 4)), rng.normal(3, 1, (5, 4))])
    y = ["a"] * 30 + ["b"] * 5
    scores, used = fit_and_score(x, y, x, y)
    assert used and scores["f1_macro"] > 0.9
    with pytest.raises(ValueError, match="at least two classes"):
        fit_and_score(x, ["a"] * 35, x, y)


def test_end_to_end_with_specs():
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer())
    train, test = make(80, seed=1), make(40, seed=2)
    results = evaluate_classification(encoder, train, test, specs=["F*", "F* | M0B*2"])
    assert [r.spec for r in results] == ["F*", "F* | M0B*2"]
    for r in results:
        assert r.n_train == 80 and r.n_test == 40 and r.smote  # 80 < 1000: SMOTE
        assert (r.accuracy, r.f1_macro) == pytest.approx(_sklearn_reference(encoder, r.spec, train, test), abs=1e-9)
    assert len({(r.accuracy, r.f1_macro) for r in results}) == 2  # the specs' features differ, and so do scores


def _sklearn_reference(encoder, spec, train, test) -> tuple[float, float]:
    """The protocol written out with scikit-learn and imbalanced-learn on encode()'s own features."""
    from imblearn.over_sampling import SMOTE
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score

    one = EncoderFromDecoder(encoder.decoder, spec, encoder.tokenizer)
    x, y = one.encode([e.text for e in train]), [e.label for e in train]
    smallest = min(y.count(label) for label in set(y))
    x, y = SMOTE(k_neighbors=min(5, smallest - 1), random_state=0).fit_resample(x, y)
    model = LogisticRegression(solver="lbfgs", max_iter=100, random_state=0).fit(x, y)
    predicted = model.predict(one.encode([e.text for e in test]))
    gold = [e.label for e in test]
    return float(accuracy_score(gold, predicted)), float(f1_score(gold, predicted, average="macro"))
    with pytest.raises(ValueError, match="need training and test examples"):
        evaluate_classification(encoder, [], test)


def test_subsample_is_stratified_and_seeded():
    from nosink.evals.classify import subsample

    rows = [Example(f"t{i}", "a") for i in range(90)] + [Example(f"u{i}", "b") for i in range(10)]  # sorted by label
    sample = subsample(rows, 20, seed=1)
    assert len(sample) == 20 and {e.label for e in sample} == {"a", "b"}
    assert sample == subsample(rows, 20, seed=1) and subsample(rows, None) == rows


def test_test_labels_unseen_in_training_are_an_error():
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer())
    train = [Example("bank money", "finance"), Example("paris city", "travel")] * 3
    with pytest.raises(ValueError, match=r"test labels \['food'\] never occur in the training examples"):
        evaluate_classification(encoder, train, [Example("good food", "food")])
