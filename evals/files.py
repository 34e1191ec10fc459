"""Reading the evaluations' JSON-lines data files: one reader, so every file is split and checked alike.

Lines are those of :func:`nosink.models.texts.read_lines` (split at ``\\n`` only, a byte-order mark
dropped), so a JSON string holding U+2028 stays in its line and line numbers are an editor's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nosink.checks import printable
from nosink.models.texts import read_lines

__all__ = ["read_jsonl"]


def read_jsonl(path: str | Path, required: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The objects of a JSON-lines file, in file order, blank lines skipped.

    Args:
        path: the file (UTF-8, one JSON object a line).
        required: keys every object must hold.

    Raises:
        OSError: if the file cannot be read.
        ValueError: naming the file and the line: not UTF-8, not JSON, or not an object with the
            ``required`` keys.
    """
    where = printable(str(path))
    rows = []
    for n, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}:{n}: not a JSON line ({err.msg})") from None
        missing = [key for key in required if key not in row] if isinstance(row, dict) else list(required)
        if missing:
            keys = ", ".join(printable(key) for key in required)
            raise ValueError(f"{where}:{n}: expected the keys {keys}; missing {', '.join(map(printable, missing))}")
        if not isinstance(row, dict):
            raise ValueError(f"{where}:{n}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows
