"""Reading a corpus folder back: the manifest checked, every shard memory-mapped, vectors and ids in input order."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nosink.checks import printable
from nosink.models.configs import read_json

from .folder import MANIFEST, RUN_FILE, SHARD_KEYS, is_count
from .shards import DTYPES, FORMAT, ST_NAMES, read_shard, sha256


class ShardedMatrix:
    """The vectors of a corpus folder as one read-only ``(rows, dimension)`` matrix, memory-mapped per shard.

    Index it like a numpy array (``m[5]``, ``m[10:20]``, ``m[[3, 1]]``, ``m[:, :8]``); only the rows asked
    for are read. ``np.asarray(m)`` reads everything. bfloat16 vectors come back as float32 (numpy
    has no bfloat16); float16 and float32 as stored.
    """

    def __init__(self, parts: list[np.ndarray], dimension: int, dtype: str) -> None:
        self.parts = parts
        self.bfloat16 = dtype == "bfloat16"
        self.offsets = np.cumsum([0, *(len(p) for p in parts)])
        self.shape = (int(self.offsets[-1]), dimension)
        self.dtype = np.dtype(np.float16 if dtype == "float16" else np.float32)

    def __len__(self) -> int:
        return self.shape[0]

    def _convert(self, block: np.ndarray) -> np.ndarray:
        if self.bfloat16:
            return (block.astype(np.uint32) << 16).view(np.float32)
        return np.array(block)

    def __getitem__(self, key: Any) -> np.ndarray:
        cols: Any = slice(None)
        if isinstance(key, tuple):
            key, cols = key[0], key[1] if len(key) > 1 else slice(None)
        if isinstance(key, (int, np.integer)):
            i = int(key) + (self.shape[0] if key < 0 else 0)
            if not 0 <= i < self.shape[0]:
                raise IndexError(f"row {key} is out of range for {self.shape[0]} rows")
            s = int(np.searchsorted(self.offsets, i, side="right")) - 1
            return self._convert(self.parts[s][i - self.offsets[s]])[cols]
        if isinstance(key, slice):  # without an index of every row
            index = np.arange(*key.indices(self.shape[0]))
        else:
            index = np.arange(self.shape[0])[key]  # lists, arrays and masks, numpy's way
        out = np.empty((len(index), self.shape[1]), dtype=self.dtype)
        which = np.searchsorted(self.offsets, index, side="right") - 1
        for s in np.unique(which):
            at = which == s
            out[at] = self._convert(self.parts[s][index[at] - self.offsets[s]])
        return out[:, cols]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        full = self[:]
        return full.astype(dtype) if dtype is not None else full


class CorpusIds(Sequence[str]):
    """The ids of a corpus folder in input order, read from the memory-mapped shards when asked for.

    A sequence of strings (``ids[5]``, ``ids[:3]``, ``list(ids)``, ``"doc-7" in ids``): only the ids asked
    for are decoded, so the ids of a corpus larger than memory cost 8 bytes a row (their offsets) until read.
    Equal to a list or tuple of the same strings.
    """

    def __init__(self, parts: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.parts = parts  # per shard: (UTF-8 bytes, offsets (n + 1,)), both memory-mapped
        self.starts = np.cumsum([0, *(len(offsets) - 1 for _, offsets in parts)])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _one(self, i: int) -> str:
        s = int(np.searchsorted(self.starts, i, side="right")) - 1
        blob, offsets = self.parts[s]
        j = i - int(self.starts[s])
        return bytes(blob[int(offsets[j]) : int(offsets[j + 1])]).decode("utf-8")

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return [self._one(i) for i in range(*key.indices(len(self)))]
        if isinstance(key, (int, np.integer)):
            i = int(key) + (len(self) if key < 0 else 0)
            if not 0 <= i < len(self):
                raise IndexError(f"id {key} is out of range for {len(self)} ids")
            return self._one(i)
        raise TypeError(f"ids are indexed by an integer or a slice, not {type(key).__name__}")

    def __iter__(self) -> Iterator[str]:
        for blob, offsets in self.parts:
            data = bytes(blob)  # one shard's ids at a time
            yield from (data[a:b].decode("utf-8") for a, b in itertools.pairwise(offsets.tolist()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (CorpusIds, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        head = ", ".join(repr(i) for i in self[:3])
        return f"CorpusIds([{head}{', ...' if len(self) > 3 else ''}], {len(self)} ids)"


@dataclass(frozen=True)
class CorpusEmbeddings:
    """A corpus folder read back, in input order.

    Attributes:
        vectors: ``(n, dimension)`` matrix, memory-mapped (:class:`ShardedMatrix`).
        rows: ``(n,)`` int64, each vector's row in the input (skipped bad rows are missing).
        ids: each vector's id (the ``id_field`` values as strings, read lazily: :class:`CorpusIds`), or ``None``
            if no id field was given.
        manifest: the folder's ``manifest.json``.
    """

    vectors: ShardedMatrix
    rows: np.ndarray
    ids: CorpusIds | None
    manifest: dict[str, Any]

    def __len__(self) -> int:
        return len(self.rows)


def _is_plain_name(name: Any) -> bool:
    """A file name without a folder: no separator, not ``.`` or ``..``, not absolute, printable."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and not any(c in name for c in "/\\\0")
        and not os.path.isabs(name)
        and printable(name) == name
    )


def _check_manifest(manifest: Any, where: str) -> None:
    """Refuse a manifest whose fields are missing or of the wrong type, naming the field.

    Raises:
        OSError: ``<where> is damaged: <field> ...``.
    """

    def bad(field_name: str, what: str, value: Any = ...) -> OSError:
        got = "" if value is ... else f", got {printable(repr(value))[:80]}"
        return OSError(f"{where} is damaged: {field_name} must be {what}{got}; encode the corpus again")

    if not isinstance(manifest, dict):
        raise OSError(f"{where} is damaged: it is not a JSON object; encode the corpus again")
    for name in ("rows", "dimension"):
        if name not in manifest:
            raise bad(name, "present (a count)")
        if not is_count(manifest[name]):
            raise bad(name, "a non-negative integer", manifest[name])
    if manifest.get("dtype") not in DTYPES:
        raise bad("dtype", f"one of {', '.join(DTYPES)}", manifest.get("dtype"))
    if manifest.get("id_field") is not None and not isinstance(manifest["id_field"], str):
        raise bad("id_field", "a string or null", manifest["id_field"])
    shards = manifest.get("shards")
    if not isinstance(shards, list):
        raise bad("shards", "a list", shards)
    for i, entry in enumerate(shards):
        if not isinstance(entry, dict):
            raise bad(f"shards[{i}]", "an object", entry)
        for key in SHARD_KEYS:
            if key not in entry:
                raise bad(f"shards[{i}].{key}", "present")
        for key in ("first_row", "end_row", "rows", "tokens"):
            if not is_count(entry[key]):
                raise bad(f"shards[{i}].{key}", "a non-negative integer", entry[key])
        if not _is_plain_name(entry["file"]):
            raise bad(f"shards[{i}].file", "a plain file name in the folder (no folder, '..' or absolute path)",
                      entry["file"])  # fmt: skip
        sha = entry["sha256"]
        if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
            raise bad(f"shards[{i}].sha256", "64 hex digits", sha)
        if entry["rows"] > entry["end_row"] - entry["first_row"]:
            raise bad(f"shards[{i}].rows", "at most end_row - first_row", entry["rows"])


def _shard_path(root: Path, name: str) -> Path:
    """``root / name``, refused if a symlink takes it out of ``root``."""
    path = root / name
    real, inside = os.path.realpath(path), os.path.realpath(root)
    if os.path.commonpath([real, inside]) != inside:
        raise OSError(f"shard {printable(name)} is a link to {printable(real)}, outside {printable(str(root))}; "
                      "a corpus folder's shards must be inside it")  # fmt: skip
    return path


