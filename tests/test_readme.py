"""README.md stays true: its test command is what CI runs (its examples run in tests/test_docs.py)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_ci_runs_the_readme_test_command():
    ci_lines = [line for line in (ROOT / ".ci/run").read_text().splitlines() if "python3 -m venv" in line]
    assert len(ci_lines) == 1
    assert ci_lines[0] in README


def test_the_layout_table_names_every_package_folder():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Layout", 1)[1].split("\n\n", 2)[1]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    for folder in ("layerspec/", "models/", "evals/", "nosink/"):
        assert any(row.startswith(f"| `{folder}`") for row in rows), folder
    assert all(line.startswith("|") for line in table.splitlines()), "a stray line inside the layout table"
