"""Encode a corpus file into a folder of safetensors shards, on one process or many (``torchrun``).

The layout of a corpus folder::

    run.json                  the arguments, written first; a rerun must match it
    shard-00000.safetensors   vectors (N, D), rows (N,) int64, ids (UTF-8 bytes + offsets) if any
    shard-00000.json          written after its shard: row range, row count, sha256, skipped rows
    ...
    manifest.json             written last, by rank 0: the arguments, every shard, the summary

**Sharding.** Shard ``k`` holds input rows ``[k * shard_rows, (k + 1) * shard_rows)`` (minus skipped bad
rows), in input order, and is written by rank ``k % world_size``. Shards depend on ``shard_rows`` only, so
the number of processes does not change the result, and a rerun may use another number of GPUs.

**Order and memory.** Every rank streams the input and keeps the rows of one shard of its own at a time;
the shard's texts are sorted by length for tight batches (the length sort works within that window of
``shard_rows`` rows), encoded, and each batch's vectors are written at their rows' places in the shard's
file as soon as they are pooled. A reader thread reads and tokenizes the next shard while the model runs,
and a writer thread seals the previous shard (flush to disk, sha256, rename), so a rank holds the texts
and tokens of two shards and one batch of vectors (plus the batch on the device), whatever the corpus
size; what grows with the corpus is 8 bytes a row for the id check and a small record a shard.

**Ids.** With an ``id_field``, ids must be unique: before any shard is encoded the ranks pool a 64-bit hash
of every id (each rank hashing its own shards' ids), and a repeat stops the run with the id and both lines.

**Resuming.** A shard is written under a temporary name and renamed, then its ``.json`` is written the same
way; a shard counts as done only when its ``.json`` exists and the file's sha256 matches it. A rerun
with the same arguments reuses the shards that are done and (re)writes the rest, so a run killed at
any point and run again ends with every input row encoded exactly once. A rerun with other arguments
into the same folder is refused. One run at a time: rank 0 holds an exclusive ``flock`` on the folder's
``.lock`` from before it reads the folder until the run ends (the kernel drops it when the process dies,
so a killed run leaves no stale lock); a second run is refused. If one rank fails, the others stop at
their next batch and all report it (no rank is left waiting in a collective).

**Processes.** Under ``torchrun`` (``RANK`` and ``WORLD_SIZE`` in the environment) the default process
group is created if needed (``cuda:nccl,cpu:gloo`` when the encoder is on a GPU, ``gloo`` otherwise);
the small control messages (arguments, progress, summaries) travel through separate gloo groups.
Without ``torchrun`` it is one process.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import queue
import stat
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from tqdm.auto import tqdm

from nosink.checks import positive_int, printable

from . import batching as _batching
from . import texts as _texts
from .pooling import POOLINGS

__all__ = [
    "BadRowError",
    "CorpusEmbeddings",
    "CorpusIds",
    "CorpusSummary",
    "DuplicateIdError",
    "RankSummary",
    "ShardedMatrix",
    "encode_corpus",
    "load_corpus_embeddings",
    "local_device",
]

logger = logging.getLogger(__name__)

FORMAT = 1  # version of the corpus folder layout
RUN_FILE = "run.json"
MANIFEST = "manifest.json"
LOCK_FILE = ".lock"  # rank 0 holds an exclusive flock on it while a run writes the folder
SPOOL = ".input-{}.tmp"  # standard input (or a pipe), copied into the folder by rank 0 for the run
INPUT_FORMATS = {".txt": "txt", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_BOM = b"\xef\xbb\xbf"
PARQUET_BATCH = 8192  # rows per record batch read from a parquet file
SHARD_KEYS = ("file", "first_row", "end_row", "rows", "sha256", "tokens")  # what the manifest lists per shard
_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64, "U8": np.uint8}  # BF16: bits


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

    def __init__(self, path: str, id_: str, first: _Row, second: _Row) -> None:
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


# --------------------------------------------------------------------------- summaries


@dataclass(frozen=True)
class RankSummary:
    """What one process did in one run.

    Attributes:
        rank: the process's rank.
        texts: rows it encoded in this run.
        tokens: tokens it ran through the model (sink token and instruction included).
        skipped: bad rows it skipped in this run.
        reused: rows of shards it found complete and verified (not encoded again).
        shards_written: shards it wrote.
        shards_reused: shards it found complete and verified.
        seconds: its time from reading the input to its last shard.
    """

    rank: int
    texts: int = 0
    tokens: int = 0
    skipped: int = 0
    reused: int = 0
    shards_written: int = 0
    shards_reused: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class CorpusSummary:
    """The outcome of :func:`encode_corpus`, the same on every rank.

    Attributes:
        folder: the corpus folder.
        rows: rows in the input.
        encoded: rows with a vector in the folder (this run's and reused ones).
        skipped: bad rows skipped, in all runs.
        texts: rows encoded in this run.
        tokens: tokens run through the model in this run.
        seconds: wall time on rank 0 from the moment all processes have joined (models loaded) to the manifest.
        ranks: what each process did.
    """

    folder: Path
    rows: int
    encoded: int
    skipped: int
    texts: int
    tokens: int
    seconds: float
    ranks: list[RankSummary] = field(default_factory=list)

    @property
    def texts_per_second(self) -> float:
        """Rows encoded in this run per second of wall time."""
        return self.texts / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (as stored in the manifest)."""
        out = asdict(self)
        out["folder"] = str(self.folder)
        out["texts_per_second"] = round(self.texts_per_second, 2)
        out["seconds"] = round(self.seconds, 3)
        for r in out["ranks"]:
            r["seconds"] = round(r["seconds"], 3)
        return out


# --------------------------------------------------------------------------- reading the input


@dataclass
class _Row:
    row: int  # 0-based index in the input
    line: int | None  # 1-based line number (text formats)
    text: str | None = None
    id: str | None = None
    problem: str | None = None


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


def _spool(stdin: bool, path: Path, out: Path) -> Path:
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


def _fingerprint(path: Path, fmt: str, text_field: str, id_field: str | None) -> dict[str, Any]:
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


def _parse_line(raw: bytes, row: int, fmt: str, text_field: str, id_field: str | None) -> _Row:
    out = _Row(row, row + 1)
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


def _check_fields(out: _Row, record: dict[str, Any], text_field: str, id_field: str | None) -> _Row:
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
        _texts.check_unicode(text, name)
    except ValueError as err:
        return str(err)
    return None


def _shards_of(
    path: Path, fmt: str, shard_rows: int, wanted: Sequence[int], text_field: str, id_field: str | None
) -> Iterator[tuple[int, list[_Row]]]:
    """``(k, rows of shard k)`` for each shard in ``wanted`` (ascending), streaming the input once."""
    if not wanted:
        return
    want, last = set(wanted), max(wanted)
    current: list[_Row] = []
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
                    current.append(_check_fields(_Row(lo + j, None), record, text_field, id_field))
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


def _id_hash(id_: str) -> int:
    """A 64-bit hash of an id, the same in every process (Python's ``hash`` of a str is salted per process)."""
    return int.from_bytes(hashlib.blake2b(id_.encode("utf-8"), digest_size=8).digest(), "little")


def _check_unique_ids(job: _Job, world: _World, n_shards: int) -> None:
    """Refuse an input whose ids repeat, before any shard is encoded.

    Each rank hashes the ids of its own shards (one streaming pass, ``k % world_size == rank``) to 64-bit
    integers; the ranks pool them and sort them, 8 bytes a row, never the ids themselves. Only if two hashes
    are equal (a repeated id, or rarely a collision) is the input read once more, keeping just the ids with
    those hashes, to name the first repeated id and its two lines. Every rank reaches the same verdict.

    Raises:
        DuplicateIdError: for the first row whose id an earlier row has.
    """
    mine = list(range(world.rank, n_shards, world.size))
    failure: Exception | None = None
    try:
        hashes = np.fromiter(
            (_id_hash(r.id) for _, rows in _shards_of(job.source, job.fmt, job.shard_rows, mine, job.text_field,
                                                       job.id_field) for r in rows if r.id is not None),
            dtype=np.uint64,
        ).tobytes()  # fmt: skip
    except Exception as err:  # still meet the others in the gather, then stop
        failure, hashes = err, None
    gathered = world.gather(hashes)
    if failure is not None:
        raise failure
    if any(h is None for h in gathered):
        raise _Stopped("another rank failed while reading ids")
    pooled = np.concatenate([np.frombuffer(h, dtype=np.uint64) for h in gathered])
    del hashes, gathered
    pooled.sort()
    suspects = set(np.unique(pooled[1:][pooled[1:] == pooled[:-1]]).tolist())
    del pooled
    if not suspects:
        return
    seen: dict[str, _Row] = {}
    every = range(n_shards)
    for _, rows in _shards_of(job.source, job.fmt, job.shard_rows, every, job.text_field, job.id_field):
        for r in rows:
            if r.id is not None and _id_hash(r.id) in suspects:
                first = seen.setdefault(r.id, r)
                if first is not r:
                    raise DuplicateIdError(job.label, r.id, first, r)


_END = object()


class _Prefetch:
    """The items of an iterator, each made on a background thread while the caller works on the one before.

    At most two items are alive: the caller's and the next one (the thread waits for the caller to take an
    item before making another). An error in the thread is raised in the caller, at that item.
    """

    def __init__(self, items: Iterator[Any], name: str) -> None:
        self.items, self.stopped = items, False
        self.slot = threading.Semaphore(1)
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._make, name=name, daemon=True)
        self.thread.start()

    def _make(self) -> None:
        try:
            while True:
                self.slot.acquire()
                if self.stopped:
                    return
                item = next(self.items, _END)
                self.queue.put(item)
                if item is _END:
                    return
        except BaseException as err:  # handed to the caller
            self.queue.put(_Failed(err))

    def __iter__(self) -> Iterator[Any]:
        while True:
            item = self.queue.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            self.slot.release()  # the thread may make the next one
            yield item

    def close(self) -> None:
        self.stopped = True
        self.slot.release()
        self.thread.join()


