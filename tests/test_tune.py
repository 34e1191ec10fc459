"""``nosink tune`` on a tiny random decoder and tiny data files: the folder it writes, the budget, bad files."""

import json
import random
import re

import numpy as np
import pytest
from tiny import WORDS, tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder
from nosink.cli import main
from nosink.evals.study import userdata
from nosink.evals.study.tune import TuneOptions, tune

pytest.importorskip("sklearn")


def _sentence(rng, n=5):
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model") / "tiny"
    EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer()).save_pretrained(folder)
    return folder


def _sts_file(path, n=24):
    rng = random.Random(0)
    lines = ["sentence1\tsentence2\tscore"]
    lines += [f"{_sentence(rng)}\t{_sentence(rng)}\t{rng.uniform(0, 5):.2f}" for _ in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_tune_writes_a_folder_that_loads_with_the_choice(tmp_path, model, capsys):
    data = _sts_file(tmp_path / "pairs.tsv")
    out = tmp_path / "enc"
    argv = ["tune", str(model), "--task", "sts", "--data", str(data), "--out", str(out), "--exits", "2",
            "--templates", "instruction", "PromptEOL", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "chosen" in printed and "\nF*" in printed and "best reported" in printed
    report = json.loads((out / "tune.json").read_text())
    chosen = report["chosen"]
    # the choice is the best choosing score of every configuration tried; reporting scores only report
    assert chosen["choose"] == max(t["choose"] for t in report["tried"])
    assert {t["template"] for t in report["tried"]} == {"instruction", "PromptEOL"}
    assert any(t["exit_layer"] == 2 for t in report["tried"]) and report["F*"]["spec"] == "F*"
    assert all(t["low"] <= t["report"] <= t["high"] for t in report["tried"])
    loaded = EncoderFromDecoder.from_pretrained(out)
    assert str(loaded.spec) == chosen["spec"] and loaded.exit_layer == chosen["exit_layer"]
    # the sink token is the first candidate within 0.02 of the largest share of attention; the folder keeps it
    shares = report["sink_attention"]
    first = next(token for token, share in shares.items() if share >= max(shares.values()) - 0.02)
    assert report["sink_token"] == first == loaded.sink_token and "sink token:" in printed
    assert (loaded.template.name if loaded.template else "instruction") == chosen["template"]
    # the folder's vectors are the ones tune scored: the reported Spearman comes back from them
    from nosink.evals.study.tasks import STSTask

    task = userdata.load_user_task("sts", data)
    statistic = STSTask("x", task.choose, task.report).report_statistic(lambda t: loaded.encode(list(t)))
    assert statistic() == pytest.approx(chosen["report"], abs=1e-6)


def test_a_given_sink_token_is_kept_and_not_chosen(tmp_path, model):
    data = _sts_file(tmp_path / "pairs.tsv")
    result = tune(TuneOptions(str(model), "sts", data, tmp_path / "e", templates=["instruction"], exits=[],
                              sink_token="</s>", progress=False))  # fmt: skip
    assert result.sink_choice is None and result.payload["sink_attention"] is None
    assert result.payload["sink_token"] == "</s>" == EncoderFromDecoder.from_pretrained(tmp_path / "e").sink_token


def test_without_the_no_template_pass_the_baseline_is_f_star_in_the_first_template(tmp_path, model):
    data = _sts_file(tmp_path / "pairs.tsv")
    result = tune(TuneOptions(str(model), "sts", data, tmp_path / "p", templates=["PromptEOL"], exits=[],
                              progress=False))  # fmt: skip
    assert result.baseline.template == "PromptEOL" and result.payload["F*"]["spec"] == "F*"


def test_the_budget_is_honoured(tmp_path, model):
    data = _sts_file(tmp_path / "pairs.tsv")
    options = dict(model=str(model), task="sts", data=data, exits=[], progress=False)
    full = tune(TuneOptions(**options, out=tmp_path / "a", templates=["instruction", "PromptEOL", "Echo"]))
    profiled = 16 + full.sink_choice.texts * len(full.sink_choice.masses)  # the spec profile, the sink choice
    one = (full.texts_encoded - profiled) // 3 + profiled + 5  # one template and the profiles' texts, not two
    small = tune(TuneOptions(**options, out=tmp_path / "b", templates=["instruction", "PromptEOL", "Echo"], budget=one))
    assert small.texts_encoded <= one < full.texts_encoded
    assert small.skipped == ["PromptEOL", "Echo"] and {t.template for t in small.tried} == {"instruction"}
    with pytest.raises(ValueError, match=r"a budget of 10 texts is below the .* that the first template"):
        tune(TuneOptions(**options, out=tmp_path / "c", budget=10))
    assert not (tmp_path / "c").exists()


def test_classification_retrieval_and_ner_files(tmp_path, model):
    rng = random.Random(1)
    cls = tmp_path / "items.jsonl"
    cls.write_text("".join(json.dumps({"text": _sentence(rng), "label": lab}) + "\n" for lab in "ab" * 10))
    result = tune(TuneOptions(str(model), "classification", cls, tmp_path / "c", templates=["instruction"],
                              exits=[], progress=False))  # fmt: skip
    assert 0 <= result.chosen.scored.report() <= 1

    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": "", "text": _sentence(rng, 8)} for i in range(12)]
    (beir / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": _sentence(rng)}) + "\n"
                                                for i in range(6)))  # fmt: skip
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(6))
    )
    pytest.importorskip("mteb")
    result = tune(TuneOptions(str(model), "retrieval", beir, tmp_path / "r", templates=["instruction"], exits=[],
                              progress=False))  # fmt: skip
    assert result.chosen.scored.report.n == 3

    conll = tmp_path / "ner.txt"
    tags = ["B-LOC", "O", "B-PER", "I-PER", "O"]
    conll.write_text("".join("".join(f"{w} {t}\n" for w, t in zip(_sentence(rng).split(), tags, strict=True)) + "\n"
                             for _ in range(12)))  # fmt: skip
    result = tune(TuneOptions(str(model), "ner", conll, tmp_path / "n", exits=[], progress=False, prepends=[None, 2]))
    assert np.isfinite(result.chosen.scored.report())
    assert {t.prepend for t in result.tried} == {None, 2}  # word features with the placeholder in the prefix


