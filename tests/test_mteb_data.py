"""Local copies of MTEB task data: the plain formats read row for row, bad files named in the error."""

import pytest

mteb = pytest.importorskip("mteb")

from test_mteb import write_data  # noqa: E402

from nosink.evals.mteb_data import load_local_data, load_task_data  # noqa: E402


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


@pytest.mark.parametrize(
    ("file", "text", "message"),
    [
        ("banking77/test.csv", "sentence,intent\nhi,card_arrival\n", r"test.csv: expected a header with text and"),
        ("stsb/sts-test.csv", "g\tf\t2012\t1\tfive\ta\tb\n", r"sts-test.csv:1: the score 'five' is not a number"),
        ("stsb/sts-test.csv", "g\tf\t2012\t1\t4.0\ta\n", r"sts-test.csv:1: expected 7 tab-separated columns, got 6"),
    ],
)
def test_a_malformed_copy_names_the_file(tmp_path, file, text, message):
    write_data(tmp_path)
    (tmp_path / file).write_text(text, encoding="utf-8")
    task = mteb.get_task("Banking77Classification" if file.startswith("banking") else "STSBenchmark")
    with pytest.raises(ValueError, match=message):
        load_local_data(task, tmp_path)


def test_no_data_is_a_reason_not_an_error(tmp_path):
    source, reason = load_task_data(mteb.get_task("SciFact"), tmp_path)
    assert source is None
    assert reason.startswith(f"no local copy under {tmp_path} and the hub failed: ")
