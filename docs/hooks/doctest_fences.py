"""Griffe extension for the API reference: docstrings written for doctest and Sphinx, read as Markdown.

- Our docstrings hold doctests as plain ``>>>`` lines (the test suite runs them). Markdown would read
  them as prose (and their ``[(...)]`` output as links), so each run of ``>>>`` lines and the output
  after them, up to a blank line, is fenced as ``pycon`` code.
- Sphinx roles (``:class:`~nosink.layerspec.spec.Spec```, ``:meth:`encode```) become code spans
  (the last name only after ``~``, as Sphinx shows them).

The sources are unchanged; only what mkdocstrings renders is.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|attr|mod|data|exc|obj):`(~?)([^`]+)`")


def plain_roles(text: str) -> str:
    """Turn Sphinx cross-reference roles into Markdown code spans."""
    return _ROLE.sub(lambda m: f"`{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}`", text)


def fence_doctests(text: str) -> str:
    """Wrap every doctest chunk of ``text`` (a ``>>>`` line to the next blank line) in a pycon fence.

    An indented chunk (a reST literal block after ``Examples::``) is moved to the margin, where a
    Markdown fence works, and the ``::`` before it becomes ``:``.
    """
    out: list[str] = []
    chunk: list[str] = []
    indent = ""
    for line in [*text.splitlines(), ""]:
        stripped = line.strip()
        if chunk and not stripped:
            if indent:
                chunk = [c[len(indent) :] if c.startswith(indent) else c.lstrip() for c in chunk]
                heading = next((i for i in range(len(out) - 1, -1, -1) if out[i].strip()), None)
                if heading is not None and out[heading].endswith("::"):
                    out[heading] = out[heading][:-1]
            out += ["```pycon", *chunk, "```"]
            chunk = []
        elif chunk or stripped.startswith(">>>"):
            if not chunk:
                indent = line[: len(line) - len(line.lstrip())]
            chunk.append(line)
            continue
        out.append(line)
    return "\n".join(out[:-1]) if out and out[-1] == "" else "\n".join(out)


class DoctestFences(griffe.Extension):
    """Fence doctest examples and plain Sphinx roles in every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite ``obj``'s docstring in place."""
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(fence_doctests(obj.docstring.value))
