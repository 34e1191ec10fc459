"""Small input checks shared by every floor: positive integers, and quoting untrusted text safely.

>>> positive_int(3, "batch_size")
3
>>> printable("F* | \\x1b]0;pwned\\x07")
'F* | \\\\x1b]0;pwned\\\\x07'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["count_arg", "positive_int", "printable"]


def positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) of at least ``minimum``.

    Raises:
        ValueError: naming ``name``, what was given and what is accepted.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be {_wanted(minimum)}, got {printable(repr(value))}")
    return value


def count_arg(minimum: int = 1, *, zero: str | None = None) -> Callable[[str], int]:
    """An ``argparse`` type for a count: an integer of at least ``minimum``, refused when the command line is parsed.

    argparse puts the argument's name before the message. With ``zero``, 0 is accepted too, and the message
    says what it means.

    >>> count_arg(2, zero="no selection stage")("0")
    0
    """
    import argparse  # only the command lines need it

    wanted = _wanted(minimum) + (f" or 0 ({zero})" if zero is not None else "")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {printable(repr(text))}") from None
        if value < minimum and not (zero is not None and value == 0):
            raise argparse.ArgumentTypeError(f"the value must be {wanted}, got {value}")
        return value

    return parse


def _wanted(minimum: int) -> str:
    return {1: "a positive integer", 0: "a non-negative integer"}.get(minimum, f"an integer >= {minimum}")


def printable(text: str) -> str:
    """``text`` with every non-printable character (terminal escapes, line breaks, ...) shown as an escape.

    Use it on any user or file input quoted in a message, so that a spec or path cannot drive the
    terminal that shows the message.
    """
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(text))
