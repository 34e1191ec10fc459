"""The corpus input: its format, rows and bad rows, a copy of a stream, and the check that ids are unique.

Rows are streamed shard by shard (``shard_rows`` input rows each), never all at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nosink.checks import printable
from nosink.models import texts

from .world import Stopped, World

INPUT_FORMATS = {".txt": "txt", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
SPOOL = ".input-{}.tmp"  # standard input (or a pipe), copied into the folder by rank 0 for the run
PARQUET_BATCH = 8192  # rows per record batch read from a parquet file
_BOM = b"\xef\xbb\xbf"


class BadRowError(ValueError):
    """A row of the input that cannot be encoded (empty text, invalid JSON, missing field, ...).

    Attributes:
        row: the row's 0-based index in the input.
        line: its 1-based line number (``None`` for parquet).
        reason: what is wrong with it.
    """

    def __init__(self, path: str, row: int, line: int | None, reason: str) -> None:
        where = f"line {line}" if line is not None else f"row {row}"
        super().__init__(
            f"{printable(path)} {where}: {reason}; fix the row or skip bad rows "
            "(on_bad_row='skip', --skip-bad-rows), which counts them in the manifest"
        )
        self.row, self.line, self.reason = row, line, reason


class DuplicateIdError(ValueError):
    """Two rows of the input with the same id (ids name the vectors, so they must be unique).

    Attributes:
        id: the repeated id (as stored: a string).
        rows: the 0-based rows of its first two occurrences.
        lines: their 1-based line numbers (``None`` for parquet).
    """

    def __init__(self, path: str, id_: str, first: Row, second: Row) -> None:
        where = (
            f"lines {first.line} and {second.line}" if first.line is not None else f"rows {first.row} and {second.row}"
        )
        super().__init__(
            f"{printable(path)}: id {printable(repr(id_))} is on {where}; ids must be unique (each names one "
            "vector): fix the input, or leave out id_field (--id-field) and identify vectors by their row"
        )
        self.id = id_
        self.rows = (first.row, second.row)
        self.lines = (first.line, second.line)


@dataclass
class Row:
    row: int  # 0-based index in the input
    line: int | None  # 1-based line number (text formats)
    text: str | None = None
    id: str | None = None
    problem: str | None = None


@dataclass(frozen=True)
class Input:
    """A corpus input as a run reads it, once or several times."""

    path: Path  # the file (rank 0's copy, once a stream is copied)
    fmt: str  # "txt", "jsonl" or "parquet"
    label: str  # the input as messages name it (the path, or "standard input")
    text_field: str
    id_field: str | None
    stream: str | None  # "stdin" or "pipe": read once, so rank 0 copies it into the folder first

    def shards(self, shard_rows: int, wanted: Sequence[int]) -> Iterator[tuple[int, list[Row]]]:
        """``(k, rows of shard k)`` for each shard in ``wanted`` (ascending), streaming the input once."""
        return _shards_of(self.path, self.fmt, shard_rows, wanted, self.text_field, self.id_field)


def open_input(name: str, given: str | None, text_field: str, id_field: str | None) -> Input:
    """The input ``name`` (a path, or ``-`` for standard input), its format checked; nothing is read yet.

    Raises:
        ValueError: for an unknown format, or an id field in a ``.txt`` input.
        FileNotFoundError: if there is no such file.
    """
    path = Path(os.path.expanduser(name))
    stream = _stream_kind(name, path)
    label = "standard input" if stream == "stdin" else str(path)
    fmt = _input_format(path, given, label)
    if fmt == "txt" and id_field is not None:
        raise ValueError("id_field needs a .jsonl or .parquet input: a .txt file has no fields (rows are numbered)")
    if not stream and not path.is_file():
        raise FileNotFoundError(f"no input file at {printable(str(path))}")
    return Input(path, fmt, label, text_field, id_field, stream)


def _input_format(path: Path, given: str | None, label: str) -> str:
    """The input's format: ``given`` (``input_format``), else from the file's suffix."""
    formats = sorted(set(INPUT_FORMATS.values()))
    if given is not None:
        if given not in formats:
            raise ValueError(f"input_format must be one of {', '.join(formats)}, got {printable(repr(given))}")
        return given
    fmt = INPUT_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(
            f"cannot tell the format of {printable(label)}: the input must end in {', '.join(INPUT_FORMATS)} "
            f"(one text a line, JSON lines, or parquet), or name it with input_format= (--format {'|'.join(formats)})"
        )
    return fmt


def _stream_kind(name: str, path: Path) -> str | None:
    """``"stdin"`` for ``-``, ``"pipe"`` for a path that is not a regular file (``/dev/stdin`` on a pipe, a
    FIFO), else ``None`` (a file, read as often as needed)."""
    if name == "-":
        return "stdin"
    return "pipe" if path.exists() and not path.is_file() and not path.is_dir() else None


def spool(stdin: bool, path: Path, out: Path) -> Path:
    """Copy standard input (or the pipe at ``path``) into the folder, where every pass and rank can read it.

    Called by rank 0 while it holds the folder's lock, which is why older copies (a killed run's) can go.
    """
    for stale in out.glob(SPOOL.format("*")):
        stale.unlink(missing_ok=True)
    target = out / SPOOL.format(uuid.uuid4().hex[:8])
    try:
        with target.open("wb") as dst:
            src = sys.stdin.buffer if stdin else path.open("rb")
            try:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            finally:
                if src is not sys.stdin.buffer:
                    src.close()
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return target


def _parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as err:
        raise ImportError('reading .parquet needs pyarrow: pip install "nosink[parquet]"') from err
    return pq


def fingerprint(path: Path, fmt: str, text_field: str, id_field: str | None) -> dict[str, Any]:
    """The input's row count and sha256 (one streaming pass), and a check that parquet has the columns."""
    digest, newlines, size, last = hashlib.sha256(), 0, 0, b""
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            newlines += chunk.count(b"\n")
            size += len(chunk)
            last = chunk[-1:]
    if fmt == "parquet":
        file = _parquet().ParquetFile(path)
        names = file.schema_arrow.names
        for name in (text_field, id_field):
            if name is not None and name not in names:
                raise ValueError(f"{printable(str(path))} has no column {name!r}; its columns: {', '.join(names)}")
        rows = file.metadata.num_rows
    else:
        rows = newlines + (1 if size and last != b"\n" else 0)
    return {"format": fmt, "rows": rows, "sha256": digest.hexdigest()}


