"""The floors of docs/architecture.md, read from the import statements of the product code.

Every import counts, at module level or inside a function, except those under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Folder -> import package, as pyproject.toml's package-dir maps them.
PACKAGES = {"layerspec": "nosink.layerspec", "models": "nosink.models", "corpus": "nosink.corpus",
            "evals": "nosink.evals", "nosink": "nosink"}  # fmt: skip
# docs/architecture.md's floors, lowest first: a module imports only from its own floor and the ones below.
FLOORS = ["nosink.checks", "nosink.layerspec", "nosink.models", "nosink.corpus", "nosink.evals", "nosink"]
# Packages whose modules import one another without a cycle.
ACYCLIC = ("nosink.layerspec", "nosink.models", "nosink.corpus")


def module_names() -> dict[str, Path]:
    names = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names[".".join((package, *parts))] = path
    return names


MODULES = module_names()


def floor(module: str) -> int:
    """The floor a module lives on: the longest floor name that is a prefix of it."""
    best = max((f for f in FLOORS if module == f or module.startswith(f + ".")), key=len)
    return FLOORS.index(best)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports(module: str, path: Path | None = None) -> set[str]:
    """The product modules ``module`` imports at run time (a package import counts as its ``__init__``)."""
    path = MODULES[module] if path is None else path
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from package import module` imports the module; `from module import name` the module.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in MODULES)
    found.discard(module)
    return found


GRAPH = {module: imports(module) for module in MODULES}


def test_the_floors_cover_every_module():
    assert "nosink.models.encoder" in GRAPH and "nosink.layerspec.grammar" in GRAPH
    assert all(floor(m) >= 0 for m in GRAPH)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_its_floor_and_those_below(module):
    # The root package's __init__ names the public API lazily: it may name any floor.
    if module == "nosink":
        return
    upward = sorted(t for t in GRAPH[module] if floor(t) > floor(module))
    assert not upward, f"{module} (floor {FLOORS[floor(module)]}) imports {upward} from above"


def test_no_import_cycles_in_the_lower_packages():
    def cycle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in GRAPH[node]:
                if nxt == start:
                    return [*path, start]
                if nxt not in path and nxt.startswith(start.rsplit(".", 1)[0]):
                    stack.append((nxt, [*path, nxt]))
        return None

    cycles = []
    for module in GRAPH:
        if module.startswith(ACYCLIC) and module not in ACYCLIC:
            found = cycle_from(module)
            if found:
                cycles.append(" -> ".join(found))
    assert not cycles, "\n".join(cycles)


def test_the_check_sees_an_upward_import(tmp_path):
    # The reader above finds what it should: a relative import, a function-level one and a TYPE_CHECKING one.
    source = (
        "from typing import TYPE_CHECKING\nfrom . import encoder\n"
        "if TYPE_CHECKING:\n    from nosink.evals import demo\n"
        "def f():\n    from nosink.serve import create_app\n"
    )
    path = tmp_path / "probe.py"
    path.write_text(source, encoding="utf-8")
    found = imports("nosink.models.probe", path)
    assert found == {"nosink.models.encoder", "nosink.serve"}


def test_the_page_names_the_floors_this_test_checks():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for folder in PACKAGES:
        assert re.search(rf"`{folder}/`", page), f"docs/architecture.md does not name the floor {folder}/"
    assert "nosink.checks" in page
