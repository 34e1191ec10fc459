"""The corpus folder: its lock, ``run.json`` (the arguments a rerun must match) and the shards that are done.

A shard counts as done only when its ``.json`` record exists and the shard file's sha256 matches it; a rerun
with the same arguments reuses those and (re)writes the rest. One run at a time: rank 0 holds an exclusive
``flock`` on the folder's ``.lock`` until the run ends (the kernel drops it when the process dies).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from importlib import metadata
from pathlib import Path
from typing import Any

from nosink.checks import printable
from nosink.models.configs import read_json

from .inputs import SPOOL
from .shards import FORMAT, sha256, shard_name, write_json

logger = logging.getLogger(__name__)

RUN_FILE = "run.json"
MANIFEST = "manifest.json"
LOCK_FILE = ".lock"  # rank 0 holds an exclusive flock on it while a run writes the folder
SHARD_KEYS = ("file", "first_row", "end_row", "rows", "sha256", "tokens")  # what the manifest lists per shard


def run_config(
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
    } | ({} if encoder.prepend is None else {"prepend": list(encoder.prepend)})  # Token Prepending's layers


def config_sha256(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    keys = sorted(set(old) | set(new), key=lambda k: list(new).index(k) if k in new else len(new))
    return [f"{key} {printable(repr(old.get(key)))} there, {printable(repr(new.get(key)))} now" for key in keys
            if old.get(key) != new.get(key)]  # fmt: skip


def prepare_folder(out: Path, config: dict[str, Any]) -> None:
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
            old = read_json(run_file, "use a new folder")
        except OSError as err:
            raise ValueError(str(err)) from None
        diff = _differences(old, config) if isinstance(old, dict) else ["run.json is not a JSON object"]
        if diff and not any(out.glob("shard-*")):  # stopped before its first shard (a bad row, a repeated id)
            logger.info("%s holds no shard yet: starting it again with the new arguments (%s)", out, "; ".join(diff))
            write_json(run_file, config)
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
    write_json(run_file, config)


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


def lock_folder(out: Path) -> int | None:
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


def done_shard(out: Path, k: int, config_sha: str, shard_rows: int, n_rows: int) -> dict[str, Any] | None:
    """Shard ``k``'s record if the shard is complete and its file matches its sha256; else ``None``.

    A record that is unreadable or whose fields are not what this run would write (a damaged or edited
    file) does not count: the shard is encoded again.
    """
    try:
        record = read_json(out / f"shard-{k:05d}.json", "")
    except OSError:
        return None
    if not isinstance(record, dict) or record.get("config_sha256") != config_sha:
        return None
    first, end = k * shard_rows, min((k + 1) * shard_rows, n_rows)
    skipped = record.get("skipped")
    well_formed = (
        type(record.get("shard")) is int and record["shard"] == k
        and record.get("file") == shard_name(k)
        and type(record.get("first_row")) is int and record["first_row"] == first
        and type(record.get("end_row")) is int and record["end_row"] == end
        and all(is_count(record.get(key)) for key in ("rows", "tokens", "truncated"))
        and isinstance(record.get("sha256"), str)
        and isinstance(skipped, list)
        and record["rows"] + len(skipped) == end - first
        and all(isinstance(r, dict) and is_count(r.get("row")) and isinstance(r.get("reason"), str)
                and (r.get("line") is None or is_count(r.get("line"))) for r in skipped)
    )  # fmt: skip
    if not well_formed:
        logger.warning("the record of shard %d in %s is damaged: encoding the shard again", k, out)
        return None
    shard = out / shard_name(k)
    if not shard.is_file() or sha256(shard) != record.get("sha256"):
        logger.warning("shard %d in %s does not match its checksum: encoding it again", k, out)
        return None
    return record


def clean_tmp(out: Path, k: int) -> None:
    for stale in out.glob(f".shard-{k:05d}.*.tmp"):  # left by a run killed mid-write
        stale.unlink(missing_ok=True)


_MAX_INT = 2**63 - 1  # what the shards' int64 rows hold


def is_count(value: Any) -> bool:
    """A non-negative integer that fits int64 (``True`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_INT