def _parse_line(raw: bytes, row: int, fmt: str, text_field: str, id_field: str | None) -> Row:
    out = Row(row, row + 1)
    raw = raw[:-1] if raw.endswith(b"\n") else raw
    raw = raw[:-1] if raw.endswith(b"\r") else raw
    if row == 0 and raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        out.problem = f"not valid UTF-8 (byte {err.start})"
        return out
    if fmt == "txt":
        out.text, out.problem = line, None if line else "empty line"
        return out
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        out.problem = f"invalid JSON ({err.msg} at column {err.colno})" if line.strip() else "empty line"
        return out
    except RecursionError:
        out.problem = "invalid JSON (nested too deeply)"
        return out
    except ValueError as err:  # an integer of more than 4300 digits, say
        out.problem = f"invalid JSON ({' '.join(str(err).split()) or type(err).__name__})"
        return out
    if not isinstance(record, dict):
        out.problem = f"not a JSON object (a {type(record).__name__})"
        return out
    return _check_fields(out, record, text_field, id_field)


def _check_fields(out: Row, record: dict[str, Any], text_field: str, id_field: str | None) -> Row:
    text = record.get(text_field)
    if text is None:
        out.problem = f"no {text_field!r} field" if text_field not in record else f"{text_field!r} is null"
    elif not isinstance(text, str):
        out.problem = f"{text_field!r} is a {type(text).__name__}, not a string"
    elif not text:
        out.problem = "empty text"
    else:
        out.problem = _not_unicode(text, repr(text_field))
        out.text = text if out.problem is None else None
    if out.problem is None and id_field is not None:
        value = record.get(id_field)
        if value is None:
            out.problem = f"no {id_field!r} field" if id_field not in record else f"{id_field!r} is null"
        elif isinstance(value, bool) or not isinstance(value, (str, int)):
            out.problem = f"{id_field!r} is a {type(value).__name__}; ids must be strings or integers"
        elif isinstance(value, str) and (problem := _not_unicode(value, f"the id {id_field!r}")):
            out.problem = problem
        else:
            out.id = str(value)
    return out


