"""The command line's inputs and failures: files read line for line, counts checked at parse time,
output names kept, data found through --data or NOSINK_DATA, and every failure one line on stderr."""

import io
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tiny import tiny_decoder, tiny_tokenizer

import nosink
from nosink import EncoderFromDecoder
from nosink.cli import main
from nosink.evals.ner import Sentence
from nosink.models.texts import read_lines


@pytest.fixture
def saved(tmp_path):
    folder = tmp_path / "enc"
    EncoderFromDecoder(tiny_decoder("llama"), "F* | M0B*2", tiny_tokenizer()).save_pretrained(folder)
    return folder


def one_error_line(err: str) -> str:
    """The stderr of a failed command: exactly one line, 'nosink: error: ...', with no control characters."""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert err.startswith("nosink: error: "), err
    assert all(ch.isprintable() for ch in err[:-1]), err
    return err


# --- python -m nosink -------------------------------------------------------------------------------


def test_python_m_nosink_is_the_command_line(capsys):
    assert main(["plan", "F* | B*2", "--depth", "3"]) == 0
    expected = capsys.readouterr().out
    done = subprocess.run(
        [sys.executable, "-m", "nosink", "plan", "F* | B*2", "--depth", "3"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected
    bad = subprocess.run([sys.executable, "-m", "nosink", "plan", "F* | Q", "--depth", "3"], capture_output=True)
    assert bad.returncode == 2


# --- the file reader: row i is line i -----------------------------------------------------------------

# Characters str.splitlines() breaks on besides "\n" (and "\r" inside a line), plus ordinary text.
BREAKERS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
line_char = st.characters(blacklist_characters="\n\ufeff", blacklist_categories=("Cs",)) | st.sampled_from(BREAKERS)
line_text = st.text(line_char)
lines_st = st.lists(line_text.filter(lambda t: t and not t.endswith("\r")), max_size=8)


@given(lines=lines_st, bom=st.booleans(), crlf=st.booleans(), final_newline=st.booleans())
def test_read_lines_gives_back_exactly_the_lines(tmp_path_factory, lines, bom, crlf, final_newline):
    path = tmp_path_factory.mktemp("lines") / "texts.txt"
    end = "\r\n" if crlf else "\n"
    body = end.join(lines) + (end if final_newline and lines else "")
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + body.encode("utf-8"))
    assert read_lines(path) == lines


def test_read_lines_refuses_other_encodings(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("café\n".encode("latin-1"))
    with pytest.raises(ValueError, match="is not UTF-8"):
        read_lines(path)


def test_encode_file_rows_are_its_lines(saved, tmp_path):
    lines = ["first\u2028still first", "second\x0cwith a form feed", "third \x1c\x1d\x1e fourth?", "\x85no, fifth"]
    texts = tmp_path / "texts.txt"
    texts.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode("utf-8") + b"\r\n")
    out = tmp_path / "v.npy"
    assert main(["encode", str(saved), "--file", str(texts), "-o", str(out)]) == 0
    vectors = np.load(out)
    assert vectors.shape[0] == 4
    np.testing.assert_allclose(vectors, EncoderFromDecoder.from_pretrained(saved).encode(lines), atol=1e-6)


def test_encode_file_dash_is_standard_input_and_dot_slash_dash_a_file(saved, tmp_path, monkeypatch):
    lines = ["the cat sat", "a dog\u2028ran"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("\r\n".join(lines).encode() + b"\n")))
    assert main(["encode", str(saved), "--file", "-", "-o", str(tmp_path / "v.npy")]) == 0
    want = EncoderFromDecoder.from_pretrained(saved).encode(lines)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), want, atol=1e-6)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").write_text("\n".join(reversed(lines)) + "\n")  # a file named "-", as ./- in Unix tools
    assert main(["encode", str(saved), "--file", "./-", "-o", str(tmp_path / "w.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "w.npy"), want[::-1], atol=1e-6)


# --- the output name ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["OUT.NPY", "out.Npy", "OUT.SAFETENSORS"])
def test_output_is_written_under_the_name_given(saved, tmp_path, capsys, name):
    out = tmp_path / name
    assert main(["encode", str(saved), "--text", "paris", "-o", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [name]
    assert capsys.readouterr().out.strip().endswith(f"to {out}")


# --- counts are checked at parse time -------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "ner", "demo", "--spec", "F*", "--epochs", "0"],
        ["eval", "ner", "demo", "--spec", "F*", "--epochs", "-2"],
        ["eval", "ner", "demo", "--spec", "F*", "--limit", "-1"],
        ["eval", "ner", "demo", "--spec", "F*", "--train-limit", "0"],
        ["eval", "ner", "demo", "--spec", "F*", "--max-length", "0"],
        ["eval", "ner", "demo", "--spec", "F*", "--lr", "0"],
        ["eval", "sweep", "demo", "--ks", "4", "0"],
        ["eval", "sweep", "demo", "--k0s", "-1"],
        ["eval", "mteb", "demo", "--specs", "F*", "--limit", "0"],
        ["eval", "mteb", "demo", "--specs", "F*", "--batch-size", "0"],
        ["eval", "classify", "demo", "--train", "a", "--test", "b", "--specs", "F*", "--limit", "0"],
        ["encode", "demo", "--text", "a", "-o", "v.npy", "--batch-size", "0"],
        ["encode", "demo", "--text", "a", "-o", "v.npy", "--max-length", "0"],
        ["encode", "demo", "--text", "a", "-o", "v.npy", "--batch-size", "two"],
        ["inspect", "demo", "--text", "a", "--positions", "0"],
        ["inspect", "demo", "--text", "a", "--layers", "-1"],
        ["inspect", "demo", "--text", "a", "--max-tokens", "1"],
        ["inspect", "demo", "--text", "a", "--threshold", "1.5"],
        ["plan", "F*", "--depth", "0"],
    ],
    ids=lambda argv: " ".join(argv[:2] + argv[-2:]),
)
def test_counts_are_refused_when_parsed(argv, capsys, monkeypatch):
    # Nothing may load: the argparse error comes first.
    monkeypatch.setattr(EncoderFromDecoder, "from_pretrained", lambda *a, **k: pytest.fail("loaded a model"))
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    option = [a for a in argv if a.startswith("--")][-1]
    assert f"argument {option}:" in err and ("must be" in err or "expected" in err), err


# --- the study's integer arguments: python -m nosink.evals.study and nosink eval study share them ----------

STUDY_REFUSED = [
    ("--ks", ["4", "0"], "a positive integer, got 0"),
    ("--ks", ["-3"], "a positive integer, got -3"),
    ("--k0s", ["0"], "a positive integer, got 0"),
    ("--k0s", ["2", "-1"], "a positive integer, got -1"),
    ("--exits", ["0"], "a positive integer, got 0"),
    ("--exits", ["12", "-4"], "a positive integer, got -4"),
    ("--sts-choose", ["1"], "an integer >= 2, got 1"),
    ("--sts-report", ["0"], "an integer >= 2, got 0"),
    ("--cls-train", ["0"], "a positive integer, got 0"),
    ("--cls-test", ["-5"], "a positive integer, got -5"),
    ("--cls-validation", ["0"], "a positive integer, got 0"),
    ("--ret-queries", ["1"], "an integer >= 2, got 1"),
    ("--ret-other", ["-1"], "a non-negative integer, got -1"),
    ("--ret-doc-words", ["0"], "a positive integer, got 0"),
    ("--ner-train", ["0"], "a positive integer, got 0"),
    ("--ner-dev", ["1"], "an integer >= 2, got 1"),
    ("--seed", ["-1"], "a non-negative integer, got -1"),
    ("--batch-size", ["0"], "a positive integer, got 0"),
    ("--select", ["1"], "an integer >= 2 or 0 (no selection stage), got 1"),
    ("--select", ["-2"], "an integer >= 2 or 0 (no selection stage), got -2"),
    ("--ks", ["two"], "expected an integer, got 'two'"),
]


def _study_argv(option, values, out):
    return ["demo", "--data", str(out), "--out", str(out), option, *values]


@pytest.mark.parametrize("entry", ["python -m nosink.evals.study", "nosink eval study"])
@pytest.mark.parametrize(
    ("option", "values", "wanted"), STUDY_REFUSED, ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_the_studys_integer_arguments_are_refused_when_parsed(entry, option, values, wanted, tmp_path, capsys,
                                                              monkeypatch):  # fmt: skip
    from nosink.evals import study

    monkeypatch.setattr(EncoderFromDecoder, "from_pretrained", lambda *a, **k: pytest.fail("loaded a model"))
    monkeypatch.setattr(study, "run", lambda *a, **k: pytest.fail("ran the study"))
    monkeypatch.setattr(study.cli, "run", lambda *a, **k: pytest.fail("ran the study"))  # main()'s own name
    argv = _study_argv(option, values, tmp_path)
    with pytest.raises(SystemExit) as info:
        study.main(argv) if entry.startswith("python") else main(["eval", "study", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: " in err and wanted in err, err


def test_the_studys_zeros_that_mean_something_are_parsed(tmp_path):
    import argparse

    from nosink.evals.study import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = [*_study_argv("--select", ["0"], tmp_path), "--seed", "0", "--ret-other", "0", "--k0s", "1", "--exits", "1"]
    args = parser.parse_args(argv)
    assert (args.select, args.seed, args.ret_other, args.k0s, args.exits) == (0, 0, 0, [1], [1])
    assert parser.parse_args(_study_argv("--select", ["2"], tmp_path)).select == 2


# --- --template and --exit-layer ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["encode", "demo", "--text", "a", "-o", "v.npy", "--template", "PromptEOF"],
        ["eval", "mteb", "demo", "--specs", "F*", "--template", ""],
    ],
    ids=["encode", "eval mteb"],
)
def test_an_unknown_template_is_refused_when_parsed_with_the_presets(argv, capsys, monkeypatch):
    monkeypatch.setattr(EncoderFromDecoder, "from_pretrained", lambda *a, **k: pytest.fail("loaded a model"))
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    name = repr(argv[-1])
    assert f"argument --template: unknown template {name}; the presets are PromptEOL, PretendedCoT, " in err, err
    assert "KnowledgeEnhancement, MetaEOL, Echo" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["encode", "demo", "--text", "a", "-o", "v.npy", "--exit-layer", "0"],
        ["eval", "mteb", "demo", "--specs", "F*", "--exit-layer", "-3"],
        ["eval", "ner", "demo", "--spec", "F*", "--exit-layer", "two"],
    ],
    ids=lambda argv: " ".join(argv[:2] + argv[-1:]),
)
def test_an_exit_layer_under_one_is_refused_when_parsed(argv, capsys, monkeypatch):
    monkeypatch.setattr(EncoderFromDecoder, "from_pretrained", lambda *a, **k: pytest.fail("loaded a model"))
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --exit-layer: " in err, err
    wanted = (
        "expected an integer, got 'two'"
        if argv[-1] == "two"
        else f"from 1 to the model's number of layers, got {argv[-1]}"
    )
    assert wanted in err, err


def test_encode_takes_a_template_and_an_exit_layer(saved, tmp_path):
    texts = ["the cat sat", "on the mat"]
    out = tmp_path / "v.npy"
    argv = ["encode", str(saved), "--text", texts[0], "--text", texts[1], "-o", str(out)]
    assert main([*argv, "--template", "prompt_eol", "--exit-layer", "3"]) == 0
    expected = EncoderFromDecoder.from_pretrained(saved, exit_layer=3).encode(texts, template="PromptEOL")
    np.testing.assert_allclose(np.load(out), expected, atol=1e-6)
    assert main(argv) == 0  # without them: another vector
    assert not np.allclose(np.load(out), expected, atol=1e-3)


def test_an_exit_layer_above_the_depth_names_the_depth(saved, tmp_path, capsys):
    depth = EncoderFromDecoder.from_pretrained(saved).depth
    capsys.readouterr()
    argv = ["encode", str(saved), "--text", "a", "-o", str(tmp_path / "v.npy"), "--exit-layer", str(depth + 1)]
    assert main(argv) == 1
    err = one_error_line(capsys.readouterr().err)
    assert f"exit_layer must be from 1 to the model's {depth} layers, got {depth + 1}" in err


def test_eval_mteb_and_ner_pass_the_template_and_exit_layer(saved, tmp_path, monkeypatch, fake_conll):
    import nosink.evals.mteb_eval as mteb_eval

    seen = {}

    def run_mteb(encoder, *args, **kwargs):
        seen.update(exit_layer=encoder.exit_layer, template=kwargs["template"])
        return {"tasks": {}}

    monkeypatch.setattr(mteb_eval, "run_mteb", run_mteb)
    argv = ["eval", "mteb", str(saved), "--specs", "F*", "--data-dir", str(tmp_path), "--out", str(tmp_path / "m")]
    assert main([*argv, "--template", "echo", "--exit-layer", "2"]) == 0
    assert seen == {"exit_layer": 2, "template": "Echo"}
    assert main(argv) == 0
    assert seen == {"exit_layer": None, "template": None}

    from nosink.evals import ner

    layers = []
    real = ner.evaluate_ner
    monkeypatch.setattr(
        ner, "evaluate_ner", lambda encoder, *a, **k: layers.append(encoder.exit_layer) or real(encoder, *a, **k)
    )
    argv = ["eval", "ner", str(saved), "--spec", "F* | M0B", "--epochs", "1", "--out", str(tmp_path / "n")]
    assert main([*argv, "--exit-layer", "2"]) == 0
    assert layers == [2]


@pytest.mark.parametrize(
    "argv, named",
    [
        (["eval", "mteb", "all-MiniLM-L6-v2", "--template", "PromptEOL"], "--template is"),
        (
            ["eval", "mteb", "all-MiniLM-L6-v2", "--template", "Echo", "--exit-layer", "3"],
            "--template and --exit-layer are",
        ),
        (["eval", "ner", "all-MiniLM-L6-v2", "--exit-layer", "3"], "--exit-layer is"),
    ],
)
def test_decoder_options_are_refused_for_an_encoder_baseline(argv, named, capsys, tmp_path, fake_conll, monkeypatch):
    import nosink.evals.baselines as baselines

    monkeypatch.setattr(baselines, "baseline_folder", lambda name: pytest.fail("fetched the baseline"))
    monkeypatch.delenv("NOSINK_DATA", raising=False)
    assert main([*argv, "--out", str(tmp_path)]) == 1
    err = one_error_line(capsys.readouterr().err)
    assert f"{named} for decoders, not for the encoder baseline all-MiniLM-L6-v2" in err


def test_the_study_models_short_names_resolve_like_demo(tmp_path, monkeypatch, capsys):
    from tiny import CONFIGS

    monkeypatch.setenv("NOSINK_CACHE", str(tmp_path))  # a converted copy in the cache; no hub (HF_HUB_OFFLINE)
    CONFIGS["llama"]().save_pretrained(tmp_path / "gemma-3-270m")
    assert main(["plan", "F* | B*2", "--model", "gemma-3-270m"]) == 0
    assert capsys.readouterr().out.startswith(f"spec F* | B*2 on {CONFIGS['llama']().num_hidden_layers} layers")


# --- data comes from --data or $NOSINK_DATA, never from a folder beside the checkout -------------------


@pytest.fixture
def fake_conll(monkeypatch):
    """Record where `eval ner` reads CoNLL from (and give it two tiny sentences)."""
    import nosink.evals.ner as ner

    sources = []

    def load_conll(source, split):
        sources.append(str(source))
        return [Sentence(("EU", "rejects", "it"), ("B-ORG", "O", "O")), Sentence(("Paris", "is"), ("B-LOC", "O"))]

    monkeypatch.setattr(ner, "load_conll", load_conll)
    return sources


def test_eval_data_comes_from_nosink_data(saved, tmp_path, monkeypatch, fake_conll, capsys):
    (tmp_path / "data" / "conll2003").mkdir(parents=True)
    monkeypatch.setenv("NOSINK_DATA", str(tmp_path / "data"))
    args = ["eval", "ner", str(saved), "--spec", "F*", "--epochs", "1", "--out", str(tmp_path / "out")]
    assert main(args) == 0
    assert fake_conll == [str(tmp_path / "data" / "conll2003")] * 2
    assert "NOSINK_DATA" in capsys.readouterr().err
    meta = json.loads((tmp_path / "out" / "ner.json").read_text())["meta"]
    assert meta["data"] == str(tmp_path / "data" / "conll2003")


def test_eval_data_without_option_or_variable_is_the_hub(saved, tmp_path, monkeypatch, fake_conll):
    monkeypatch.delenv("NOSINK_DATA", raising=False)
    monkeypatch.chdir(tmp_path)  # a ../shared/data beside the working folder or the checkout is not looked for
    (tmp_path / "shared" / "data" / "conll2003").mkdir(parents=True)
    assert main(["eval", "ner", str(saved), "--spec", "F*", "--epochs", "1", "--out", "out"]) == 0
    assert fake_conll == ["eriktks/conll2003"] * 2


def test_eval_mteb_data_dir_comes_from_nosink_data(saved, tmp_path, monkeypatch):
    import nosink.evals.mteb_eval as mteb_eval

    seen = {}

    def run_mteb(encoder, tasks, data_dir, *args, **kwargs):
        seen["data_dir"] = data_dir
        return {"tasks": {}}

    monkeypatch.setattr(mteb_eval, "run_mteb", run_mteb)
    monkeypatch.setenv("NOSINK_DATA", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "mteb", str(saved), "--specs", "F*", "--out", "out"]) == 0
    assert seen["data_dir"] == tmp_path
    assert main(["eval", "mteb", str(saved), "--specs", "F*", "--data-dir", "elsewhere", "--out", "out2"]) == 0
    assert str(seen["data_dir"]) == "elsewhere"


# --- failures name the right problem, in one line -------------------------------------------------------


def test_missing_model_folder_is_named_before_the_spec(tmp_path, capsys):
    missing = str(tmp_path / "does-not-exist")
    assert main(["encode", missing, "--text", "a", "-o", str(tmp_path / "v.npy")]) == 1
    assert f"no model folder at {missing}" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("name", ["missing_dir", "./missing_dir", "missing/dir/x"])
def test_plan_with_a_missing_model_says_so(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "F*", "--model", name]) == 1
    err = one_error_line(capsys.readouterr().err)
    assert f"no model folder at {name}" in err and "Repo id" not in err
    assert capsys.readouterr().out == ""


