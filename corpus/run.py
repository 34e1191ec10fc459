"""Encode a corpus file into a folder of safetensors shards, on one process or many (``torchrun``).

The layout of a corpus folder::

    run.json                  the arguments, written first; a rerun must match it
    shard-00000.safetensors   vectors (N, D), rows (N,) int64, ids (UTF-8 bytes + offsets) if any
    shard-00000.json          written after its shard: row range, row count, sha256, skipped rows
    ...
    manifest.json             written last, by rank 0: the arguments, every shard, the summary

Shard ``k`` holds input rows ``[k * shard_rows, (k + 1) * shard_rows)`` (minus skipped bad rows), in input
order, and is written by rank ``k % world_size``, so the number of processes does not change the result.
Each rank holds the texts and tokens of two shards and one batch of vectors, whatever the corpus size: a
reader thread reads and tokenizes the next shard while the model runs, and a writer thread seals the one
before. With an ``id_field``, ids are checked unique before any shard is encoded.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import torch

from nosink.checks import positive_int, printable
from nosink.models import batching, texts
from nosink.models.encoding import pooled_batches
from nosink.models.pooling import POOLINGS

from .folder import clean_tmp, config_sha256, done_shard, lock_folder, prepare_folder, run_config
from .inputs import BadRowError, Input, Row, check_unique_ids, fingerprint, open_input, spool
from .shards import DTYPES, ShardFile, shard_name, write_json
from .summary import CorpusSummary, RankSummary, summarize
from .world import Failure, Progress, World, join, raise_failure

logger = logging.getLogger(__name__)


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


@dataclass
class _Shard:
    """One shard's rows as read and tokenized (on the reader thread), ready for the model."""

    k: int
    rows: list[Row]  # every row of the shard, in input order
    good: list[Row]  # the rows without a problem so far
    tokens: Any  # texts.Tokenized of good


def _read_shards(job: _Job, todo: Sequence[int]) -> Iterator[_Shard]:
    """The shards ``todo`` read from the input and tokenized (the CPU work, done ahead on a thread)."""
    for k, rows in job.source.shards(job.shard_rows, todo):
        good = [r for r in rows if r.problem is None]
        tokens = texts.tokenize(
            job.encoder.tokenizer, [r.text or "" for r in good], job.instruction, sink=job.encoder.sink_ids(),
            max_length=job.max_length,
        )  # fmt: skip
        yield _Shard(k, rows, good, tokens)


def _encode_batches(job: _Job, tokens: Any, keep: list[int]) -> Iterator[tuple[list[int], torch.Tensor]]:
    """The vectors of the rows ``keep`` of ``tokens``, a batch at a time in length order: ``(places in keep, (B, D))``.

    Through the encoder's one batch step (:func:`~nosink.models.encoding.pooled_batches`); normalised if asked,
    in the shard's dtype, on the CPU.
    """
    groups = batching.batches([tokens.lengths[i] for i in keep], job.batch_size)
    work = ((tokens, [keep[j] for j in group], group) for group in groups)
    for done in pooled_batches(job.encoder, work, [job.plan], pooling=job.pooling):
        vectors = done.vectors[0]  # (B, D)
        if job.normalize:
            vectors = torch.nn.functional.normalize(vectors, dim=-1)
        yield done.key, vectors.to(dtype=job.dtype)


def _encode_rows(job: _Job, shard: _Shard, progress: Progress) -> tuple[ShardFile, list[Row], int, int]:
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
        raise BadRowError(job.source.label, first.row, first.line, first.problem or "")
    keep = [i for i in range(len(rows)) if i not in empty]
    ids = [rows[i].id or "" for i in keep] if job.source.id_field is not None else None
    dimension = int(job.encoder.config.hidden_size)
    file = ShardFile(job.out, shard.k, len(keep), dimension, job.dtype, [rows[i].row for i in keep], ids)
    try:
        for group, vectors in _encode_batches(job, tokens, keep):
            file.put(group, vectors)
            progress.add(len(group))
            progress.check()
    except BaseException:
        file.discard()
        raise
    n_tokens = sum(tokens.lengths[i] for i in keep)
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
    rank 0 writes the manifest when all are done. Rerunning the same call resumes (see :mod:`nosink.corpus.folder`).

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
    source = open_input(os.fspath(input_path), input_format, text_field, id_field)
    out = Path(os.path.expanduser(os.fspath(out_dir)))
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
    if getattr(encoder, "template", None) is not None:
        raise ValueError(
            f"this encoder puts each text in the template {encoder.template}, which encode_corpus() does not apply "
            "(its vectors would not be the encoder's): load it with template='none' to encode the texts as they "
            "are, or embed with encoder.encode()"
        )
    plan = encoder.plan_for(encoder.spec, exit_layer=exit_layer)  # checks exit_layer against the depth
    job = _Job(encoder, source, out, instruction, pooling, normalize, DTYPES[dtype], batch_size, max_length,
               shard_rows, on_bad_row, plan)  # fmt: skip
    world = join(next(encoder.parameters()).device, timeout)
    started = time.perf_counter()  # every process has joined (each loaded its model before)
    lock: int | None = None  # rank 0's hold on the folder
    copied: Path | None = None  # rank 0's copy of standard input
    try:
        config, lock, copy = _agree(world, job, dtype)
        if copy is not None:  # every rank reads rank 0's copy of the stream
            job = replace(job, source=replace(source, path=Path(copy)))
            copied = job.source.path if world.rank == 0 else None
        out.mkdir(parents=True, exist_ok=True)  # other hosts, when the folder is not shared
        progress = Progress(world, config["input"]["rows"], show_progress, progress_interval)
        try:
            outcome: Any = _run_shards(job, world, config, progress)
            failure: Exception | None = None
        except Exception as err:  # every rank learns of it before any rank leaves (no stranded collectives)
            outcome, failure = Failure(world.rank, err), err
            progress.fail()
        progress.finish()
        gathered = world.gather(outcome)  # what each rank did, or its failure
        raise_failure(gathered, failure)
        summary = summarize(out, config, gathered, world, started)
        world.close()
        return summary
    except BaseException:
        if world.owned and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        raise
    finally:
        if copied is not None:
            copied.unlink(missing_ok=True)
        if lock is not None:
            os.close(lock)  # releases the folder