@dataclass(frozen=True)
class _Failed:
    error: BaseException


# --------------------------------------------------------------------------- processes


@dataclass
class _World:
    rank: int = 0
    size: int = 1
    control: Any = None  # gloo groups; None for one process
    progress: Any = None
    owned: bool = False  # this call created the default process group

    def broadcast(self, value: Any) -> Any:
        if self.size == 1:
            return value
        box = [value]
        torch.distributed.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def gather(self, value: Any) -> list[Any]:
        if self.size == 1:
            return [value]
        out: list[Any] = [None] * self.size
        torch.distributed.all_gather_object(out, value, group=self.control)
        return out

    def close(self) -> None:
        if self.size > 1:
            torch.distributed.barrier(group=self.control)
        if self.owned:
            torch.distributed.destroy_process_group()


def _join(device: torch.device, timeout: timedelta) -> _World:
    """This process's place: torch.distributed when launched by torchrun (or already set up), else alone."""
    dist = torch.distributed
    if not dist.is_available():
        return _World()
    owned = False
    if not dist.is_initialized():
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            return _World()
        backend = "cuda:nccl,cpu:gloo" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, timeout=timeout)
        owned = True
    rank, size = dist.get_rank(), dist.get_world_size()
    if size == 1:
        return _World(owned=owned)
    control = dist.new_group(backend="gloo", timeout=timeout)
    progress = dist.new_group(backend="gloo", timeout=timeout)
    return _World(rank, size, control, progress, owned)


def local_device() -> torch.device:
    """The device this process should encode on: ``cuda:LOCAL_RANK`` when CUDA is available, else the CPU.

    ``LOCAL_RANK`` is set by ``torchrun`` (0 when not launched by it).
    """
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


