"""Small input checks shared by every floor: positive integers, and quoting untrusted text safely.

>>> positive_int(3, "batch_size")
3
>>> printable("F* | \\x1b]0;pwned\\x07")
'F* | \\\\x1b]0;pwned\\\\x07'
"""

from __future__ import annotations

from typing import Any

__all__ = ["positive_int", "printable"]


def positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) of at least ``minimum``.

    Raises:
        ValueError: naming ``name``, what was given and what is accepted.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        wanted = {1: "a positive integer", 0: "a non-negative integer"}.get(minimum, f"an integer >= {minimum}")
        raise ValueError(f"{name} must be {wanted}, got {printable(repr(value))}")
    return value


def printable(text: str) -> str:
    """``text`` with every non-printable character (terminal escapes, line breaks, ...) shown as an escape.

    Use it on any user or file input quoted in a message, so that a spec or path cannot drive the
    terminal that shows the message.
    """
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(text))