def load_corpus_embeddings(folder: str | os.PathLike[str], *, verify: bool = True) -> CorpusEmbeddings:
    """Read a folder written by :func:`encode_corpus`: ids and vectors in input order, checked.

    Args:
        folder: the corpus folder.
        verify: check every shard's sha256 against the manifest (reads each file once).

    Raises:
        FileNotFoundError: if the folder has no ``manifest.json`` (the run did not finish) or a shard is missing.
        OSError: if a shard is corrupt (checksum, header, shape or rows that disagree with the manifest), or
            the manifest is unreadable, damaged (a field missing or of the wrong type, named in the message;
            a shard file named with a folder or outside the folder) or of a newer format.
    """
    root = Path(os.path.expanduser(os.fspath(folder)))
    manifest_file = root / MANIFEST
    where = printable(str(manifest_file))
    if not manifest_file.is_file():
        hint = " (the run did not finish: run the same command again)" if (root / RUN_FILE).is_file() else ""
        raise FileNotFoundError(f"no {MANIFEST} in {printable(str(root))}{hint}")
    manifest = read_json(manifest_file, "encode the corpus again")
    if isinstance(manifest, dict) and manifest.get("format") != FORMAT:
        found = printable(repr(manifest.get("format")))
        raise OSError(f"{where} has format {found}; this version of nosink reads {FORMAT}")
    _check_manifest(manifest, where)
    shards, dimension = manifest["shards"], manifest["dimension"]
    redo = "; run the same encode-corpus command again to redo it"
    parts: list[np.ndarray] = []
    row_parts: list[np.ndarray] = []
    id_parts: list[tuple[np.ndarray, np.ndarray]] | None = [] if manifest.get("id_field") else None
    kinds, expected_start = set(), 0
    for entry in shards:
        path = _shard_path(root, entry["file"])
        if not path.is_file():
            raise FileNotFoundError(f"shard {printable(entry['file'])} listed in the manifest is missing{redo}")
        if entry["first_row"] != expected_start:
            raise OSError(f"the manifest's shards do not tile the input at row {expected_start}")
        expected_start = entry["end_row"]
        if verify and sha256(path) != entry["sha256"]:
            raise OSError(f"shard {printable(entry['file'])} is corrupt: its sha256 differs from the manifest{redo}")
        try:
            tensors, kind = read_shard(path)
            for name in ("vectors", "rows", *(("ids_utf8", "ids_offsets") if id_parts is not None else ())):
                if name not in tensors:
                    raise ValueError(f"it has no {name!r} tensor")
            matrix, shard_rows = tensors["vectors"], tensors["rows"]
            if id_parts is not None:
                blob, offsets = tensors["ids_utf8"], tensors["ids_offsets"]
                if len(offsets) != len(shard_rows) + 1 or offsets[0] != 0 or offsets[-1] != len(blob):
                    raise ValueError("its ids do not match its rows")
                id_parts.append((blob, offsets))
        except (ValueError, OSError) as err:  # a damaged header, a missing tensor, a file shorter than it says
            reason = printable(str(err)) or type(err).__name__
            raise OSError(f"shard {printable(entry['file'])} is unreadable ({reason}){redo}") from None
        if matrix.shape != (entry["rows"], dimension) or len(shard_rows) != entry["rows"]:
            shape = (entry["rows"], dimension)
            raise OSError(f"shard {printable(entry['file'])} holds {matrix.shape} vectors, not {shape}{redo}")
        if len(shard_rows) and (shard_rows[0] < entry["first_row"] or shard_rows[-1] >= entry["end_row"]
                                or np.any(np.diff(shard_rows) <= 0)):  # fmt: skip
            raise OSError(f"shard {printable(entry['file'])} has rows outside its range or out of order{redo}")
        parts.append(matrix)
        row_parts.append(shard_rows)
        kinds.add(kind)
    if expected_start != manifest["rows"]:
        raise OSError(f"the manifest's shards cover {expected_start} of {manifest['rows']} input rows")
    stored = ST_NAMES[DTYPES[manifest["dtype"]]]
    if kinds - {stored}:
        raise OSError(f"shards hold {', '.join(sorted(kinds))} vectors but the manifest says {manifest['dtype']}")
    all_rows = (
        np.concatenate([np.asarray(r, dtype=np.int64) for r in row_parts]) if row_parts else np.empty(0, np.int64)
    )
    vectors = ShardedMatrix(parts, dimension, manifest["dtype"])
    return CorpusEmbeddings(vectors, all_rows, CorpusIds(id_parts) if id_parts is not None else None, manifest)