@pytest.mark.parametrize(
    ("task", "content", "said"),
    [
        ("sts", "a\tb\tscore\nx\ty\t1\n", "lacks sentence1, sentence2; the first line must name"),
        ("sts", "sentence1\tsentence2\tscore\nx\ty\thigh\n", "row 1: the score 'high' is not a finite number"),
        ("sts", "sentence1\tsentence2\tscore\nx\ty\tnan\n", "row 1: the score 'nan' is not a finite number"),
        ("sts", "sentence1\tsentence2\tscore\nx\ty\t1e999\n", "row 1: the score '1e999' is not a finite number"),
        ("sts", "sentence1\tsentence2\tscore\nx\t\t1\n", ":2: an empty or missing sentence1 or sentence2 or score"),
        ("classification", "text,label\nx,a\ny,b\n", "every label needs at least 2"),
    ],
)
def test_bad_files_are_clear_errors_before_the_model_loads(tmp_path, task, content, said, capsys):
    data = tmp_path / ("d.tsv" if task == "sts" else "d.csv")
    data.write_text(content)
    argv = ["tune", "no-such-model", "--task", task, "--data", str(data), "--out", str(tmp_path / "o")]
    assert main(argv) == 1
    assert said in capsys.readouterr().err


def test_a_tsv_is_read_without_quoting_and_jsonl_values_must_be_of_their_type(tmp_path):
    # STS-B's own dev file has a sentence that starts with '"' (line 766): it must not swallow the tabs after it.
    rows = ['" the grass family is large\ta grass\t2.5'] + [f"s{i}\tt{i}\t{i % 5}" for i in range(9)]
    data = tmp_path / "d.tsv"
    data.write_text("sentence1\tsentence2\tscore\n" + "\n".join(rows) + "\n")
    task = userdata.load_user_task("sts", data)
    pairs = task.choose + task.report
    assert ('" the grass family is large', "a grass", 2.5) in pairs and len(pairs) == 10
    for line, said in [
        ('{"sentence1": "a", "sentence2": "b", "score": true}', "the score True is not a finite number"),
        ('{"sentence1": null, "sentence2": "b", "score": 1}', "sentence1 is None, not a string of text"),
        ('{"sentence1": "a", "sentence2": ["b"], "score": 1}', "sentence2 is ['b'], not a string of text"),
    ]:
        data = tmp_path / "d.jsonl"
        data.write_text(line + "\n")
        with pytest.raises(ValueError, match=re.escape(said)):
            userdata.load_user_task("sts", data)
    data.write_text('{"text": "a", "label": null}\n')
    with pytest.raises(ValueError, match="the label None is not a string, an integer or a boolean"):
        userdata.load_user_task("classification", data)