def test_a_file_given_as_the_model_is_named_as_a_file(tmp_path, capsys):
    file = tmp_path / "weights.bin"
    file.write_bytes(b"")
    assert main(["plan", "F*", "--model", str(file)]) == 1
    assert f"{file} is a file, not a model folder" in one_error_line(capsys.readouterr().err)


def test_plan_reads_the_depth_through_the_library(saved, capsys):
    assert main(["plan", "F* | B", "--model", str(saved)]) == 0
    assert "on 4 layers" in capsys.readouterr().out


def test_plan_prints_nothing_before_a_depth_error(capsys):
    assert main(["plan", "F*2 | B*3", "--depth", "4"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("nosink: error: bad spec: ")


def test_spec_errors_carry_no_terminal_escapes(capsys):
    assert main(["plan", "F* | \x1b]0;pwned\x07", "--depth", "4"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b" in err


def test_a_truncated_weights_file_is_one_line(tmp_path, capsys):
    folder = tmp_path / "plain"
    tiny_decoder("llama").save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    capsys.readouterr()
    assert main(["encode", str(folder), "--spec", "F*", "--text", "a", "-o", str(tmp_path / "v.npy")]) == 1
    one_error_line(capsys.readouterr().err)


def test_an_unexpected_library_error_is_one_line_and_v_shows_the_traceback(saved, tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise TypeError("'int' object is not\nsubscriptable \x1b[31m")

    monkeypatch.setattr(nosink.EncoderFromDecoder, "from_pretrained", broken)
    argv = ["encode", str(saved), "--text", "a", "-o", str(tmp_path / "v.npy")]
    assert main(argv) == 1
    err = one_error_line(capsys.readouterr().err)
    assert "TypeError: 'int' object is not subscriptable \\x1b[31m" in err
    assert main(["-v", *argv]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.splitlines()[-1].startswith("nosink: error: TypeError")


def test_ctrl_c_is_one_line_and_exit_130(saved, tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(nosink.EncoderFromDecoder, "from_pretrained", interrupted)
    assert main(["encode", str(saved), "--text", "a", "-o", str(tmp_path / "v.npy")]) == 130
    assert one_error_line(capsys.readouterr().err) == "nosink: error: interrupted\n"


def test_an_unreachable_hub_is_one_line_without_an_escaped_line_break(tmp_path, monkeypatch, capsys):
    import transformers

    def offline(*args, **kwargs):  # what transformers raises with HF_HUB_OFFLINE=1 or no network: two lines
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files.\nCheck your internet.")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", offline)
    argv = ["encode", "some-org/some-unknown", "--spec", "F*", "--text", "hi", "-o", str(tmp_path / "v.npy")]
    assert main(argv) == 1
    err = one_error_line(capsys.readouterr().err)
    assert "to load the files. Check your internet." in err and "\\n" not in err
    from nosink.models.loading import load_config

    with pytest.raises(OSError) as info:
        load_config("some-org/some-unknown")
    assert "\\n" not in str(info.value) and "\n" not in str(info.value)


def test_a_plain_decoder_without_spec_is_asked_for_spec_in_the_command_lines_words(tmp_path, capsys):
    folder = tmp_path / "plain"
    tiny_decoder("llama").save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    capsys.readouterr()
    encode = ["encode", str(folder), "--text", "hello", "-o", str(tmp_path / "v.npy")]
    corpus = ["encode-corpus", str(folder), "--input", str(tmp_path / "t.txt"), "--out", str(tmp_path / "o")]
    for command in (encode, corpus):
        assert main(command) == 1
        err = one_error_line(capsys.readouterr().err)
        assert f"{folder} is a plain decoder: give --spec, e.g. --spec 'F* | M0B*4'" in err and "spec=" not in err
    assert not (tmp_path / "v.npy").exists() and not (tmp_path / "o").exists()
    with pytest.raises(ValueError, match=r"give a spec, e\.g\. spec='F\* \| M0B\*4'"):  # Python keeps its words
        EncoderFromDecoder.from_pretrained(folder)
