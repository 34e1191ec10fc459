"""README.md stays true: its test command is what CI runs (its examples run in tests/test_docs.py)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_ci_runs_the_readme_test_command():
    ci_lines = [line for line in (ROOT / ".ci/run").read_text().splitlines() if "python3 -m venv" in line]
    assert len(ci_lines) == 1
    assert ci_lines[0] in README