def test_an_out_folder_that_cannot_be_written_is_refused_before_the_model_loads(tmp_path, capsys):
    data = _sts_file(tmp_path / "pairs.tsv")
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("not an encoder")
    for out, said in [(tmp_path / "a-file" / "enc", "is a file, not a folder"), (tmp_path / "full", "is not empty")]:
        argv = ["tune", "no-such-model", "--task", "sts", "--data", str(data), "--out", str(out)]
        assert main(argv) == 1
        assert said in capsys.readouterr().err  # not the missing model: nothing was loaded


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--prepends", "0", "2"], "runs past the early exit at layer 2 (--exits, by default: 2, 3): give exits above"),
        (["--prepends", "4"], "leaves none of this model's 4 layers after it"),
        (["--exits", "9"], "the exit layer 9 (--exits) is not in 1..4"),
    ],
)
def test_exits_and_prepend_depths_that_do_not_fit_are_refused_before_any_pass(tmp_path, model, capsys, extra, said):
    data = _sts_file(tmp_path / "pairs.tsv")
    argv = ["tune", str(model), "--task", "sts", "--data", str(data), "--out", str(tmp_path / "o"), "--no-progress"]
    assert main(argv + extra) == 1
    assert said in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_prepend_depths_without_none_still_report_a_baseline(tmp_path, model, capsys):
    data = _sts_file(tmp_path / "pairs.tsv")
    argv = ["tune", str(model), "--task", "sts", "--data", str(data), "--out", str(tmp_path / "o"), "--no-progress",
            "--exits", "--templates", "instruction", "--prepends", "1"]  # fmt: skip
    assert main(argv) == 0
    report = json.loads((tmp_path / "o" / "tune.json").read_text())
    assert report["F*"]["prepend"] == 1 and (tmp_path / "o" / "nosink.json").is_file()


def test_missing_data_and_wrong_suffix(tmp_path):
    with pytest.raises(FileNotFoundError, match="no data file at"):
        userdata.load_user_task("sts", tmp_path / "missing.tsv")
    (tmp_path / "d.txt").write_text("x")
    with pytest.raises(ValueError, match=r"expected a \.tsv, \.csv or \.jsonl file, got \.txt"):
        userdata.load_user_task("classification", tmp_path / "d.txt")
    with pytest.raises(FileNotFoundError, match=r"has no corpus\.jsonl, queries\.jsonl, qrels/test\.tsv"):
        userdata.load_user_task("retrieval", tmp_path)


def test_prepend_depths_are_a_grid_dimension_and_the_folder_keeps_the_chosen_one(tmp_path, model, capsys):
    data = _sts_file(tmp_path / "pairs.tsv")
    out = tmp_path / "enc"
    argv = ["tune", str(model), "--task", "sts", "--data", str(data), "--out", str(out), "--exits",
            "--templates", "instruction", "--prepends", "0", "2", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    report = json.loads((out / "tune.json").read_text())
    assert {t["prepend"] for t in report["tried"]} == {None, 2}
    assert report["F*"]["prepend"] is None and report["F*"]["spec"] == "F*"
    # every configuration was scored with and without prepending, and prepending changed the scores
    by = {(t["spec"], t["prepend"]): t["choose"] for t in report["tried"]}
    assert all((spec, 2) in by for spec, p in by if p is None)
    assert any(by[spec, 2] != by[spec, None] for spec, p in list(by) if p is None)
    chosen = report["chosen"]
    assert chosen["choose"] == max(t["choose"] for t in report["tried"])
    loaded = EncoderFromDecoder.from_pretrained(out)
    assert loaded.prepend == (None if chosen["prepend"] is None else (1, chosen["prepend"] + 1))
    from nosink.evals.study.tasks import STSTask

    task = userdata.load_user_task("sts", data)
    statistic = STSTask("x", task.choose, task.report).report_statistic(lambda t: loaded.encode(list(t)))
    assert statistic() == pytest.approx(chosen["report"], abs=1e-6)


def test_a_prepend_depth_below_one_is_refused(tmp_path):
    with pytest.raises(ValueError, match="at least 1"):
        TuneOptions("m", "sts", tmp_path, tmp_path, prepends=[None, 0])


def test_the_cli_lists_the_library_tasks():
    from nosink.cli import tune as cli_tune

    assert cli_tune.TASKS == userdata.TUNE_TASKS
