"""The training data: texts (one per line) or pairs (tab-separated), and the seeded order batches take them in."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch

from nosink.checks import printable
from nosink.models.texts import read_lines

__all__ = ["TrainingData", "read_data"]


class TrainingData:
    """What a run trains on: texts, or ``(anchor, positive)`` pairs; :meth:`batch` gives step ``k``'s items.

    Every epoch is a permutation of the items seeded by ``(seed, epoch)``, cut into full batches (the last
    partial batch of an epoch is dropped, so no text meets itself as a negative); so step ``k``'s batch
    depends only on the seed and ``k``, and a resumed run reads on where it stopped.
    """

    def __init__(self, items: list[str] | list[tuple[str, str]], source: str, digest: str) -> None:
        self.items, self.source, self.digest = items, source, digest

    def __len__(self) -> int:
        return len(self.items)

    def batch(self, step: int, batch_size: int, seed: int) -> list:
        """The items of step ``step`` (from 0): ``batch_size`` of them, or all when there are fewer."""
        size = min(batch_size, len(self.items))
        per_epoch = len(self.items) // size
        epoch, k = divmod(step, per_epoch)
        order = torch.randperm(len(self.items), generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
        return [self.items[i] for i in order[k * size : (k + 1) * size].tolist()]


def read_data(path: str | os.PathLike[str], pairs: bool) -> TrainingData:
    """Read a UTF-8 file: one text per line, or with ``pairs`` an anchor and its positive per line, tab-separated.

    Blank lines are skipped.

    Raises:
        FileNotFoundError: if there is no such file.
        ValueError: if it holds no text, is not UTF-8, or (``pairs``) a line is not two non-empty texts
            separated by a tab (naming the line).
    """
    file = Path(os.path.expanduser(os.fspath(path)))
    where = printable(str(file))
    if not file.is_file():
        raise FileNotFoundError(f"no data file at {where}" + (" (it is a folder)" if file.is_dir() else ""))
    data = file.read_bytes()
    lines = read_lines(file, data)
    items: list = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if pairs:
            parts = line.split("\t")
            if len(parts) != 2 or not all(p.strip() for p in parts):
                raise ValueError(
                    f"line {number} of {where} is not a pair: write an anchor and its positive separated by one tab"
                )
            items.append((parts[0], parts[1]))
        else:
            items.append(line)
    if not items:
        raise ValueError(f"{where} holds no texts (it is empty or blank): give one text per line")
    return TrainingData(items, str(file), hashlib.sha256(data).hexdigest())
