"""Local copies of MTEB task data: the plain formats read row for row, bad files named in the error."""

import json
import random
from pathlib import Path

import numpy as np
import pytest

mteb = pytest.importorskip("mteb")

from test_mteb import SCIFACT_PROMPT, SPEC, make_encoder, sentence, write_data  # noqa: E402

from nosink.evals.mteb_data import LOCAL_FOLDERS, load_local_data, load_task_data  # noqa: E402
from nosink.evals.mteb_run import run_mteb  # noqa: E402
from nosink.evals.mteb_tasks import resolve_tasks  # noqa: E402


def test_plain_copies_fill_the_columns_mteb_expects(tmp_path):
    data = write_data(tmp_path)
    sts = mteb.get_task("STSBenchmark")
    assert load_local_data(sts, tmp_path) == tmp_path / "stsb" and sts.data_loaded
    test = sts.dataset["test"]
    assert list(zip(test["sentence1"], test["sentence2"], test["score"], strict=True)) == data["sts"]
    banking = mteb.get_task("Banking77Classification")
    assert load_task_data(banking, tmp_path) == (f"local:{tmp_path / 'banking77'}", None)
    assert banking.dataset["test"]["text"] == [t for t, _ in data["banking"]["test"]]
    assert load_local_data(mteb.get_task("SciFact"), tmp_path) is None


def test_emotion_lines_split_only_at_line_ends(tmp_path):
    # str.splitlines() also splits at U+2028, \x85 and form feeds: row i must stay line i.
    texts = ["i feel\u2028fine", "a form\x0cfeed", "next\x85line", "plain"]
    (tmp_path / "emotion").mkdir()
    body = "".join(f"{text};{label}\r\n" for text, label in zip(texts, ["joy", "sadness", "joy", "fear"], strict=True))
    (tmp_path / "emotion" / "test.txt").write_text("\ufefftext;label_name\r\n" + body, encoding="utf-8", newline="")
    task = mteb.get_task("EmotionClassification")
    load_local_data(task, tmp_path)
    assert task.dataset["test"]["text"] == texts
    assert task.dataset["test"]["label"] == [1, 0, 1, 4]  # dair-ai/emotion's label ids


def test_a_byte_order_mark_is_not_part_of_the_header(tmp_path):
    write_data(tmp_path)
    for split in ("train", "test"):
        path = tmp_path / "banking77" / f"{split}.csv"
        path.write_text("\ufeff" + path.read_text(encoding="utf-8"), encoding="utf-8")
    task = mteb.get_task("Banking77Classification")
    load_local_data(task, tmp_path)
    assert len(task.dataset["test"]) == 12


# The task each plain copy's folder belongs to.
FOLDER_TASKS = {
    "banking77": "Banking77Classification",
    "stsb": "STSBenchmark",
    "sts17": "STS17",
    "massive_intent": "MassiveIntentClassification",
    "scifact": "SciFact",
}


@pytest.mark.parametrize(
    ("file", "text", "message"),
    [
        ("banking77/test.csv", "sentence,intent\nhi,card_arrival\n", r"test.csv: expected a header with text and"),
        ("stsb/sts-test.csv", "g\tf\t2012\t1\tfive\ta\tb\n", r"sts-test.csv:1: the score 'five' is not a number"),
        ("stsb/sts-test.csv", "g\tf\t2012\t1\t4.0\ta\n", r"sts-test.csv:1: expected 7 tab-separated columns, got 6"),
        ("sts17/STS.gs.track5.en-en.txt", "1.0\n", r"has 1 scores for the 12 pairs"),
        ("sts17/STS.input.track5.en-en.txt", "a\tb\tc\n", r"en-en.txt:1: expected sentence1<TAB>sentence2, got 3"),
        ("massive_intent/test.jsonl", '{"text": "hi"}\n', r"test.jsonl:1: expected the keys text, label; missing"),
        ("scifact/qrels/test.tsv", "query-id\tcorpus-id\tscore\n1\t100\n", r"test.tsv:2: expected query-id<TAB>"),
        ("scifact/corpus.jsonl", '{"_id": "1", "text": "x"}\nnot json\n', r"corpus.jsonl:2: not a JSON line"),
    ],
)
def test_a_malformed_copy_names_the_file(tmp_path, file, text, message):
    write_data(tmp_path)
    write_new_formats(tmp_path)
    (tmp_path / file).write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_local_data(resolve_tasks([FOLDER_TASKS[file.split("/")[0]]])[0], tmp_path)


