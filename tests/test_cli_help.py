"""The command line's help: quick (no torch or transformers imported), with defaults and descriptions."""

import argparse
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nosink.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "numpy", "nosink.models", "nosink.layerspec", "nosink.evals")


QUICK = [
    ["--help"],
    ["eval", "--help"],
    ["plan", "--help"],
    ["serve", "--help"],
    ["encode", "--help"],
    ["eval", "mteb", "-h"],
    ["eval", "ner", "-h"],
    ["inspect", "-h"],
    ["encode-corpus", "-h"],
]


@pytest.mark.parametrize("argv", QUICK)
def test_help_imports_neither_torch_nor_transformers(argv):
    code = (
        "import sys\n"
        "from nosink.cli import build_parser, main\n"
        "build_parser()\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_template_names_in_the_help_are_the_librarys_presets():
    from nosink.cli.args import TEMPLATES
    from nosink.models.templates import PRESETS

    assert TEMPLATES == tuple(PRESETS)


def test_the_package_names_come_on_first_use():
    code = (
        "import sys\n"
        "import nosink\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
        "assert set(nosink.__all__) <= set(dir(nosink)), dir(nosink)\n"
        "from nosink import *\n"
        "from nosink import EncoderFromDecoder, presets\n"
        "assert EncoderFromDecoder.__module__ == 'nosink.models.encoder' and presets.__name__.endswith('presets')\n"
        "assert parse_spec('F* | B').resolve(3) is not None\n"
        "assert nosink.models.EncoderFromDecoder is EncoderFromDecoder\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def _help(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one line per option
    with pytest.raises(SystemExit) as exit:
        main([*argv, "--help"])
    assert exit.value.code == 0
    return capsys.readouterr().out


def _options(out):
    """Each option's help block, whitespace collapsed: ``{"--lr": "--lr LR the probe's learning rate ..."}``."""
    blocks = re.split(r"\n(?=  -)", out.split("options:", 1)[1])
    return {block.split()[0].rstrip(","): " ".join(block.split()) for block in blocks if block.strip()}


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["encode"], {"--pooling": "mean", "--batch-size": "32", "--max-length": "512"}),
        (["eval", "ner"], {"--epochs": "3", "--lr": "0.005", "--max-length": "32"}),
        (["inspect"], {"--threshold": "0.5", "--positions": "3", "--max-tokens": "32", "--out": "inspect"}),
        (["eval", "sweep"], {"--configs": "INPLACE-BIDIR INPLACE-BACK MASK0-BIDIR"}),
        (["encode-corpus"], {"--batch-size": "32", "--shard-rows": "10000", "--dtype": "float32"}),
        (["tune"], {"--seed": "0", "--prepends": "0"}),
    ],
)
def test_help_shows_the_defaults(argv, shown, capsys, monkeypatch):
    out = _help(argv, capsys, monkeypatch)
    options = _options(out)
    for option, default in shown.items():
        assert options[option].endswith(f"(default: {default})"), options[option]
    assert "(default: None)" not in out and "(default: False)" not in out and "(default: [])" not in out
    assert "(default: True)" not in out  # a flag that turns something off (tune's --no-progress) shows no default


def test_the_sinks_guide_quotes_inspects_defaults():
    guide = (ROOT / "docs" / "guides" / "sinks.md").read_text(encoding="utf-8")
    quoted = dict(re.findall(r"`--(threshold|positions|max-tokens)` \(([\d.]+)\)", guide))
    assert set(quoted) == {"threshold", "positions", "max-tokens"}, quoted
    args = build_parser().parse_args(["inspect", "demo"])
    for option, value in quoted.items():
        assert str(getattr(args, option.replace("-", "_"))) == value


def test_demo_help_has_a_description(capsys, monkeypatch):
    out = _help(["demo"], capsys, monkeypatch)
    assert "paraphrase pair" in out.split("options:")[0]
    assert "--spec SPEC" in out and "(default: F* | M0B*10)" in out


def test_study_usage_shows_data_as_optional_and_asks_for_it_when_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("NOSINK_DATA", raising=False)
    out = _help(["eval", "study"], capsys, monkeypatch)
    assert "[--data DATA]" in out and "default: $NOSINK_DATA" in out
    with pytest.raises(SystemExit) as exit:
        main(["eval", "study", "demo", "--out", str(tmp_path / "out")])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "nosink eval study: error: the following arguments are required: --data (or set $NOSINK_DATA)" in err
    monkeypatch.setenv("NOSINK_DATA", str(tmp_path / "data"))
    args = build_parser().parse_args(["eval", "study", "demo", "--out", str(tmp_path / "out")])
    assert args.data == str(tmp_path / "data")
    args = build_parser().parse_args(["eval", "study", "demo", "--data", "given", "--out", str(tmp_path / "out")])
    assert args.data == "given"


def test_the_python_m_entry_points_answer_help():
    for module in ("nosink", "nosink.cli"):
        done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and done.stdout.startswith("usage: nosink"), done.stderr


@pytest.mark.parametrize(
    "bounds, good, bad, wanted",
    [
        ((0, math.inf, False, True), "2.5", "0", "a positive number"),
        ((0, 1, True, True), "1", "1.5", "between 0 and 1"),
        ((0, 1, True, False), "0", "1", "at least 0 and below 1"),
        ((0, 1, False, False), "0.5", "1", "above 0 and below 1"),
        ((0, 2, False, True), "2", "0", "above 0 and at most 2"),
    ],
)
def test_number_arguments_name_their_bounds(bounds, good, bad, wanted):
    from nosink.cli.args import number

    low, high, low_included, high_included = bounds
    parse = number(low, high, low_included=low_included, high_included=high_included)
    assert parse(good) == float(good)
    with pytest.raises(argparse.ArgumentTypeError, match=f"the value must be {wanted}, got '{bad}'"):
        parse(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="must be"):
        parse("nan")
