"""The nosink command line."""

import os
import re
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from tiny import tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder
from nosink.cli import main


def test_help_shows_commands_and_examples(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for word in ("demo", "encode", "plan", "examples:", 'nosink plan "F* | B*7 | M0B*3" --depth 22'):
        assert word in out


def test_plan_prints_the_table(capsys):
    assert main(["plan", "F* | B*2 | M0B", "--depth", "4"]) == 0
    out = capsys.readouterr().out
    assert "spec F* | B*2 | M0B on 4 layers" in out
    assert "   3  main        3  M0B   stack" in out


def test_bad_spec_exits_2_with_the_caret(capsys):
    assert main(["plan", "F*12 | Q*7", "--depth", "22"]) == 2
    err = capsys.readouterr().err
    assert "unknown layer kind 'Q' at column 8" in err and "         ^" in err


@pytest.fixture
def saved(tmp_path):
    folder = tmp_path / "enc"
    EncoderFromDecoder(tiny_decoder("llama"), "F* | M0B*2", tiny_tokenizer()).save_pretrained(folder)
    return folder


def test_encode_to_npy_and_safetensors(saved, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat\na dog ran\n")
    out_npy = tmp_path / "v.npy"
    assert main(["encode", str(saved), "--file", str(texts), "--text", "paris", "-o", str(out_npy)]) == 0
    vectors = np.load(out_npy)
    assert vectors.shape == (3, 32)
    expected = EncoderFromDecoder.from_pretrained(saved).encode(["paris", "the cat sat", "a dog ran"])
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    out_st = tmp_path / "v.safetensors"
    assert main(["encode", str(saved), "--text", "paris", "--normalize", "-o", str(out_st)]) == 0
    stored = load_file(str(out_st))["embeddings"]
    assert stored.shape == (1, 32) and np.isclose(np.linalg.norm(stored), 1.0)
    assert "wrote 1 vectors of size 32" in capsys.readouterr().out


def test_encode_refuses_blank_lines(saved, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat\n\na dog ran\n")
    assert main(["encode", str(saved), "--file", str(texts), "-o", str(tmp_path / "v.npy")]) == 1
    err = capsys.readouterr().err
    assert re.search(r"^nosink: error: .* has blank lines \(2\); remove them", err) and err.count("\n") == 1
    assert not (tmp_path / "v.npy").exists()


def test_encode_refuses_bad_output_and_nothing_to_encode(saved, tmp_path, capsys):
    # Both are argparse errors: usage, then the message; exit status 2.
    with pytest.raises(SystemExit) as info:
        main(["encode", str(saved), "--text", "a", "-o", str(tmp_path / "v.csv")])
    assert info.value.code == 2
    assert re.search(r"output must end in \.npy or \.safetensors", capsys.readouterr().err)
    with pytest.raises(SystemExit) as info:
        main(["encode", str(saved), "-o", str(tmp_path / "v.npy")])
    assert info.value.code == 2
    assert "nothing to encode" in capsys.readouterr().err


def test_missing_model_folder_is_an_error_not_a_traceback(tmp_path, capsys):
    assert (
        main(["encode", str(tmp_path / "nowhere"), "--spec", "F*", "--text", "a", "-o", str(tmp_path / "v.npy")]) == 1
    )
    assert "nosink:" in capsys.readouterr().err


def test_eval_classify(saved, tmp_path, capsys):
    import json

    rows = (
        ["text;topic"]
        + [f"{w} bank money;finance" for w in ("the", "a", "we", "i")]
        + [f"{w} paris city;travel" for w in ("the", "a", "we", "i")]
    )
    data = tmp_path / "d.csv"
    data.write_text("\n".join(rows) + "\n")
    args = ["eval", "classify", str(saved), "--train", str(data), "--test", str(data), "--label-column", "topic",
            "--specs", "F*", "F* | M0B*2", "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(args) == 0
    out = json.loads((tmp_path / "out" / "classification.json").read_text())
    assert [r["spec"] for r in out["results"]] == ["F*", "F* | M0B*2"]
    assert "accuracy" in capsys.readouterr().out


def test_eval_mteb_on_a_local_sts_copy(saved, tmp_path, capsys):
    import json

    from test_mteb import write_data

    write_data(tmp_path / "data")
    args = ["eval", "mteb", str(saved), "--specs", "F*", "F* | M0B*2", "--tasks", "STSBenchmark", "SciFact",
            "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["tasks"]["STSBenchmark"]["status"] == "ok"
    assert set(summary["tasks"]["STSBenchmark"]["scores"]) == {"F*", "F* | M0B*2"}
    assert summary["tasks"]["SciFact"]["status"] == "skipped"
    out = capsys.readouterr().out
    assert "STSBenchmark" in out and "SciFact" in out and "skipped" in out

    # A second run reuses mteb's stored results unless told to overwrite them.
    result = Path(summary["tasks"]["STSBenchmark"]["files"]["F*"])
    os.utime(result, ns=(0, 0))
    marker = result.stat().st_mtime_ns
    args = [*args[:3], "--specs", "F*", *args[6:]]
    assert main(args) == 0
    assert result.stat().st_mtime_ns == marker
    assert main([*args, "--overwrite"]) == 0
    assert result.stat().st_mtime_ns != marker


def test_inspect_writes_figures_tables_and_a_suggestion(saved, tmp_path, capsys):
    import json

    out = tmp_path / "ins"
    args = ["inspect", str(saved), "--text", "the cat sat on the mat", "--text", "we love very good food",
            "--compare", "M0B*", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    for name in ("attention_maps.png", "sink_profile.png", "sinks_0.csv", "sinks_1.csv", "inspect.json"):
        assert (out / name).is_file(), name
    report = json.loads((out / "inspect.json").read_text())
    assert set(report["profiles"]) == {"F*", "M0B*"} and report["suggestion"]["spec"].startswith("F* | ")
    assert "suggested spec:" in capsys.readouterr().out


def test_inspect_without_matplotlib_names_the_extra_and_writes_nothing(saved, tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as after the main job's install: no eval extra
    out = tmp_path / "ins"
    assert main(["inspect", str(saved), "--text", "the cat sat on the mat", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    extra = 'pip install "nosink[eval]"'
    assert err == [f"nosink: error: ImportError: the figures need matplotlib, which the eval extra installs: {extra}"]
    assert not out.exists()


def _study_data(root):
    """Tiny STS-B (train/dev/test) and CoNLL-2003 (train/dev) folders in the shared data's formats."""
    import random

    from tiny import WORDS

    rng = random.Random(0)

    def sentence(n=5):
        return " ".join(rng.choice(WORDS) for _ in range(n))

    (root / "stsb").mkdir(parents=True)
    for file, n in (("sts-train.csv", 16), ("sts-dev.csv", 10), ("sts-test.csv", 12)):
        rows = [
            f"main-news\tfile\t2012\t{i:04d}\t{rng.uniform(0, 5):.2f}\t{sentence()}\t{sentence()}" for i in range(n)
        ]
        (root / "stsb" / file).write_text("\n".join(rows) + "\n", encoding="utf-8")
    (root / "conll2003").mkdir()

    def tag(word):
        return "B-LOC" if word in ("paris", "london", "france", "england") else "B-PER" if word == "dog" else "O"

    for file, n in (("train.txt", 24), ("dev.txt", 12)):
        blocks = ["-DOCSTART- -X- -X- O"]
        blocks += ["\n".join(f"{w} NN O {tag(w)}" for w in sentence(6).split()) for _ in range(n)]
        (root / "conll2003" / file).write_text("\n\n".join(blocks) + "\n", encoding="utf-8")


def test_eval_study_end_to_end_on_a_tiny_model(saved, tmp_path, capsys):
    """``nosink eval study`` writes the study's JSON per task; its F* score is encode()'s, scored afresh."""
    import json
    import shlex

    from scipy.stats import spearmanr

    from nosink.evals.study import load_sts, results_table

    _study_data(tmp_path / "data")
    out = tmp_path / "out"
    args = ["eval", "study", str(saved), "--data", str(tmp_path / "data"), "--out", str(out), "--tasks", "sts", "ner",
            "--templates", "instruction", "prompt-eol", "--restricted", "PromptEOL", "--ks", "2", "--k0s", "1",
            "--exits", "2", "--exit-configs", "F*", "INPLACE-BIDIR", "MASK0&BIDIR", "--ner-train", "24",
            "--ner-dev", "12"]  # fmt: skip
    assert main(args) == 0
    sts, ner = json.loads((out / "sts.json").read_text()), json.loads((out / "ner.json").read_text())
    assert sts["command"] == shlex.join(["nosink", *args])
    assert sts["model"] == saved.name and ner["model"] == saved.name
    assert [t["template"] for t in sts["templates"]] == ["instruction", "PromptEOL"]
    assert set(sts["templates"][0]["chosen"]) == {"F*", "INPLACE-BIDIR", "MASK0&BIDIR", "SUGGESTED"}
    assert sts["templates"][1]["chosen"].keys() == {"F*", "INPLACE-BIDIR", "MASK0&BIDIR"}  # restricted: no grid
    # exits tried for every family named, the NER rows too
    assert sts["exit_families"] == ner["exit_families"] == ["F*", "INPLACE-BIDIR", "MASK0&BIDIR"]
    assert set(sts["templates"][0]["exits"]) == {"F*", "INPLACE-BIDIR", "MASK0&BIDIR"}
    exits = {"F* @ exit 2", "F* | B*2 @ exit 2", "F* | B | M0B @ exit 2"}
    assert {r["name"] for r in ner["rows"]} >= {"F*", "F* | B*2", "F* | B | M0B", *exits}

    # The reported F* score without a template: Spearman of encode()'s cosines on all 12 test pairs.
    task = load_sts(tmp_path / "data" / "stsb", None, None)
    encoder = EncoderFromDecoder.from_pretrained(saved, "F*")
    a = encoder.encode([p[0] for p in task.report], task.instruction, normalize_embeddings=True)
    b = encoder.encode([p[1] for p in task.report], task.instruction, normalize_embeddings=True)
    want = spearmanr((a * b).sum(axis=1), [p[2] for p in task.report])[0]
    row = sts["templates"][0]["chosen"]["F*"]
    assert row["n_report"] == 12 and row["report"] == pytest.approx(want, abs=1e-6)
    assert row["low"] <= row["report"] <= row["high"]

    printed = capsys.readouterr().out
    assert results_table(sts) in printed and f"{out / 'ner.json'}" in printed


def test_eval_study_sweeps_the_papers_configs_with_curves_on_the_reporting_split(saved, tmp_path, capsys):
    """``--configs`` and ``--report-grid``: every config's spec at every k is scored on both splits (STS and NER),
    with the paired comparisons along k, and the curves table renders from the JSON."""
    import json

    from nosink.evals.study import curves_table

    _study_data(tmp_path / "data")
    out = tmp_path / "out"
    args = ["eval", "study", str(saved), "--data", str(tmp_path / "data"), "--out", str(out), "--tasks", "sts", "ner",
            "--templates", "instruction", "--configs", "INPLACE-BIDIR", "INPLACE-BACK", "MASK0-ALL", "--ks", "2", "4",
            "--report-grid", "--no-suggestion", "--ner-train", "24", "--ner-dev", "12"]  # fmt: skip
    assert main(args) == 0
    sts, ner = json.loads((out / "sts.json").read_text()), json.loads((out / "ner.json").read_text())
    specs = ["F*", "F* | B*2", "F* | B*4", "F* | R*2", "F* | R*4", "M0B*"]
    assert sts["families"] == ner["families"] == ["INPLACE-BIDIR", "INPLACE-BACK", "MASK0-ALL"]
    assert sts["grid"] == specs and sts["report_grid"] is True
    grid_rows = sts["templates"][0]["grid"]
    assert [r["name"] for r in grid_rows] == specs and all(r["n_report"] == 12 for r in grid_rows)
    assert [r["name"] for r in ner["rows"]] == specs
    for payload in (sts, ner):
        kinds = {c["comparison"] for c in payload["comparisons"]}
        want = {"inplace-back vs inplace-bidir at k=2", "inplace-back vs inplace-bidir at k=4"}
        assert (
            want | {"mask0-all vs inplace-bidir at k=n", "inplace-back vs inplace-bidir", "mask0-all vs inplace-bidir"}
            <= kinds
        )
        table = curves_table(payload)
        assert table.splitlines()[0] == "| k | INPLACE-BIDIR | INPLACE-BACK | MASK0-ALL |"
        assert len(table.splitlines()) == 5  # header, rule, F*, k = 2, k = 4


def test_eval_study_refuses_exit_configs_it_does_not_sweep(saved, tmp_path, capsys):
    _study_data(tmp_path / "data")
    args = ["eval", "study", str(saved), "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out"),
            "--no-suggestion", "--ks", "2", "--exits", "2", "--exit-configs", "F*", "MASK0-BIDIR"]  # fmt: skip
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "--exit-configs MASK0-BIDIR: not swept, so never chosen; add them to --configs" in err
    assert main([*args, "--configs", "INPLACE-BIDIR", "MASK0-BIDIR", "--templates", "instruction"]) == 0


def test_eval_study_refuses_an_exit_at_or_above_the_models_depth(saved, tmp_path, capsys):
    _study_data(tmp_path / "data")
    args = ["eval", "study", str(saved), "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out"),
            "--no-suggestion", "--ks", "2", "--exits", "2", "4", "9"]  # fmt: skip
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "--exits 4 9: the model has 4 layers, so an exit layer is 1 to 3" in err
    assert not (tmp_path / "out").exists()  # refused before any encoding


def test_eval_study_refuses_missing_data_unknown_tasks_and_templates(saved, tmp_path, capsys, monkeypatch):
    base = ["eval", "study", str(saved), "--out", str(tmp_path / "out")]
    assert main([*base, "--data", str(tmp_path / "nowhere")]) == 1
    assert f"nosink: error: no data folder at {tmp_path / 'nowhere'}: --data names the folder holding stsb/" in (
        capsys.readouterr().err
    )
    monkeypatch.delenv("NOSINK_DATA", raising=False)
    with pytest.raises(SystemExit) as info:
        main(base)
    assert info.value.code == 2 and "the following arguments are required: --data" in capsys.readouterr().err
    monkeypatch.setenv("NOSINK_DATA", str(tmp_path / "elsewhere"))  # --data's default
    assert main(base) == 1
    assert f"no data folder at {tmp_path / 'elsewhere'}" in capsys.readouterr().err
    (tmp_path / "data" / "conll2003").mkdir(parents=True)
    assert main([*base, "--data", str(tmp_path / "data"), "--tasks", "ner"]) == 1
    assert "has no stsb/ (for the suggestion's sink profile, or give --no-suggestion)" in capsys.readouterr().err
    assert main([*base, "--data", str(tmp_path / "data"), "--tasks", "sts", "ner", "--no-suggestion"]) == 1
    assert "has no stsb/ (for sts)" in capsys.readouterr().err
    for option, value, message in (
        ("--tasks", "stsb", "invalid choice: 'stsb'"),
        ("--templates", "PromptEOLL", "unknown template 'PromptEOLL'; expected one of instruction, PromptEOL"),
    ):
        with pytest.raises(SystemExit) as info:
            main([*base, "--data", str(tmp_path / "data"), option, value])
        assert info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything ran
