"""Griffe extension for the API reference: show docstrings' doctest examples as ``pycon`` code.

Our docstrings hold doctests as plain ``>>>`` lines (the test suite runs them). Markdown would read
them as prose (and their ``[(...)]`` output as links), so each run of ``>>>`` lines and the output
after them, up to a blank line, is fenced before mkdocstrings renders it. The sources are unchanged.
"""

from __future__ import annotations

from typing import Any

import griffe


def fence_doctests(text: str) -> str:
    """Wrap every doctest chunk of ``text`` (a ``>>>`` line to the next blank line) in a pycon fence."""
    out: list[str] = []
    chunk: list[str] = []
    indent = ""
    for line in [*text.splitlines(), ""]:
        stripped = line.strip()
        if chunk and not stripped:
            out += [f"{indent}```pycon", *chunk, f"{indent}```"]
            chunk = []
        elif chunk or stripped.startswith(">>>"):
            if not chunk:
                indent = line[: len(line) - len(line.lstrip())]
            chunk.append(line)
            continue
        out.append(line)
    return "\n".join(out[:-1]) if out and out[-1] == "" else "\n".join(out)


class DoctestFences(griffe.Extension):
    """Fence doctest examples in every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite ``obj``'s docstring in place."""
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
