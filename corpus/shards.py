"""A shard file: one safetensors file holding ``vectors`` (N, D), ``rows`` (N,) int64 and, with ids,
``ids_offsets`` (N + 1,) int64 and ``ids_utf8`` (the ids' UTF-8, back to back).

The writer is our own because safetensors' writers take every tensor whole, in memory, and a shard's vectors
go to disk batch by batch; the files are plain safetensors, read here with safetensors' ``safe_open``.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open

from nosink.checks import printable

FORMAT = 1  # version of the corpus folder layout
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
ST_NAMES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def shard_name(k: int) -> str:
    return f"shard-{k:05d}.safetensors"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_atomic(target: Path, write: Callable[[Path], Any]) -> None:
    """``write(tmp_path)``, flushed to disk, then renamed to ``target``: a reader sees all of it or none."""
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        with tmp.open("rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(target: Path, value: Any) -> None:
    write_atomic(target, lambda tmp: tmp.write_text(json.dumps(value, indent=1) + "\n", encoding="utf-8"))


class ShardFile:
    """Shard ``k``'s file, written while the shard is encoded: the process holds one batch of vectors at a time.

    The header, rows and ids are written first under a temporary name, each batch's vectors in place
    (:meth:`put`); :meth:`seal` flushes to disk, takes the sha256 and renames, so a reader sees a whole shard
    or none.
    """

    def __init__(self, out: Path, k: int, n: int, dimension: int, dtype: torch.dtype, rows: list[int],
                 ids: list[str] | None) -> None:  # fmt: skip
        self.k, self.target = k, out / shard_name(k)
        self.tmp = self.target.with_name(f".{self.target.name}.{uuid.uuid4().hex[:8]}.tmp")
        self.row_bytes = dimension * torch.empty((), dtype=dtype).element_size()
        blobs: list[tuple[str, str, list[int], bytes | None]] = [
            ("rows", "I64", [n], np.asarray(rows, np.int64).tobytes())
        ]
        if ids is not None:
            encoded = [i.encode("utf-8") for i in ids]
            offsets = np.cumsum([0, *map(len, encoded)], dtype=np.int64)  # (n + 1,)
            blobs.append(("ids_offsets", "I64", [n + 1], offsets.tobytes()))
        blobs.append(("vectors", ST_NAMES[dtype], [n, dimension], None))  # written batch by batch
        if ids is not None:
            blob = b"".join(encoded)
            blobs.append(("ids_utf8", "U8", [len(blob)], blob))
        header: dict[str, Any] = {"__metadata__": {"nosink_corpus": str(FORMAT), "shard": str(k)}}
        start = 0
        for name, kind, shape, data in blobs:  # back to back, as safetensors requires
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
        if not vectors.numel():
            return
        data = vectors.contiguous().view(torch.int8).numpy()  # (B, D * bytes)
        fd = self.fh.fileno()
        for position, row in zip(positions, data, strict=True):
            os.pwrite(fd, row.data, self.vectors_start + position * self.row_bytes)

    def seal(self) -> str:
        """Flush the file to disk and give it its name; its sha256."""
        try:
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
            digest = sha256(self.tmp)
            os.replace(self.tmp, self.target)
            return digest
        finally:
            self.discard()

    def discard(self) -> None:
        """Close and remove the temporary file (a sealed shard is already renamed)."""
        self.fh.close()
        self.tmp.unlink(missing_ok=True)


def read_shard(path: Path) -> tuple[dict[str, np.ndarray], str]:
    """A shard's tensors as read-only numpy arrays over a memory map (nothing read yet); the vectors' dtype name.

    bfloat16 vectors come as their uint16 bits (numpy has no bfloat16).

    Raises:
        ValueError: saying what is wrong with the file (safetensors' words for a damaged header or size).
    """
    try:
        with safe_open(path, framework="pt") as fh:  # tensors over a torch storage mapped from the file
            tensors = {name: fh.get_tensor(name) for name in fh.keys()}
    except SafetensorError as err:
        raise ValueError(str(err)) from None
    out = {}
    for name, tensor in tensors.items():
        try:
            bits = tensor.dtype == torch.bfloat16
            array = tensor.view(torch.int16).numpy().view(np.uint16) if bits else tensor.numpy()
        except TypeError:  # a dtype numpy lacks
            raise ValueError(f"tensor {printable(repr(name))} has dtype {tensor.dtype}") from None
        array.flags.writeable = False
        out[name] = array
    vectors = tensors.get("vectors")
    return out, "" if vectors is None else ST_NAMES.get(vectors.dtype, str(vectors.dtype))