def _run_shards(job: _Job, world: World, config: dict[str, Any], progress: Progress) -> tuple[Any, ...]:
    """This rank's part of the run: reuse its done shards, check ids, encode the rest; what it reports."""
    config_sha, n_rows = config_sha256(config), config["input"]["rows"]
    n_shards = (n_rows + job.shard_rows - 1) // job.shard_rows
    reused, todo = [], []
    for k in range(world.rank, n_shards, world.size):  # shard k on rank k % size
        record = done_shard(job.out, k, config_sha, job.shard_rows, n_rows)
        if record is None:
            todo.append(k)
        else:
            reused.append(record)
            progress.add(record["end_row"] - record["first_row"])
    loop_start = time.perf_counter()
    if job.source.id_field is not None:
        check_unique_ids(job.source, job.shard_rows, world, n_shards)
    # a long job compiles the graphs' layer loop first, where that repays (nosink.models.replaying)
    job.encoder.compile_if_repaid(sum(min(job.shard_rows, n_rows - k * job.shard_rows) for k in todo))
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
    source: Input
    out: Path
    instruction: str | None
    pooling: str
    normalize: bool
    dtype: torch.dtype
    batch_size: int
    max_length: int
    shard_rows: int
    on_bad_row: str
    plan: Any  # the encoder's plan at this run's exit layer


def _agree(world: World, job: _Job, dtype: str) -> tuple[dict[str, Any], int | None, str | None]:
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
            lock = lock_folder(job.out)  # before anything reads or changes the folder
            given = job.source
            copy = spool(given.stream == "stdin", given.path, job.out) if given.stream else None
            source = fingerprint(copy or given.path, given.fmt, given.text_field, given.id_field)
            config = run_config(
                job.encoder, text_field=given.text_field, id_field=given.id_field, instruction=job.instruction,
                pooling=job.pooling, normalize=job.normalize, dtype=dtype, max_length=job.max_length,
                shard_rows=job.shard_rows, source=source, exit_layer=job.plan.exit_layer,
            )  # fmt: skip
            prepare_folder(job.out, config)
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


def _encode_shard(job: _Job, shard: _Shard, progress: Progress) -> tuple[ShardFile, list[Row], list[Row], int, int]:
    """Encode shard ``k`` into its (unsealed) file: ``(file, good rows, bad rows, tokens, truncated)``.

    Raises:
        BadRowError: for the first bad row, unless bad rows are skipped.
    """
    bad = [r for r in shard.rows if r.problem is not None]
    if bad and job.on_bad_row == "error":
        raise BadRowError(job.source.label, bad[0].row, bad[0].line, bad[0].problem or "")
    progress.add(len(bad))
    clean_tmp(job.out, shard.k)  # left by a run killed while writing this shard
    file, no_tokens, n_tokens, cut = _encode_rows(job, shard, progress)
    progress.add(len(no_tokens))
    good = [r for r in shard.good if r.problem is None]
    return file, good, sorted(bad + no_tokens, key=lambda r: r.row), n_tokens, cut


def _store_shard(
    job: _Job, file: ShardFile, good: list[Row], bad: list[Row], n_tokens: int, cut: int, n_rows: int,
    config_sha: str,
) -> dict[str, Any]:  # fmt: skip
    """Seal shard ``k``'s file and then write its record (on the writer thread); the record."""
    k = file.k
    sha = file.seal()
    record = {
        "shard": k,
        "file": shard_name(k),
        "first_row": k * job.shard_rows,
        "end_row": min((k + 1) * job.shard_rows, n_rows),
        "rows": len(good),
        "sha256": sha,
        "tokens": n_tokens,
        "truncated": cut,
        "skipped": [{"row": r.row, "line": r.line, "reason": r.problem} for r in bad],
        "config_sha256": config_sha,
    }
    write_json(job.out / f"shard-{k:05d}.json", record)
    if bad:
        lines = ", ".join(str(r.line if r.line is not None else r.row) for r in bad[:5])
        more = ", ..." if len(bad) > 5 else ""
        logger.warning("shard %d: skipped %d bad rows (%s%s)", k, len(bad), lines, more)
    return record


def _encode_shards(
    job: _Job, todo: Sequence[int], n_rows: int, config_sha: str, progress: Progress
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
