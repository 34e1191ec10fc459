"""The one exception type of the spec language."""

from __future__ import annotations

from nosink.checks import printable

__all__ = ["SpecError"]

_WIDTH = 72  # longer specs are shown as a window of this many characters around the column


class SpecError(ValueError):
    """A layer spec that cannot be parsed, or cannot be resolved against a model.

    Attributes:
        problem: what is wrong, in words.
        spec: the spec text the problem was found in ('' when there is none).
        column: 1-based column of the problem in ``spec``, or ``None`` (a depth mismatch, say).
        expected: what would have been accepted there, or ``None``.

    ``str(error)`` adds the spec with a caret under the column.
    """

    def __init__(
        self,
        problem: str,
        spec: str = "",
        column: int | None = None,
        expected: str | None = None,
    ) -> None:
        self.problem = problem
        self.spec = spec
        self.column = column
        self.expected = expected
        super().__init__(self._render())

    def at(self, spec: str, column: int) -> SpecError:
        """The same error, located at ``column`` of ``spec`` (how the parser places a value's error)."""
        return type(self)(self.problem, spec, column, self.expected)

    def _render(self) -> str:
        # printable() everywhere: a spec from a file or the command line must not drive the terminal.
        head = printable(self.problem)
        if self.column is not None:
            head += f" at column {self.column}"
        if self.expected:
            head += f"; expected {printable(self.expected)}"
        if not self.spec and self.column is None:
            return head
        # Whitespace shows as one space, other unprintables as escapes; the caret counts their widths.
        pieces = [" " if ch.isspace() else printable(ch) for ch in self.spec]
        shown = "".join(pieces)
        caret = None
        if self.column is not None:
            caret = sum(map(len, pieces[: self.column - 1]))
        if len(shown) > _WIDTH:  # show a window around the column, like lark's get_context()
            start = max(0, min((caret or 0) - _WIDTH // 2, len(shown) - _WIDTH))
            end = start + _WIDTH
            prefix, suffix = ("..." if start else ""), ("..." if end < len(shown) else "")
            shown = prefix + shown[start:end] + suffix
            if caret is not None:
                caret = caret - start + len(prefix)
        lines = [head, "  " + shown]
        if caret is not None:
            lines.append("  " + " " * caret + "^")
        return "\n".join(lines)

    def __reduce__(self):  # keep the fields when pickled (multiprocessing, pytest-xdist)
        return (type(self), (self.problem, self.spec, self.column, self.expected))
