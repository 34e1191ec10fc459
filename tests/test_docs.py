"""The docs cannot drift from the code: every example in README.md and docs/ runs, verbatim.

Each page runs in its own interpreter through ``tests/docs_runner.py`` (see its docstring for the
rules: python blocks run, pycon blocks are doctests, ``nosink`` commands run, hub ids resolve to
local copies, ``data/`` is the shared evaluation data).
"""

import subprocess
import sys
from pathlib import Path

import pytest
from docs_runner import SKIP, blocks, command_problems, commands, needs, output_matches, problems
from resources import missing

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
        missing(done.stdout.strip().splitlines()[-1])  # a failure with NOSINK_REQUIRE_RESOURCES=1
    assert done.returncode == 0, f"{page.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    assert done.stdout.strip().splitlines()[-1].startswith("OK ")


def test_the_docs_have_runnable_examples():
    runnable = [b for p in PAGES for b in blocks(p.read_text()) if b.lang in ("python", "pycon", "bash") and not b.skip]
    assert len(runnable) >= 40


def test_commands_of_long_runs_still_parse():
    """Blocks marked as long runs are not run, but their nosink commands must fit the current CLI,
    their specs must parse and their configuration names must make a sweep."""
    checked, found = 0, []
    for page in PAGES:
        for block in blocks(page.read_text()):
            if block.skip and block.lang == "bash":
                for cmd in commands(block.code):
                    if cmd.startswith("nosink "):
                        found += command_problems(cmd.replace("${S[@]}", "F*"))  # the results page's spec list
                        checked += 1
    assert found == []
    assert checked >= 10


@pytest.mark.parametrize(
    "cmd, problem",
    [
        ('nosink eval mteb demo --specs "F*" "F* | Q*7" --tasks STSBenchmark', "spec 'F* | Q*7' does not parse"),
        ("nosink plan 'F* | B*' --depth 4", "spec 'F* | B*' does not parse"),
        ('nosink inspect demo --compare "M0F*" "M0R*"', "spec 'M0R*' does not parse"),
        ('nosink eval sweep demo --configs INPLACE-BIDIR "MASK0-BIDRI" --ks 1 2', "do not make a sweep"),
        ("nosink eval sweep demo --configs INPLACE-BIDIR --ks 1 --nope", "does not parse with the current"),
    ],
)
def test_bad_specs_and_configurations_in_shown_commands_are_found(cmd, problem):
    found = command_problems(cmd)
    assert len(found) == 1 and problem in found[0], found
    fixed = {"Q*7": "B*7", "| B*'": "| B*2'", "M0R*": "M0B*", "BIDRI": "BIDIR", " --nope": ""}
    for bad, good in fixed.items():
        cmd = cmd.replace(bad, good)
    assert command_problems(cmd) == []


# --- the runner itself must fail on what it is there to catch ------------------------------------


def _run_text(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    """Run ``text`` as a page of its own, ``page.md``."""
    page = tmp_path / "page.md"
    page.write_text(text)
    return _run(page)


def test_runner_fails_a_broken_python_example(tmp_path):
    done = _run_text(tmp_path, "# t\n\n```python\nx = 1\n```\n\ntext\n\n```python\nassert x == 2, 'wrong'\n```\n")
    assert done.returncode not in (0, SKIP)
    assert "wrong" in done.stderr and "page.md" in done.stderr


def test_runner_checks_doctest_output(tmp_path):
    doctest = ">>> from nosink import parse_spec\n>>> str(parse_spec('f*2|b'))\n'F*3'\n"
    done = _run_text(tmp_path, f"```pycon\n{doctest}```\n")
    assert done.returncode not in (0, SKIP)
    assert "F*2 | B" in done.stdout + done.stderr


def test_runner_runs_nosink_commands(tmp_path):
    assert _run_text(tmp_path, "```bash\nnosink plan 'F* | B*2' --depth 4\n```\n").returncode == 0
    assert _run_text(tmp_path, "```bash\nnosink plan 'F* | Q' --depth 4\n```\n").returncode not in (0, SKIP)


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


def test_runner_checks_shown_output_of_python_and_bash_blocks(tmp_path):
    done = _run_text(tmp_path, "```python\nprint(1 + 1)\n```\n\nIt prints:\n\n```text\n3\n```\n")
    assert done.returncode not in (0, SKIP)
    assert "output shown at line 7" in done.stderr and "--- printed:\n2" in done.stderr
    plan = "```bash\nnosink plan 'F* | B' --depth 2\n```\n\n"
    assert _run_text(tmp_path, plan + "```text\nstep  stream  layer  kind  role\n```\n").returncode not in (0, SKIP)
    assert _run_text(tmp_path, plan + "```text\n...\nstep  stream  layer  kind  role\n...\n```\n").returncode == 0


def test_shown_blocks_that_are_not_output_are_marked_or_in_another_section(tmp_path):
    not_output = "```python\nprint(2)\n```\n\n<!-- docs-test: not-output the grammar -->\n```text\nx := y\n```\n"
    new_section = "```python\nprint(2)\n```\n\n## Next\n\n```text\nx := y\n```\n"
    for text in (not_output, new_section):
        assert _run_text(tmp_path, text).returncode == 0
    assert problems("<!-- docs-test: not-output -->\n```text\nx\n```\n")  # a reason is required


@pytest.mark.parametrize(
    "shown, printed, same",
    [
        ("2\n", "2\n", True),
        ("3\n", "2\n", False),
        ("a\n...\nz\n", "a\nb\nc\nz\n", True),
        ("a\n...\nz\n", "a\nz\n", True),
        ("a\n...\nz\n", "a\nb\n", False),
        ("a\nb\n", "a\nb\nc\n", False),  # nothing left over
        ("x ... y\n", "x 1 2 y\n", True),
        ("gap +0.143\n", "gap +0.144\n", True),  # one unit in the last digit: rounding
        ("gap +0.143\n", "gap +0.145\n", False),
        ("gap +0.143\n", "gap +0.1431\n", False),  # printed with other decimals
        ("0.5 1\n", "0.6 1\n", False),  # one decimal: exact
        ("(8, 576)\n", "(8, 577)\n", False),  # integers: exact
        ("a  \n\n", "a\n", True),  # trailing spaces and blank lines
    ],
)
def test_output_matching_rules(shown, printed, same):
    assert output_matches(shown, printed) is same
