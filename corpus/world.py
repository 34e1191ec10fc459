"""The processes of a run: the torch.distributed world, its progress exchange, and failures shared by all ranks.

Under ``torchrun`` (``RANK`` and ``WORLD_SIZE`` set) the default process group is created if needed
(``cuda:nccl,cpu:gloo`` on a GPU, ``gloo`` otherwise); control messages travel through separate gloo groups.
Without ``torchrun`` it is one process. If one rank fails, the others stop at their next batch and every rank
reports it (no rank is left waiting in a collective).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
from tqdm.auto import tqdm

logger = logging.getLogger(__name__)


@dataclass
class World:
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


def join(device: torch.device, timeout: timedelta) -> World:
    """This process's place: torch.distributed when launched by torchrun (or already set up), else alone."""
    dist = torch.distributed
    if not dist.is_available():
        return World()
    owned = False
    if not dist.is_initialized():
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            return World()
        backend = "cuda:nccl,cpu:gloo" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, timeout=timeout)
        owned = True
    rank, size = dist.get_rank(), dist.get_world_size()
    if size == 1:
        return World(owned=owned)
    control = dist.new_group(backend="gloo", timeout=timeout)
    progress = dist.new_group(backend="gloo", timeout=timeout)
    return World(rank, size, control, progress, owned)


def local_device() -> torch.device:
    """The device this process should encode on: ``cuda:LOCAL_RANK`` when CUDA is available, else the CPU.

    ``LOCAL_RANK`` is set by ``torchrun`` (0 when not launched by it).
    """
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


class Progress:
    """Rows done, over every rank; a tqdm bar on rank 0.

    With several ranks a background thread all-reduces the counts over its own gloo group, once per
    ``interval``, in lockstep on every rank until all ranks are done: the encoding loop never waits
    for it, and the end of the loop is where ranks wait for each other. A rank that is done stops
    sleeping between exchanges (its partners' pace sets theirs), so the run ends as soon as the last
    rank is done, not up to ``interval`` later.
    """

    def __init__(self, world: World, total: int, show: bool, interval: float) -> None:
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
        """Raise :class:`Stopped` if another rank has failed (called between batches)."""
        if self.stopping:
            raise Stopped("another rank failed")

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


class Stopped(Exception):
    """This rank stopped because another rank failed (that rank's error is the one reported)."""


@dataclass(frozen=True)
class Failure:
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
        object.__setattr__(self, "stopped", isinstance(error, Stopped))


def raise_failure(gathered: list[Any], failure: Exception | None) -> None:
    """If any rank failed: this rank's own error if it had one, else which rank failed and why (a RuntimeError)."""
    failures = [g for g in gathered if isinstance(g, Failure)]
    if not failures:
        return
    if failure is not None and not isinstance(failure, Stopped):
        raise failure
    first = next((f for f in failures if not f.stopped), failures[0])
    raise RuntimeError(f"rank {first.rank} failed: {first.message}") from None