def _not_unicode(text: str, name: str) -> str | None:
    """Why ``text`` is not valid Unicode (a lone surrogate, from JSON's ``\\ud800``), or ``None``."""
    try:
        texts.check_unicode(text, name)
    except ValueError as err:
        return str(err)
    return None


def _shards_of(
    path: Path, fmt: str, shard_rows: int, wanted: Sequence[int], text_field: str, id_field: str | None
) -> Iterator[tuple[int, list[Row]]]:
    """``(k, rows of shard k)`` for each shard in ``wanted`` (ascending), streaming the input once."""
    if not wanted:
        return
    want, last = set(wanted), max(wanted)
    current: list[Row] = []
    if fmt == "parquet":
        file = _parquet().ParquetFile(path)
        columns = [text_field] + ([id_field] if id_field else [])
        start = 0
        for batch in file.iter_batches(batch_size=PARQUET_BATCH, columns=columns):
            n = batch.num_rows
            if n == 0:
                continue
            for k in range(start // shard_rows, (start + n - 1) // shard_rows + 1):
                if k not in want:
                    continue
                lo, hi = max(start, k * shard_rows), min(start + n, (k + 1) * shard_rows)
                part = batch.slice(lo - start, hi - lo).to_pydict()
                for j in range(hi - lo):
                    record = {name: part[name][j] for name in columns}
                    current.append(_check_fields(Row(lo + j, None), record, text_field, id_field))
                if hi == (k + 1) * shard_rows:
                    yield k, current
                    current = []
                    if k == last:
                        return
            start += n
    else:
        k = 0
        with path.open("rb") as fh:
            for row, raw in enumerate(fh):  # binary lines split on b"\n" only
                k = row // shard_rows
                if k > last:
                    return
                if k in want:
                    current.append(_parse_line(raw, row, fmt, text_field, id_field))
                    if len(current) == shard_rows:
                        yield k, current
                        current = []
    if current:  # the last, short shard
        yield current[0].row // shard_rows, current


def id_hash(id_: str) -> int:
    """A 64-bit hash of an id, the same in every process (Python's ``hash`` of a str is salted per process)."""
    return int.from_bytes(hashlib.blake2b(id_.encode("utf-8"), digest_size=8).digest(), "little")


def check_unique_ids(source: Input, shard_rows: int, world: World, n_shards: int) -> None:
    """Refuse an input whose ids repeat, before any shard is encoded.

    Each rank hashes the ids of its own shards to 64-bit integers; the ranks pool and sort them (8 bytes a row).
    Only if two hashes are equal is the input read again, keeping just the ids with those hashes, to name the
    first repeated id and its two lines. Every rank reaches the same verdict.

    Raises:
        DuplicateIdError: for the first row whose id an earlier row has.
    """
    mine = list(range(world.rank, n_shards, world.size))
    failure: Exception | None = None
    try:
        ids = (r.id for _, rows in source.shards(shard_rows, mine) for r in rows if r.id is not None)
        hashes = np.fromiter(map(id_hash, ids), dtype=np.uint64).tobytes()
    except Exception as err:  # still meet the others in the gather, then stop
        failure, hashes = err, None
    gathered = world.gather(hashes)
    if failure is not None:
        raise failure
    if any(h is None for h in gathered):
        raise Stopped("another rank failed while reading ids")
    pooled = np.concatenate([np.frombuffer(h, dtype=np.uint64) for h in gathered])
    del hashes, gathered
    pooled.sort()
    suspects = set(np.unique(pooled[1:][pooled[1:] == pooled[:-1]]).tolist())
    del pooled
    if not suspects:
        return
    seen: dict[str, Row] = {}
    every = range(n_shards)
    for _, rows in source.shards(shard_rows, every):
        for r in rows:
            if r.id is not None and id_hash(r.id) in suspects:
                first = seen.setdefault(r.id, r)
                if first is not r:
                    raise DuplicateIdError(source.label, r.id, first, r)