class _Progress:
    """Rows done, over every rank; a tqdm bar on rank 0.

    With several ranks a background thread all-reduces the counts over its own gloo group, once per
    ``interval``, in lockstep on every rank until all ranks are done: the encoding loop never waits
    for it, and the end of the loop is where ranks wait for each other. A rank that is done stops
    sleeping between exchanges (its partners' pace sets theirs), so the run ends as soon as the last
    rank is done, not up to ``interval`` later.
    """

    def __init__(self, world: _World, total: int, show: bool, interval: float) -> None:
        self.world, self.interval = world, interval
        self.done, self.finished = 0, False
        self.failed = False  # this rank failed: the others stop at their next batch
        self.stopping = False  # some rank failed (or the exchange broke): stop at the next batch
        self.wake = threading.Event()  # set when this rank is done: no waiting out the interval at the end
        self.bar = tqdm(total=total, desc="encode-corpus", unit="row", disable=not show or world.rank != 0)
        self.thread: threading.Thread | None = None
        if world.size > 1:
            self.thread = threading.Thread(target=self._loop, name="nosink-corpus-progress", daemon=True)
            self.thread.start()

    def add(self, n: int) -> None:
        self.done += n
        if self.thread is None:
            self.bar.update(n)

    def check(self) -> None:
        """Raise :class:`_Stopped` if another rank has failed (called between batches)."""
        if self.stopping:
            raise _Stopped("another rank failed")

    def fail(self) -> None:
        """Tell the other ranks (at the next exchange) that this one failed."""
        self.failed = True

    def finish(self) -> None:
        self.finished = True
        self.wake.set()
        if self.thread is not None:
            self.thread.join()
        self.bar.close()

    def _loop(self) -> None:
        while True:
            finished = self.finished  # read first: once it is set, done is final
            counts = torch.tensor([self.done, int(finished), int(self.failed)], dtype=torch.int64)
            try:
                torch.distributed.all_reduce(counts, group=self.world.progress)
            except Exception as err:  # a rank is gone: the end-of-run exchange reports it, not this thread
                logger.debug("progress exchange failed: %s", err)
                self.stopping = True
                return
            self.bar.n = int(counts[0])
            self.bar.refresh()
            if int(counts[2]):
                self.stopping = True
            if int(counts[1]) == self.world.size:
                return
            self.wake.wait(self.interval)


