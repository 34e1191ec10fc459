"""Embedding batches: waiting requests gathered, their inputs sorted by length and cut into batches, then run."""

import time
from collections import deque
from collections.abc import Sequence

import numpy as np
import torch

from nosink.models import EncoderFromDecoder
from nosink.models import texts as _texts
from nosink.serve.jobs import EmbedJob
from nosink.serve.limits import Limits

Rows = list[tuple[EmbedJob, int]]  # (job, input index) of one batch


class Batches:
    """The embedding side of the engine: requests waiting, batches cut from them, and running one batch.

    Touched by the engine's thread only.
    """

    def __init__(self, encoder: EncoderFromDecoder, limits: Limits, stats: dict[str, int]) -> None:
        self.encoder, self.limits, self.stats = encoder, limits, stats
        self.waiting: list[EmbedJob] = []
        self.chunks: deque[Rows] = deque()  # gathered (job, input index), one batch each
        self.deadline: float | None = None  # when the oldest waiting request stops waiting

    def __len__(self) -> int:
        return len(self.waiting) + len(self.chunks)

    def add(self, job: EmbedJob) -> None:
        """Queue a request; the first of a gathering starts the wait for companions."""
        if not self.waiting:
            self.deadline = time.monotonic() + self.limits.batch_wait_ms / 1000
        self.waiting.append(job)

    def wait(self) -> float | None:
        """Seconds until a batch is due (0: now), or None if nothing waits."""
        if self.chunks:
            return 0.0
        if self.waiting and self.deadline is not None:
            return max(0.0, self.deadline - time.monotonic())
        return None

    def due(self) -> bool:
        """Whether a batch should run now: one is cut, or enough texts wait, or the first has waited enough."""
        if self.chunks:
            return True
        if not self.waiting:
            return False
        count = sum(len(job) for job in self.waiting)
        return count >= self.limits.batch_texts or time.monotonic() >= (self.deadline or 0.0)

    def jobs(self) -> list[EmbedJob]:
        """Every request not answered yet."""
        return self.waiting + list({id(job): job for rows in self.chunks for job, _ in rows}.values())

    def step(self) -> None:
        """Encode one batch of gathered texts, first gathering the waiting requests if no batch is left."""
        if not self.chunks:
            self._gather()
        if self.chunks:
            self._run(self.chunks.popleft())

    def _gather(self) -> None:
        """Cut the inputs of waiting requests (up to ``batch_texts`` texts, any prompts) into length-sorted chunks."""
        jobs, count = [], 0
        while self.waiting and (not jobs or count + len(self.waiting[0]) <= self.limits.batch_texts):
            job = self.waiting.pop(0)
            if job.cancelled or not job.future.set_running_or_notify_cancel():
                self.stats["dropped"] += 1  # its client is gone: not computed
                continue
            jobs.append(job)
            count += len(job)
        self.deadline = time.monotonic() if self.waiting else None  # those left have waited long enough
        rows = []
        for job in jobs:
            job.left = len(job)
            rows.extend((job, i) for i in range(len(job)))
        rows.sort(key=lambda row: -row[0].lengths[row[1]])  # stable: ties keep arrival order
        size = self.limits.batch_size
        self.chunks.extend(rows[i : i + size] for i in range(0, len(rows), size))

    def _run(self, rows: Rows) -> None:
        rows = [(job, i) for job, i in rows if not job.cancelled and not job.future.done()]
        if not rows:
            return  # every request in it is gone or failed: its texts are not computed
        try:
            vectors = self._encode(_inputs(rows))
        except Exception as err:
            jobs = list({id(job): job for job, _ in rows}.values())
            if len(jobs) == 1:
                _fail(jobs[0], err)
                return
            for job in jobs:  # one request's failure must not fail its batch companions
                mine = [(j, i) for j, i in rows if j is job]
                try:
                    _deliver(mine, self._encode(_inputs(mine)))
                except Exception as alone:
                    _fail(job, alone)
            return
        _deliver(rows, vectors)

    def _encode(self, tokens: _texts.Tokenized) -> np.ndarray:
        """Unit vectors of one batch of tokenized inputs, as ``encode(..., normalize_embeddings=True)`` gives them."""
        self.stats["embedding_batches"] += 1
        self.stats["embedded_texts"] += len(tokens)
        vectors = self.encoder.encode_tokens(tokens)[self.encoder.plan.name]  # (B, D), mean over text tokens
        return torch.nn.functional.normalize(vectors, dim=-1).numpy()  # a zero vector stays zero


def _deliver(rows: Rows, vectors: np.ndarray) -> None:
    for (job, i), vector in zip(rows, vectors, strict=True):
        if job.vectors is None:
            job.vectors = np.empty((len(job), vectors.shape[1]), dtype=np.float32)
        job.vectors[i] = vector
        job.left -= 1
        if job.left == 0:
            job.future.set_result(job.vectors)


def _fail(job: EmbedJob, err: Exception) -> None:
    job.cancelled = True  # its other chunks are skipped
    job.future.set_exception(err)


def _inputs(rows: Sequence[tuple[EmbedJob, int]]) -> _texts.Tokenized:
    """The tokens of input ``i`` of ``job`` for each ``(job, i)`` of ``rows``, as one batch."""
    return _texts.Tokenized(
        prefix_ids=[job.tokens.prefix_ids[i] for job, i in rows], text_ids=[job.tokens.text_ids[i] for job, i in rows]
    )
