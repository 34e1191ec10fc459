"""The docs cannot drift from the code: every example in README.md and docs/ runs, verbatim.

Each page runs in its own interpreter through ``tests/docs_runner.py`` (see its docstring for the
rules: python blocks run, pycon blocks are doctests, ``nosink`` commands run, hub ids resolve to
local copies, ``data/`` is the shared evaluation data).
"""

import subprocess
import sys
from pathlib import Path

import pytest
from docs_runner import SKIP, blocks, commands, needs, problems

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "tests" / "docs_runner.py"
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
IDS = [str(p.relative_to(ROOT)) for p in PAGES]


def _run(page: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUNNER), str(page)], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_block_is_run_or_declared(page):
    assert problems(page.read_text()) == []


@pytest.mark.parametrize(
    "page", [p for p in PAGES if any(b.lang in ("python", "pycon", "bash") for b in blocks(p.read_text()))], ids=str
)
def test_page_examples_run(page):
    done = _run(page)
    if done.returncode == SKIP:
        pytest.skip(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0, f"{page.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    assert done.stdout.strip().splitlines()[-1].startswith("OK ")


def test_the_docs_have_runnable_examples():
    runnable = [b for p in PAGES for b in blocks(p.read_text()) if b.lang in ("python", "pycon", "bash") and not b.skip]
    assert len(runnable) >= 40


def test_commands_of_long_runs_still_parse():
    """Blocks marked as long runs are not run, but their nosink commands must fit the current CLI."""
    import shlex

    from nosink.cli import _parser

    checked = 0
    for page in PAGES:
        for block in blocks(page.read_text()):
            if block.skip and block.lang == "bash":
                for cmd in commands(block.code):
                    if cmd.startswith("nosink "):
                        _parser().parse_args(shlex.split(cmd)[1:])  # argparse exits on a bad command
                        checked += 1
    assert checked >= 10


# --- the runner itself must fail on what it is there to catch ------------------------------------


def test_runner_fails_a_broken_python_example(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\nx = 1\n```\n\ntext\n\n```python\nassert x == 2, 'wrong'\n```\n")
    done = _run(page)
    assert done.returncode not in (0, SKIP)
    assert "wrong" in done.stderr and "page.md" in done.stderr


def test_runner_checks_doctest_output(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```pycon\n>>> from nosink import parse_spec\n>>> str(parse_spec('f*2|b'))\n'F*3'\n```\n")
    done = _run(page)
    assert done.returncode not in (0, SKIP)
    assert "F*2 | B" in done.stdout + done.stderr


def test_runner_runs_nosink_commands(tmp_path):
    good, bad = tmp_path / "good.md", tmp_path / "bad.md"
    good.write_text("```bash\nnosink plan 'F* | B*2' --depth 4\n```\n")
    bad.write_text("```bash\nnosink plan 'F* | Q' --depth 4\n```\n")
    assert _run(good).returncode == 0
    assert _run(bad).returncode not in (0, SKIP)


def test_undeclared_blocks_and_commands_are_problems():
    text = (
        "```\nbare\n```\n\n```sh\nls\n```\n\n```bash\nrm -rf /tmp/x\n```\n\n"
        "<!-- docs-test: skip -->\n```python\nx\n```\n\n<!-- docs-test: skip takes hours -->\n```python\ny\n```\n"
    )
    found = problems(text)
    assert len(found) == 4, found
    assert "'(none)'" in found[0] and "'sh'" in found[1] and "rm -rf" in found[2] and "reason" in found[3]


def test_blocks_inside_admonitions_are_found_and_dedented():
    text = "!!! note\n    ```python\n    x = 1\n    y = x + 1\n    ```\n\n```pycon\n>>> 1\n1\n```\n"
    found = blocks(text)
    assert [(b.lang, b.code) for b in found] == [("python", "x = 1\ny = x + 1\n"), ("pycon", ">>> 1\n1\n")]


def test_resources_are_detected():
    assert needs('EncoderFromDecoder.from_pretrained("HuggingFaceTB/SmolLM2-135M-Instruct")')["smollm2"]
    assert needs('load_conll("data/conll2003", "dev")')["data"]
    assert needs('run_mteb(encoder, data_dir="data", limit=4)')["data"]
    assert needs("nosink eval mteb demo --data-dir data --limit 4")["data"]
    assert not needs("the metadata/ folder")["data"]
    assert not needs("the data we use\n\n```python\nx = 1\n```\n")["data"]  # prose does not count
    assert needs('```python\nx = "data/conll2003"\n```\n')["data"]