# --------------------------------------------------------------------------- files


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _write_atomic(target: Path, write: Any) -> None:
    """``write(tmp_path)``, flushed to disk, then renamed to ``target``: a reader sees all of it or none."""
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        with tmp.open("rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _write_json(target: Path, value: Any) -> None:
    _write_atomic(target, lambda tmp: tmp.write_text(json.dumps(value, indent=1) + "\n", encoding="utf-8"))


def _shard_name(k: int) -> str:
    return f"shard-{k:05d}.safetensors"


_ST_NAMES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


class _ShardFile:
    """Shard ``k``'s safetensors file, written while the shard is encoded: vectors go to disk batch by batch.

    The file's size is known before the first batch (rows, ids and the vectors' shape), so the header, the
    rows and the ids are written first, under a temporary name, and each batch's vectors are written in
    place (:meth:`put`); the process never holds more vectors than one batch. :meth:`seal` flushes the file
    to disk, takes its sha256 and renames it, so a reader sees a whole shard or none.
    """

    def __init__(self, out: Path, k: int, n: int, dimension: int, dtype: torch.dtype, rows: list[int],
                 ids: list[str] | None) -> None:  # fmt: skip
        self.k, self.target = k, out / _shard_name(k)
        self.tmp = self.target.with_name(f".{self.target.name}.{uuid.uuid4().hex[:8]}.tmp")
        self.row_bytes = dimension * torch.empty((), dtype=dtype).element_size()
        blobs: list[tuple[str, str, list[int], bytes | None]] = [
            ("rows", "I64", [n], np.asarray(rows, np.int64).tobytes())
        ]
        if ids is not None:
            encoded = [i.encode("utf-8") for i in ids]
            offsets = np.cumsum([0, *map(len, encoded)], dtype=np.int64)  # (n + 1,)
            blobs.append(("ids_offsets", "I64", [n + 1], offsets.tobytes()))
        blobs.append(("vectors", _ST_NAMES[dtype], [n, dimension], None))  # written batch by batch
        if ids is not None:
            blob = b"".join(encoded)  # the ids' UTF-8, back to back
            blobs.append(("ids_utf8", "U8", [len(blob)], blob))
        header: dict[str, Any] = {"__metadata__": {"nosink_corpus": str(FORMAT), "shard": str(k)}}
        start = 0
        for name, kind, shape, data in blobs:
            size = len(data) if data is not None else n * self.row_bytes
            header[name] = {"dtype": kind, "shape": shape, "data_offsets": [start, start + size]}
            start += size
        raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
        raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned, as safetensors writes it
        self.data_start = 8 + len(raw)
        self.vectors_start = self.data_start + header["vectors"]["data_offsets"][0]
        self.fh = self.tmp.open("wb")
        try:
            self.fh.write(len(raw).to_bytes(8, "little") + raw)
            for name, _, _, data in blobs:
                if data is not None:
                    self.fh.seek(self.data_start + header[name]["data_offsets"][0])
                    self.fh.write(data)
            self.fh.truncate(self.data_start + start)  # the full size, vectors still zeros
            self.fh.flush()
        except BaseException:
            self.discard()
            raise

    def put(self, positions: Sequence[int], vectors: torch.Tensor) -> None:
        """Write ``vectors`` (B, D), CPU, the shard's dtype, as the shard's rows ``positions``."""
        data = vectors.contiguous().view(torch.int8).numpy() if vectors.numel() else None  # (B, D * bytes)
        if data is None:
            return
        fd = self.fh.fileno()
        for position, row in zip(positions, data, strict=True):
            os.pwrite(fd, row.data, self.vectors_start + position * self.row_bytes)

    def seal(self) -> str:
        """Flush the file to disk and give it its name; its sha256."""
        try:
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
            digest = _sha256(self.tmp)
            os.replace(self.tmp, self.target)
            return digest
        finally:
            self.discard()

    def discard(self) -> None:
        """Close and remove the temporary file (a sealed shard is already renamed)."""
        self.fh.close()
        self.tmp.unlink(missing_ok=True)


def _open_shard(out: Path, k: int, n: int, dimension: int, dtype: torch.dtype, rows: list[int],
                ids: list[str] | None) -> _ShardFile:  # fmt: skip
    """Start shard ``k``'s file (see :class:`_ShardFile`)."""
    return _ShardFile(out, k, n, dimension, dtype, rows, ids)


def _seal_shard(shard: _ShardFile) -> str:
    """Finish shard ``shard.k``'s file (on the writer thread); its sha256."""
    return shard.seal()


def _done_shard(out: Path, k: int, config_sha: str, shard_rows: int, n_rows: int) -> dict[str, Any] | None:
    """Shard ``k``'s record if the shard is complete and its file matches its sha256; else ``None``.

    A record that is unreadable or whose fields are not what this run would write (a damaged or edited
    file) does not count: the shard is encoded again.
    """
    record_file = out / f"shard-{k:05d}.json"
    try:
        record = _load_json(record_file)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("config_sha256") != config_sha:
        return None
    first, end = k * shard_rows, min((k + 1) * shard_rows, n_rows)
    skipped = record.get("skipped")
    well_formed = (
        type(record.get("shard")) is int and record["shard"] == k
        and record.get("file") == _shard_name(k)
        and type(record.get("first_row")) is int and record["first_row"] == first
        and type(record.get("end_row")) is int and record["end_row"] == end
        and all(_is_count(record.get(key)) for key in ("rows", "tokens", "truncated"))
        and isinstance(record.get("sha256"), str)
        and isinstance(skipped, list)
        and record["rows"] + len(skipped) == end - first
        and all(isinstance(r, dict) and _is_count(r.get("row")) and isinstance(r.get("reason"), str)
                and (r.get("line") is None or _is_count(r.get("line"))) for r in skipped)
    )  # fmt: skip
    if not well_formed:
        logger.warning("the record of shard %d in %s is damaged: encoding the shard again", k, out)
        return None
    shard = out / _shard_name(k)
    if not shard.is_file() or _sha256(shard) != record.get("sha256"):
        logger.warning("shard %d in %s does not match its checksum: encoding it again", k, out)
        return None
    return record


def _clean_tmp(out: Path, k: int) -> None:
    for stale in out.glob(f".shard-{k:05d}.*.tmp"):  # left by a run killed mid-write
        stale.unlink(missing_ok=True)


# --------------------------------------------------------------------------- encoding


def _config(
    encoder: Any,
    *,
    text_field: str,
    id_field: str | None,
    instruction: str | None,
    pooling: str,
    normalize: bool,
    dtype: str,
    max_length: int,
    shard_rows: int,
    source: dict[str, Any],
    exit_layer: int | None = None,
) -> dict[str, Any]:
    """Everything the vectors depend on: a rerun into the same folder must give the same dict."""
    name = encoder.name_or_path
    if name and os.path.isdir(os.path.expanduser(name)):
        name = str(Path(os.path.expanduser(name)).resolve())
    try:
        version = metadata.version("nosink")
    except metadata.PackageNotFoundError:  # a source tree on sys.path
        version = "unknown"
    weights = next(encoder.parameters()).dtype
    return {
        "format": FORMAT,
        "model": name,
        "revision": encoder.revision,
        "spec": str(encoder.spec),
        "exit_layer": exit_layer,  # None: all layers
        "sink_token": encoder.sink_token,
        "weights_dtype": str(weights).removeprefix("torch."),
        "instruction": instruction or "",
        "pooling": pooling,
        "normalize": bool(normalize),
        "dtype": dtype,
        "dimension": int(encoder.config.hidden_size),
        "max_length": max_length,
        "shard_rows": shard_rows,
        "text_field": text_field,
        "id_field": id_field,
        "input": source,
        "nosink_version": version,
    }


def _config_sha(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    keys = sorted(set(old) | set(new), key=lambda k: list(new).index(k) if k in new else len(new))
    return [f"{key} {printable(repr(old.get(key)))} there, {printable(repr(new.get(key)))} now" for key in keys
            if old.get(key) != new.get(key)]  # fmt: skip


def _prepare_folder(out: Path, config: dict[str, Any]) -> None:
    """On rank 0: refuse a folder made with other arguments; else write ``run.json`` (new) or drop the manifest (rerun).

    The manifest exists only while the folder holds a finished run: a rerun removes it first. A folder
    whose run stopped before writing any shard (a bad row or a repeated id in the input, say) takes new
    arguments, so that a fixed input can be encoded into it.

    Raises:
        ValueError: for a folder of another run, or a non-empty folder that is not a corpus folder.
    """
    run_file = out / RUN_FILE
    if run_file.is_file():
        try:
            old = _load_json(run_file)
        except (OSError, ValueError) as err:
            problem = printable(str(err))
            raise ValueError(f"{printable(str(run_file))} is unreadable ({problem}); use a new folder") from None
        diff = _differences(old, config) if isinstance(old, dict) else ["run.json is not a JSON object"]
        if diff and not any(out.glob("shard-*")):  # stopped before its first shard (a bad row, a repeated id)
            logger.info("%s holds no shard yet: starting it again with the new arguments (%s)", out, "; ".join(diff))
            _write_json(run_file, config)
            return
        if diff:
            raise ValueError(
                f"{printable(str(out))} holds a corpus encoded with other arguments ({'; '.join(diff)}): "
                "rerun with the same arguments to resume, or choose another output folder"
            )
        (out / MANIFEST).unlink(missing_ok=True)
        return
    _refuse_foreign(out)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(run_file, config)


def _refuse_foreign(out: Path) -> None:
    """Refuse a path that is a file, or a folder that holds files but no ``run.json`` (the lock and input aside)."""
    ours = [LOCK_FILE, SPOOL.format("*")]
    if out.exists() and (
        not out.is_dir()
        or (not (out / RUN_FILE).exists() and any(not any(p.match(o) for o in ours) for p in out.iterdir()))
    ):
        raise ValueError(
            f"{printable(str(out))} exists and is not a corpus folder (no {RUN_FILE}); "
            "choose a new or empty output folder"
        )


def _lock_folder(out: Path) -> int | None:
    """Rank 0's claim on ``out`` for one run: an open descriptor of ``out/.lock`` holding an exclusive flock.

    Release it by closing the descriptor; the kernel also releases it when the process ends, however it
    ends, so a killed run never leaves the folder locked. ``None`` where flock is unavailable (no
    ``fcntl``, or a file system without locks: then two runs into one folder are not kept apart).

    Raises:
        ValueError: if another run holds the lock (it is writing the folder now).
    """
    try:
        _refuse_foreign(out)  # before creating anything in a folder that is not ours
    except ValueError:
        if not (out / LOCK_FILE).is_file():  # else a run starting there now (its run.json still a temp file)
            raise
    out.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX
        return None
    try:  # never through a link: it would take the lock elsewhere, or create a file where the link points
        fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as err:  # ELOOP for a link, EISDIR for a folder
        raise ValueError(
            f"{printable(str(out / LOCK_FILE))} is not a lock file nosink made ({err.strerror}): remove it, "
            "or choose another output folder"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(
            f"{printable(str(out / LOCK_FILE))} is not a regular file: remove it, or choose another folder"
        )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(
            f"another run is writing {printable(str(out))} now (it holds {LOCK_FILE} there): wait for it to end, "
            "or choose another output folder; one run at a time per folder"
        ) from None
    except OSError as err:  # no locks on this file system
        os.close(fd)
        logger.warning("cannot lock %s (%s): nothing keeps a second run out of it", out / LOCK_FILE, err)
        return None
    return fd


@dataclass
class _Shard:
    """One shard's rows as read and tokenized (on the reader thread), ready for the model."""

    k: int
    rows: list[_Row]  # every row of the shard, in input order
    good: list[_Row]  # the rows without a problem so far
    tokens: Any  # _texts.Tokenized of good


def _read_shards(job: _Job, todo: Sequence[int]) -> Iterator[_Shard]:
    """The shards ``todo`` read from the input and tokenized (the CPU work, done ahead on a thread)."""
    for k, rows in _shards_of(job.source, job.fmt, job.shard_rows, todo, job.text_field, job.id_field):
        good = [r for r in rows if r.problem is None]
        tokens = _texts.tokenize(
            job.encoder.tokenizer, [r.text or "" for r in good], job.instruction, sink=job.encoder.sink_ids(),
            max_length=job.max_length,
        )  # fmt: skip
        yield _Shard(k, rows, good, tokens)


def _encode_rows(job: _Job, shard: _Shard, progress: _Progress) -> tuple[_ShardFile, list[_Row], int, int]:
    """Encode a shard's good rows (sorted by length) into its file: ``(the file, bad rows, tokens, truncated)``.

    The file is open (not sealed) when this returns; the vectors are in it, in row order.

    Raises:
        BadRowError: for the first text without tokens, unless bad rows are skipped.
    """
    rows, tokens = shard.good, shard.tokens
    empty = set(tokens.empty)
    for i in sorted(empty):
        rows[i].problem = "the text has no tokens"
    if empty and job.on_bad_row == "error":
        first = rows[min(empty)]
        raise BadRowError(job.label, first.row, first.line, first.problem or "")
    keep = [i for i in range(len(rows)) if i not in empty]
    ids = [rows[i].id or "" for i in keep] if job.id_field is not None else None
    encoder = job.encoder
    file = _open_shard(job.out, shard.k, len(keep), int(encoder.config.hidden_size), job.dtype,
                       [rows[i].row for i in keep], ids)  # fmt: skip
    try:
        lengths = tokens.lengths
        for group in _batching.batches([lengths[i] for i in keep], job.batch_size):
            progress.check()
            idx = [keep[j] for j in group]
            pooled = encoder.encode_tokens(tokens, idx, specs=[job.plan], pooling=job.pooling)[job.plan.name]  # (B, D)
            if job.normalize:
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
            file.put(group, pooled.to(job.dtype))  # group: the rows' places among the kept rows
            progress.add(len(idx))
    except BaseException:
        file.discard()
        raise
    n_tokens = sum(lengths[i] for i in keep)
    return file, [rows[i] for i in sorted(empty)], n_tokens, len(set(tokens.truncated) - empty)


def encode_corpus(
    encoder: Any,
    input_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    text_field: str = "text",
    id_field: str | None = None,
    instruction: str | None = None,
    pooling: str = "mean",
    normalize: bool = False,
    dtype: Literal["float32", "float16", "bfloat16"] = "float32",
    batch_size: int = 32,
    max_length: int = 512,
    exit_layer: int | None = None,
    shard_rows: int = 10_000,
    on_bad_row: Literal["error", "skip"] = "error",
    input_format: Literal["txt", "jsonl", "parquet"] | None = None,
    show_progress: bool = True,
    progress_interval: float = 1.0,
    timeout: timedelta = timedelta(hours=12),
) -> CorpusSummary:
    """Encode every row of a corpus file into a folder of safetensors shards and a ``manifest.json``.

    Run it once per process: alone, or in every process of a ``torchrun`` launch (each loads its
    encoder on :func:`local_device`). Every rank writes the shards ``k`` with ``k % world_size == rank``;
    rank 0 writes the manifest when all are done. Rerunning the same call resumes; see the module docs.

    Input formats, by suffix: ``.txt`` (one text a line; lines are split on ``\\n`` only, a trailing
    ``\\r`` and a UTF-8 BOM are dropped), ``.jsonl``/``.ndjson`` (one JSON object a line, the text in
    ``text_field``, an optional id in ``id_field``) and ``.parquet`` (columns ``text_field`` and
    ``id_field``; needs pyarrow). Row ``i`` is the ``i``-th line or record, counted from 0.

    Standard input (``input_path="-"``) or a pipe (``/dev/stdin``, a FIFO) can be read once only, so rank 0
    first copies it into the output folder (as ``.input-*.tmp``, removed when the run ends) and every pass
    and rank reads the copy; its format must be given (``input_format``). A rerun that pipes the same
    bytes resumes (the input is known by its sha256, not its name); other bytes are refused as a changed
    input.

    Bad rows (an empty text, a text without tokens, invalid UTF-8 or JSON (too deeply nested included), a
    missing or non-string field, a text or id with a lone surrogate, an id that is neither a string nor an
    integer) raise :class:`BadRowError` with their line
    number, or with ``on_bad_row="skip"`` are left out, logged and listed in the manifest.

    Args:
        encoder: an :class:`~nosink.EncoderFromDecoder` with a tokenizer, on this process's device.
        input_path: the corpus file, or ``"-"`` for standard input.
        out_dir: the corpus folder: new, empty, or one this call wrote before with the same arguments.
        text_field: the text's field or column (jsonl, parquet).
        id_field: a field or column of row ids to keep beside the vectors (strings or integers, unique).
        instruction: a prompt put before every text (not pooled), as in ``encode()``.
        pooling: ``mean``, ``weighted_mean``, ``last`` or ``first``.
        normalize: L2-normalise the vectors.
        dtype: the stored vectors' dtype.
        batch_size: texts per forward pass.
        max_length: tokens per input, sink token and instruction included; longer texts are cut (logged).
        exit_layer: an early exit: run the decoder's first ``exit_layer`` layers only and read the vectors
            there (see :class:`~nosink.EncoderFromDecoder`); ``None``: the encoder's own (all layers unless
            it was built with one). The manifest records it, and a rerun with another is refused.
        shard_rows: input rows per shard (also the window within which texts are sorted by length).
        on_bad_row: ``"error"`` (default) or ``"skip"``.
        input_format: ``"txt"``, ``"jsonl"`` or ``"parquet"``; ``None`` (default): from the input's suffix.
            Needed for standard input (``input_path="-"``) and pipes such as ``/dev/stdin``.
        show_progress: a tqdm bar on rank 0, counting rows of all ranks.
        progress_interval: seconds between the ranks' progress exchanges.
        timeout: how long a rank waits for the others in a collective (the start and the end).

    Returns:
        The run's :class:`CorpusSummary` (also logged, and stored in the manifest).

    Raises:
        ValueError: for bad arguments (an ``exit_layer`` outside 1 to the depth, say), an input of unknown
            suffix or without the parquet columns, a folder that holds another run (other arguments) or
            other files, or that another run is writing now (rank 0 holds a lock on the folder while it
            runs); :class:`BadRowError` for a bad row when ``on_bad_row="error"``;
            :class:`DuplicateIdError` (before any encoding) if two rows have the same id.
        RuntimeError: on the other ranks when one rank fails (``rank R failed: <its error>``); that rank
            raises its own error. Every rank stops at its next batch.
        FileNotFoundError: if the input does not exist.
        ImportError: for parquet input without pyarrow.
        SpecError: if the encoder's spec does not fit its first ``exit_layer`` layers.
    """
    name = os.fspath(input_path)
    source_path = Path(os.path.expanduser(name))
    out = Path(os.path.expanduser(os.fspath(out_dir)))
    stream = _stream_kind(name, source_path)
    label = "standard input" if stream == "stdin" else str(source_path)
    fmt = _input_format(source_path, input_format, label)
    if fmt == "txt" and id_field is not None:
        raise ValueError("id_field needs a .jsonl or .parquet input: a .txt file has no fields (rows are numbered)")
    if not stream and not source_path.is_file():
        raise FileNotFoundError(f"no input file at {printable(str(source_path))}")
    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling {printable(repr(pooling))}; expected one of {', '.join(POOLINGS)}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {printable(repr(dtype))}")
    if on_bad_row not in ("error", "skip"):
        raise ValueError(f"on_bad_row must be 'error' or 'skip', got {printable(repr(on_bad_row))}")
    for value, name in ((batch_size, "batch_size"), (max_length, "max_length"), (shard_rows, "shard_rows")):
        positive_int(value, name)
    if (
        isinstance(progress_interval, bool)
        or not isinstance(progress_interval, (int, float))
        or not (0 < progress_interval < float("inf"))
    ):
        raise ValueError(f"progress_interval must be a positive number of seconds, got {progress_interval!r}")
    if encoder.tokenizer is None:
        raise ValueError("encode_corpus() needs an encoder with a tokenizer")
    plan = encoder.plan_for(encoder.spec, exit_layer=exit_layer)  # checks exit_layer against the depth
    device = next(encoder.parameters()).device
    world = _join(device, timeout)
    started = time.perf_counter()  # every process has joined (each loaded its model before)
    lock: int | None = None  # rank 0's hold on the folder
    spool: Path | None = None  # rank 0's copy of standard input
    try:
        job = _Job(
            encoder, source_path, fmt, out, text_field, id_field, instruction, pooling, normalize, DTYPES[dtype],
            batch_size, max_length, shard_rows, on_bad_row, plan, label, stream,
        )  # fmt: skip
        config, lock, copy = _agree(world, job, dtype)
        if copy is not None:  # every rank reads rank 0's copy of the stream
            job = replace(job, source=Path(copy))
            spool = job.source if world.rank == 0 else None
        out.mkdir(parents=True, exist_ok=True)  # other hosts, when the folder is not shared
        progress = _Progress(world, config["input"]["rows"], show_progress, progress_interval)
        try:
            outcome: Any = _run_shards(job, world, config, progress)
            failure: Exception | None = None
        except Exception as err:  # every rank learns of it before any rank leaves (no stranded collectives)
            outcome, failure = _Failure(world.rank, err), err
            progress.fail()
        progress.finish()
        gathered = world.gather(outcome)  # what each rank did, or its failure
        _raise_failure(gathered, failure)
        summary = _finish(out, config, gathered, world, started)
        world.close()
        return summary
    except BaseException:
        if world.owned and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        raise
    finally:
        if spool is not None:
            spool.unlink(missing_ok=True)
        if lock is not None:
            os.close(lock)  # releases the folder


class _Stopped(Exception):
    """This rank stopped because another rank failed (that rank's error is the one reported)."""


@dataclass(frozen=True)
class _Failure:
    """A rank's failure, as gathered from every rank at the end of a run (the error itself stays home)."""

    rank: int
    message: str
    stopped: bool  # stopped for another rank's failure, not its own

    def __init__(self, rank: int, error: BaseException) -> None:
        text = " ".join(str(error).split()) or type(error).__name__
        if not isinstance(error, (ValueError, OSError, RuntimeError)):
            text = f"{type(error).__name__}: {text}"
        object.__setattr__(self, "rank", rank)
        object.__setattr__(self, "message", text)
        object.__setattr__(self, "stopped", isinstance(error, _Stopped))


def _raise_failure(gathered: list[Any], failure: Exception | None) -> None:
    """If any rank failed: this rank's own error if it had one, else which rank failed and why (a RuntimeError)."""
    failures = [g for g in gathered if isinstance(g, _Failure)]
    if not failures:
        return
    if failure is not None and not isinstance(failure, _Stopped):
        raise failure
    first = next((f for f in failures if not f.stopped), failures[0])
    raise RuntimeError(f"rank {first.rank} failed: {first.message}") from None


def _run_shards(job: _Job, world: _World, config: dict[str, Any], progress: _Progress) -> tuple[Any, ...]:
    """This rank's part of the run: reuse its done shards, check ids, encode the rest; what it reports."""
    config_sha, n_rows = _config_sha(config), config["input"]["rows"]
    n_shards = (n_rows + job.shard_rows - 1) // job.shard_rows
    reused, todo = [], []
    for k in range(world.rank, n_shards, world.size):  # shard k on rank k % size
        record = _done_shard(job.out, k, config_sha, job.shard_rows, n_rows)
        if record is None:
            todo.append(k)
        else:
            reused.append(record)
            progress.add(record["end_row"] - record["first_row"])
    loop_start = time.perf_counter()
    if job.id_field is not None:
        _check_unique_ids(job, world, n_shards)
    written = _encode_shards(job, todo, n_rows, config_sha, progress)
    summary = RankSummary(
        rank=world.rank,
        texts=sum(r["rows"] for r in written),
        tokens=sum(r["tokens"] for r in written),
        skipped=sum(len(r["skipped"]) for r in written),
        reused=sum(r["rows"] for r in reused),
        shards_written=len(written),
        shards_reused=len(reused),
        seconds=time.perf_counter() - loop_start,
    )
    return summary, written + reused, sum(r["truncated"] for r in written)


@dataclass(frozen=True)
class _Job:
    """The fixed arguments of one run, as every shard needs them."""

    encoder: Any
    source: Path
    fmt: str
    out: Path
    text_field: str
    id_field: str | None
    instruction: str | None
    pooling: str
    normalize: bool
    dtype: torch.dtype
    batch_size: int
    max_length: int
    shard_rows: int
    on_bad_row: str
    plan: Any  # the encoder's plan at this run's exit layer
    label: str  # the input as messages name it (the path, or "standard input")
    stream: str | None  # "stdin" or "pipe": rank 0 copies it into the folder first (source is then the copy)


def _agree(world: _World, job: _Job, dtype: str) -> tuple[dict[str, Any], int | None, str | None]:
    """The run's config: rank 0 locks the folder, reads the input once (rows, sha256), checks the folder and
    tells every rank. Also the lock's descriptor on rank 0 (held until the run ends), else ``None``, and the
    path of rank 0's copy of a streamed input (``None`` for a file).

    All ranks fail with rank 0's message, or none does.
    """
    verdict: tuple[dict[str, Any] | None, str | None, str | None] = (None, None, None)
    failure: BaseException | None = None
    lock: int | None = None
    copy: Path | None = None
    if world.rank == 0:
        try:
            lock = _lock_folder(job.out)  # before anything reads or changes the folder
            copy = _spool(job.stream == "stdin", job.source, job.out) if job.stream else None
            source = _fingerprint(copy or job.source, job.fmt, job.text_field, job.id_field)
            config = _config(
                job.encoder, text_field=job.text_field, id_field=job.id_field, instruction=job.instruction,
                pooling=job.pooling, normalize=job.normalize, dtype=dtype, max_length=job.max_length,
                shard_rows=job.shard_rows, source=source, exit_layer=job.plan.exit_layer,
            )  # fmt: skip
            _prepare_folder(job.out, config)
            verdict = (config, None, None if copy is None else str(copy))
        except (ValueError, OSError, ImportError) as err:
            failure, verdict = err, (None, str(err), None)
    try:
        config, problem, copied = world.broadcast(verdict)
        if failure is not None:
            raise failure
        if problem is not None or config is None:
            raise ValueError(f"rank 0 stopped the run: {problem}")
    except BaseException:
        if copy is not None:
            copy.unlink(missing_ok=True)
        if lock is not None:
            os.close(lock)
        raise
    return config, lock, copied


def _encode_shard(job: _Job, shard: _Shard, progress: _Progress) -> tuple[_ShardFile, list[_Row], list[_Row], int, int]:
    """Encode shard ``k`` into its (unsealed) file: ``(file, good rows, bad rows, tokens, truncated)``.

    Raises:
        BadRowError: for the first bad row, unless bad rows are skipped.
    """
    bad = [r for r in shard.rows if r.problem is not None]
    if bad and job.on_bad_row == "error":
        raise BadRowError(job.label, bad[0].row, bad[0].line, bad[0].problem or "")
    progress.add(len(bad))
    _clean_tmp(job.out, shard.k)  # left by a run killed while writing this shard
    file, no_tokens, n_tokens, cut = _encode_rows(job, shard, progress)
    progress.add(len(no_tokens))
    good = [r for r in shard.good if r.problem is None]
    return file, good, sorted(bad + no_tokens, key=lambda r: r.row), n_tokens, cut


def _store_shard(
    job: _Job, file: _ShardFile, good: list[_Row], bad: list[_Row], n_tokens: int, cut: int, n_rows: int,
    config_sha: str,
) -> dict[str, Any]:  # fmt: skip
    """Seal shard ``k``'s file and then write its record (on the writer thread); the record."""
    k = file.k
    sha = _seal_shard(file)
    record = {
        "shard": k,
        "file": _shard_name(k),
        "first_row": k * job.shard_rows,
        "end_row": min((k + 1) * job.shard_rows, n_rows),
        "rows": len(good),
        "sha256": sha,
        "tokens": n_tokens,
        "truncated": cut,
        "skipped": [{"row": r.row, "line": r.line, "reason": r.problem} for r in bad],
        "config_sha256": config_sha,
    }
    _write_json(job.out / f"shard-{k:05d}.json", record)
    if bad:
        lines = ", ".join(str(r.line if r.line is not None else r.row) for r in bad[:5])
        more = ", ..." if len(bad) > 5 else ""
        logger.warning("shard %d: skipped %d bad rows (%s%s)", k, len(bad), lines, more)
    return record


def _encode_shards(
    job: _Job, todo: Sequence[int], n_rows: int, config_sha: str, progress: _Progress
) -> list[dict[str, Any]]:
    """Encode and write the shards ``todo``; their records.

    Three things overlap: the reader thread reads and tokenizes shard ``k + 1``, this thread runs shard
    ``k`` through the model (writing each batch's vectors into the shard's file), and the writer thread
    seals shard ``k - 1`` (flush to disk, sha256, rename, record). An error anywhere stops the run after
    the seal in progress is finished.
    """
    records: list[dict[str, Any]] = []
    pending: Future[dict[str, Any]] | None = None
    reader = _Prefetch(_read_shards(job, todo), "nosink-corpus-reader")
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="nosink-corpus-writer") as writer:
            for shard in reader:
                progress.check()
                encoded = _encode_shard(job, shard, progress)
                del shard  # its texts and tokens
                try:
                    if pending is not None:
                        records.append(pending.result())
                except BaseException:
                    encoded[0].discard()
                    raise
                pending = writer.submit(_store_shard, job, *encoded, n_rows, config_sha)
                del encoded
            if pending is not None:
                records.append(pending.result())
    finally:
        reader.close()
    return records


def _finish(out: Path, config: dict[str, Any], gathered: list[Any], world: _World, started: float) -> CorpusSummary:
    """Put the ranks' reports together; on rank 0 also write the manifest and remove stray temporary files."""
    ranks = [g[0] for g in gathered]
    records = sorted((r for g in gathered for r in g[1]), key=lambda r: r["shard"])
    truncated = sum(g[2] for g in gathered)
    n_rows = config["input"]["rows"]
    skipped = [s for r in records for s in r["skipped"]]
    summary = CorpusSummary(
        folder=out,
        rows=n_rows,
        encoded=sum(r["rows"] for r in records),
        skipped=len(skipped),
        texts=sum(r.texts for r in ranks),
        tokens=sum(r.tokens for r in ranks),
        seconds=time.perf_counter() - started,
        ranks=ranks,
    )
    if world.rank == 0:
        for stale in out.glob(".shard-*.tmp"):
            stale.unlink(missing_ok=True)
        manifest = {
            **config,
            "rows": n_rows,
            "encoded": summary.encoded,
            "skipped": summary.skipped,
            "skipped_rows": skipped,
            "truncated": sum(r.get("truncated", 0) for r in records),
            "shards": [{k: r[k] for k in SHARD_KEYS} for r in records],
            "world_size": world.size,
            "summary": summary.as_dict(),
        }
        _write_json(out / MANIFEST, manifest)
        per_rank = "; ".join(f"rank {r.rank}: {r.texts} texts, {r.tokens} tokens, {r.seconds:.1f} s" for r in ranks)
        logger.info(
            "encoded %d texts (%d tokens) in %.1f s, %.1f texts/s, into %s (%d reused, %d skipped); %s",
            summary.texts, summary.tokens, summary.seconds, summary.texts_per_second, out,
            sum(r.reused for r in ranks), summary.skipped, per_rank,
        )  # fmt: skip
        if truncated:
            logger.warning("%d texts were cut to max_length=%d tokens in this run", truncated, config["max_length"])
    return summary


# --------------------------------------------------------------------------- reading the result


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


_MAX_INT = 2**63 - 1  # what the shards' int64 rows hold


def _is_count(value: Any) -> bool:
    """A non-negative integer that fits int64 (``True`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_INT


def _is_plain_name(name: Any) -> bool:
    """A file name without a folder: no separator, not ``.`` or ``..``, not absolute, printable."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and not any(c in name for c in "/\\\0")
        and not os.path.isabs(name)
        and printable(name) == name
    )


def _load_json(path: Path) -> Any:
    """A JSON file's value.

    Raises:
        OSError: if it cannot be read; ValueError if it is not UTF-8 JSON or is nested too deeply.
    """
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("its JSON is nested too deeply") from None


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
        if not _is_count(manifest[name]):
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
            if not _is_count(entry[key]):
                raise bad(f"shards[{i}].{key}", "a non-negative integer", entry[key])
        if not _is_plain_name(entry["file"]):
            raise bad(f"shards[{i}].file", "a plain file name in the folder (no folder, '..' or absolute path)",
                      entry["file"])  # fmt: skip
        sha = entry["sha256"]
        if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
            raise bad(f"shards[{i}].sha256", "64 hex digits", sha)
        if entry["rows"] > entry["end_row"] - entry["first_row"]:
            raise bad(f"shards[{i}].rows", "at most end_row - first_row", entry["rows"])


def _memmap_tensors(path: Path) -> dict[str, tuple[np.ndarray, str]]:
    """Every tensor of a safetensors file, memory-mapped (nothing is read yet), with its safetensors dtype.

    Raises:
        ValueError: saying what is wrong with the header (its size, its JSON, a tensor's entry).
    """
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ValueError(f"the file has {size} bytes, fewer than the 8 of a header size")
        n = int.from_bytes(head, "little")
        if n > size - 8:
            raise ValueError(f"its header size says {n} bytes, but the file has {size - 8} after it")
        raw = fh.read(n)
    try:
        header = json.loads(raw)
    except RecursionError:
        raise ValueError("its header is nested too deeply") from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"its header is not JSON ({type(err).__name__}: {err})") from None
    if not isinstance(header, dict):
        raise ValueError("its header is not a JSON object")
    out = {}
    data = size - 8 - n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict) or info.get("dtype") not in _ST_DTYPES:
            raise ValueError(f"tensor {printable(repr(name))} has no known dtype")
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if not (isinstance(shape, list) and all(_is_count(d) for d in shape)):
            raise ValueError(f"tensor {printable(repr(name))} has a bad shape {printable(repr(shape))[:80]}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)):
            raise ValueError(f"tensor {printable(repr(name))} has bad data_offsets {printable(repr(offsets))[:80]}")
        numpy_dtype = _ST_DTYPES[info["dtype"]]
        start, end = offsets
        if not start <= end <= data or end - start != int(np.prod(shape)) * np.dtype(numpy_dtype).itemsize:
            raise ValueError(f"tensor {printable(repr(name))}'s data_offsets do not fit its shape or the file")
        if end == start:
            out[name] = np.empty(tuple(shape), dtype=numpy_dtype), info["dtype"]
        else:
            out[name] = np.memmap(path, numpy_dtype, mode="r", offset=8 + n + start, shape=tuple(shape)), info["dtype"]
    return out


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
    try:
        manifest = _load_json(manifest_file)
    except ValueError as err:
        raise OSError(f"{where} is unreadable ({printable(str(err))})") from None
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
        if verify and _sha256(path) != entry["sha256"]:
            raise OSError(f"shard {printable(entry['file'])} is corrupt: its sha256 differs from the manifest{redo}")
        try:
            tensors = _memmap_tensors(path)
            for name in ("vectors", "rows", *(("ids_utf8", "ids_offsets") if id_parts is not None else ())):
                if name not in tensors:
                    raise ValueError(f"it has no {name!r} tensor")
            (matrix, kind), (shard_rows, _) = tensors["vectors"], tensors["rows"]
            if id_parts is not None:
                blob, offsets = tensors["ids_utf8"][0], tensors["ids_offsets"][0]
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
    stored = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}[manifest["dtype"]]
    if kinds - {stored}:
        raise OSError(f"shards hold {', '.join(sorted(kinds))} vectors but the manifest says {manifest['dtype']}")
    all_rows = (
        np.concatenate([np.asarray(r, dtype=np.int64) for r in row_parts]) if row_parts else np.empty(0, np.int64)
    )
    vectors = ShardedMatrix(parts, dimension, manifest["dtype"])
    return CorpusEmbeddings(vectors, all_rows, CorpusIds(id_parts) if id_parts is not None else None, manifest)