def test_no_data_is_a_reason_not_an_error(tmp_path):
    source, reason = load_task_data(mteb.get_task("SciFact"), tmp_path)
    assert source is None
    assert reason.startswith(f"no local copy under {tmp_path} and the hub failed: ")


# ---------------------------------------------------------------- STS17, MASSIVE, NFCorpus, SciFact

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def write_new_formats(root: Path) -> dict:
    """Tiny copies in the shared folders' formats: sts17/ (SemEval), massive_intent/ (JSON lines), scifact/ (BEIR)."""
    rng = random.Random(3)
    sts17 = root / "sts17"
    sts17.mkdir(parents=True)
    pairs = [(sentence(rng), sentence(rng), round(rng.uniform(0, 5), 1)) for _ in range(12)]
    (sts17 / "STS.input.track5.en-en.txt").write_text("".join(f"{a}\t{b}\n" for a, b, _ in pairs), encoding="utf-8")
    (sts17 / "STS.gs.track5.en-en.txt").write_text("".join(f"{s:.6f}\n" for *_, s in pairs), encoding="utf-8")

    massive = root / "massive_intent"
    massive.mkdir()
    rows = {}
    for split, n in (("train", 6), ("validation", 2), ("test", 3)):
        rows[split] = [(f"{sentence(rng)} {k}", intent) for intent in (48, 34, 1) for k in range(n)]
        names = {48: "alarm_set", 34: "iot_cleaning", 1: "iot_hue_lightchange"}
        lines = [
            json.dumps({"id": str(i), "label": c, "text": t, "label_text": names[c]})
            for i, (t, c) in enumerate(rows[split])
        ]
        (massive / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")

    scifact = root / "scifact"
    (scifact / "qrels").mkdir(parents=True)
    docs = {f"{100 + i}": (sentence(rng, 3) if i % 2 else "", sentence(rng, 8)) for i in range(8)}
    queries = {"1": sentence(rng, 4), "2": sentence(rng, 4), "3": sentence(rng, 4), "9": sentence(rng, 4)}
    qrels = {"1": {"100": 1}, "2": {"102": 2, "105": 1}, "3": {"107": 1}}  # query 9 is not judged in test
    lines = [json.dumps({"_id": d, "title": title, "text": text}) for d, (title, text) in docs.items()]
    (scifact / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    lines = [json.dumps({"_id": q, "text": text, "metadata": {}}) for q, text in queries.items()]
    (scifact / "queries.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    body = "".join(f"{q}\t{d}\t{s}\n" for q, ds in qrels.items() for d, s in ds.items())
    (scifact / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + body, encoding="utf-8")
    return {"sts17": pairs, "massive": rows, "docs": docs, "queries": queries, "qrels": qrels}


def test_new_plain_copies_fill_the_structures_mteb_expects(tmp_path):
    data = write_new_formats(tmp_path)
    sts = resolve_tasks(["STS17"])[0]
    assert load_local_data(sts, tmp_path) == tmp_path / "sts17"
    assert list(sts.dataset) == ["en-en"] and sts.hf_subsets == ["en-en"]
    test = sts.dataset["en-en"]["test"]
    assert list(zip(test["sentence1"], test["sentence2"], test["score"], strict=True)) == data["sts17"]

    massive = resolve_tasks(["MassiveIntentClassification"])[0]
    assert load_task_data(massive, tmp_path) == (f"local:{tmp_path / 'massive_intent'}", None)
    for split, rows in data["massive"].items():
        ds = massive.dataset["en"][split]
        assert list(zip(ds["text"], ds["label"], strict=True)) == rows  # MASSIVE's intent ids

    scifact = mteb.get_task("SciFact")
    load_local_data(scifact, tmp_path)
    split = scifact.dataset["default"]["test"]
    assert split["relevant_docs"] == data["qrels"] and split["top_ranked"] is None
    assert split["queries"]["id"] == ["1", "2", "3"]  # only judged queries, as mteb's own loader
    assert split["queries"]["text"] == [data["queries"][q] for q in ("1", "2", "3")]
    assert split["corpus"]["id"] == list(data["docs"])
    assert list(zip(split["corpus"]["title"], split["corpus"]["text"], strict=True)) == list(data["docs"].values())


def test_a_multilingual_task_keeps_the_subsets_the_copy_holds(tmp_path):
    write_new_formats(tmp_path)
    task = mteb.get_task("STS17")  # every language pair
    assert len(task.hf_subsets) > 1
    load_local_data(task, tmp_path)
    assert task.hf_subsets == ["en-en"]


def _ndcg_at_10(scores: dict[str, float], judged: dict[str, int]) -> float:
    # trec_eval's ndcg_cut.10: linear gains, log2(rank + 1) discounts, ideal order of all judged documents.
    ranked = sorted(scores, key=lambda d: -scores[d])[:10]
    dcg = sum(judged.get(d, 0) / np.log2(rank + 2) for rank, d in enumerate(ranked))
    ideal = sum(g / np.log2(rank + 2) for rank, g in enumerate(sorted(judged.values(), reverse=True)[:10]))
    return dcg / ideal


def test_local_beir_copy_is_scored_by_mteb_as_by_hand(tmp_path):
    # nDCG@10 from mteb's own retrieval evaluator equals the one computed here from our own vectors:
    # the corpus (title + text), the judged queries and the graded qrels were read as written.
    data = write_new_formats(tmp_path / "data")
    encoder = make_encoder()
    summary = run_mteb(encoder, ["SciFact"], tmp_path / "data", tmp_path / "out")
    entry = summary["tasks"]["SciFact"]
    assert entry["status"] == "ok" and entry["main_score"] == "ndcg_at_10"
    doc_ids = list(data["docs"])
    doc_texts = [f"{title} {text}".strip() for title, text in data["docs"].values()]
    d = encoder.encode(doc_texts, normalize_embeddings=True)
    expected = []
    for q, judged in data["qrels"].items():
        v = encoder.encode(data["queries"][q], SCIFACT_PROMPT, normalize_embeddings=True)
        expected.append(_ndcg_at_10(dict(zip(doc_ids, (d @ v).tolist(), strict=True)), judged))
    assert entry["scores"][SPEC] == pytest.approx(float(np.mean(expected)), abs=1e-5)


def test_new_tasks_run_offline_from_the_folder(tmp_path):
    write_new_formats(tmp_path / "data")
    tasks = ["STS17", "MassiveIntentClassification", "NFCorpus", "SciFact"]
    summary = run_mteb(make_encoder(), tasks, tmp_path / "data", tmp_path / "out")
    assert summary["skipped"] == ["NFCorpus"]  # no nfcorpus/ folder here
    for name in ("STS17", "MassiveIntentClassification", "SciFact"):
        assert summary["tasks"][name]["status"] == "ok"
        assert np.isfinite(summary["tasks"][name]["scores"][SPEC])


# The shared copies, when this checkout sits beside them: the counts of ../shared/data/README.md.
REAL_COUNTS = {
    "STS17": {("en-en", "test"): 250},
    "MassiveIntentClassification": {("en", "train"): 11514, ("en", "validation"): 2033, ("en", "test"): 2974},
    "NFCorpus": {("default", "test"): (3633, 323, 12334)},
    "SciFact": {("default", "test"): (5183, 300, 339)},
}


@pytest.mark.parametrize("name", list(REAL_COUNTS))
def test_shared_copies_have_the_published_counts(name):
    folder = SHARED / LOCAL_FOLDERS[name][0]
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    (task,) = resolve_tasks([name])
    assert load_local_data(task, SHARED) == folder
    for (subset, split), expected in REAL_COUNTS[name].items():
        data = task.dataset[subset][split]
        if isinstance(data, dict):  # retrieval: documents, queries, judgements
            judgements = sum(len(docs) for docs in data["relevant_docs"].values())
            assert (len(data["corpus"]), len(data["queries"]), judgements) == expected
        else:
            assert len(data) == expected
    if name == "MassiveIntentClassification":
        assert len(set(task.dataset["en"]["test"]["label"])) == 59  # the README's 59 intents


def test_shared_retrieval_copy_gives_a_finite_ndcg_at_10(tmp_path):
    if not (SHARED / "scifact").is_dir():
        pytest.skip(f"{SHARED / 'scifact'} is absent")
    summary = run_mteb(make_encoder(), ["SciFact"], SHARED, tmp_path, limit=3, max_length=64)
    entry = summary["tasks"]["SciFact"]
    assert entry["status"] == "ok" and entry["source"] == f"local:{SHARED / 'scifact'}"
    assert entry["main_score"] == "ndcg_at_10" and 0.0 <= entry["scores"][SPEC] <= 1.0
    raw = json.loads(Path(entry["files"][SPEC]).read_text())
    assert np.isfinite(raw["scores"]["test"][0]["ndcg_at_10"])
