"""README.md stays true: its test command is what CI runs, and its Python examples run."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_ci_runs_the_readme_test_command():
    ci_lines = [line for line in (ROOT / ".ci/run").read_text().splitlines() if line.startswith("python3 -m venv")]
    assert len(ci_lines) == 1
    assert ci_lines[0] in README


def test_readme_python_examples_run(smollm2_path):
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) >= 2
    for block in blocks:
        # The hub is out of reach in tests: the same model comes from its local copy.
        block = block.replace('"HuggingFaceTB/SmolLM2-135M-Instruct"', repr(smollm2_path))
        scope: dict = {}
        exec(compile(block, "README.md", "exec"), scope)
        if "vectors" in scope:
            assert scope["vectors"].shape == (2, 576)
