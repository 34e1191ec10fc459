"""Embedding batches: waiting requests gathered, their inputs grouped by the plans they need, sorted by length
and cut into batches, then run.

Several embedding configurations (a spec, an exit layer, a template) share one encoder, each with its plan
compiled once. A forward pass runs every plan it is given on every row of its batch, computing the layers
the plans have in common once (:meth:`EncoderFromDecoder.encode_tokens` with ``specs=``, as
``encode_specs`` does). So the gathered inputs are grouped by how they were tokenized and which plans
want them:

- Inputs with the same tokens (the same text framed the same way: the same ``prompt_name`` and template,
  or none) are one row, whichever configurations asked for them. The row runs under each of their plans
  in one forward, sharing the lower layers: one text asked of configurations ``a`` and ``b`` costs their
  shared layers once.
- Inputs framed differently (another template, another ``prompt_name``) have other tokens, so they are
  other rows, and nothing of them can be shared. A row runs only under the plans that asked for it: rows
  are grouped by that set of plans, each group sorted by length and cut into batches of its own. Mixing
  groups in one batch would run every row under every plan present, up to twice the work for two
  configurations that differ in many layers; keeping them apart costs at most one partly filled batch
  per group and gathering. Within a group, rows of different framings mix freely (the prompt and the
  template are in each row's tokens), as texts with and without a prompt always did.

On a GPU a batch is *launched* (its work queued, its vectors' copy to the host queued behind it) and answered
later: while one batch runs on the GPU, the engine's thread launches the next (if any request waits) and only
then answers the one before, so the host's work on a batch (building it, answering it) overlaps the GPU's work
on another instead of leaving the GPU idle. At most one batch is in flight besides the one being launched. On
a CPU a batch is answered as soon as it is launched.
"""

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from nosink.layerspec import Plan
from nosink.models import EncoderFromDecoder
from nosink.models import texts as _texts
from nosink.models.encoding import ToHost
from nosink.models.riding import Rider
from nosink.serve.jobs import EmbedJob
from nosink.serve.limits import Limits


@dataclass
class Row:
    """One row of a forward pass: input ``i`` of ``job``'s tokens, and every ``(request, input index)`` wanting it."""

    job: EmbedJob
    i: int
    wants: list[tuple[EmbedJob, int]]


Rows = list[Row]  # one batch


@dataclass
class Launched:
    """A batch whose work is queued: its rows, the plans it runs and its unit vectors on their way to the host."""

    rows: Rows
    plans: list[Plan]
    vectors: ToHost  # (plans, B, D)
    start: float  # time.monotonic() when the batch began to be built


class Batches:
    """The embedding side of the engine: requests waiting, batches cut from them, and running one batch.

    Touched by the engine's thread only.

    Args:
        encoder: the encoder that runs every plan.
        limits: batch sizes and waits.
        stats: the engine's counters (``embedding_batches``, ``embedded_texts``: rows run, ``dropped``,
            ``embedding_requests``: requests answered, ``embedding_request_ms``: their time in the engine, from
            :meth:`add` to their answer).
        plans: each configuration's compiled plan, by name (:meth:`EncoderFromDecoder.plan_for`); a job
            naming no configuration runs the encoder's own plan.
    """

    def __init__(
        self,
        encoder: EncoderFromDecoder,
        limits: Limits,
        stats: dict[str, int],
        plans: Mapping[str, Plan] | None = None,
    ) -> None:
        self.encoder, self.limits, self.stats = encoder, limits, stats
        self.plans = dict(plans or {})
        self.waiting: deque[EmbedJob] = deque()
        self.texts = 0  # inputs of the waiting requests
        self.chunks: deque[Rows] = deque()  # gathered rows, one batch each
        self.deadline: float | None = None  # when the oldest waiting request stops waiting
        self.settle = 0.0  # before then, a small gathering waits for the requests the last batch answered
        self.answered = 0  # requests the last batch answered: once as many wait, the gathering waits no longer
        self.in_flight: Launched | None = None  # a batch launched on the GPU and not answered yet

    def __len__(self) -> int:
        return len(self.waiting) + len(self.chunks) + (self.in_flight is not None)

    def plan_of(self, job: EmbedJob) -> Plan:
        """The plan that runs ``job``: its configuration's, or the encoder's own."""
        return self.encoder.plan if job.config is None else self.plans[job.config]

    def add(self, job: EmbedJob) -> None:
        """Queue a request; the first of a gathering starts the wait for companions."""
        job.arrived = time.monotonic()
        if not self.waiting:
            self.deadline = job.arrived + self.limits.batch_wait_ms / 1000
        self.waiting.append(job)
        self.texts += len(job)

    def wait(self) -> float | None:
        """Seconds until a batch is due (0: now, or a batch in flight to answer), or None if nothing waits."""
        if self.chunks or self.in_flight is not None:
            return 0.0
        if self.waiting and self.deadline is not None:
            return max(0.0, max(self.deadline, self.settle) - time.monotonic())
        return None

    def due(self) -> bool:
        """Whether a batch should run now: one is cut, or requests wait while a batch is in flight (the GPU is busy:
        launching them now costs no one a wait), or enough texts wait, or as many requests wait as the last batch
        answered (its clients are back: waiting longer would only idle the model), or the first has waited
        enough."""
        if self.chunks:
            return True
        if not self.waiting:
            return False
        if self.in_flight is not None:
            return True
        enough = self.texts >= max(self.limits.batch_texts, self.limits.batch_size)
        back = 0 < self.answered <= len(self.waiting)
        return enough or back or time.monotonic() >= max(self.deadline or 0.0, self.settle)

    def jobs(self) -> list[EmbedJob]:
        """Every request not answered yet."""
        flying = [self.in_flight.rows] if self.in_flight is not None else []
        gathered = {id(job): job for rows in [*self.chunks, *flying] for row in rows for job, _ in row.wants}
        return list(self.waiting) + list(gathered.values())

    def step(self, rider: Rider | None = None) -> None:
        """Launch one batch of gathered texts (first gathering the waiting requests if no batch is left), then answer
        the batch in flight before it; a batch that is not in flight on a GPU is answered at once.

        A ``rider`` (chats' next tokens, :mod:`nosink.models.riding`) goes with the batch where its plans allow
        (:meth:`EncoderFromDecoder.rides`); its ``logits`` are then set, else left None."""
        if not self.chunks:
            self._gather()
        launched = self._launch(self.chunks.popleft(), rider) if self.chunks else None
        self.finish()
        if launched is not None and launched.vectors.pending:
            self.in_flight = launched
        elif launched is not None:
            self._finish(launched)

    def finish(self) -> None:
        """Answer the batch in flight, if any (waiting for its GPU work)."""
        launched, self.in_flight = self.in_flight, None
        if launched is not None:
            self._finish(launched)

    def _gather(self) -> None:
        """Cut the inputs of waiting requests (up to ``batch_texts`` texts, or ``batch_size`` if larger) into
        batches: one row per distinct tokens, rows grouped by the plans wanting them, each group sorted by
        length (see the module docstring)."""
        jobs, count, most = [], 0, max(self.limits.batch_texts, self.limits.batch_size)
        while self.waiting and (not jobs or count + len(self.waiting[0]) <= most):
            job = self.waiting.popleft()
            self.texts -= len(job)
            if job.cancelled or not job.future.set_running_or_notify_cancel():
                self.stats["dropped"] += 1  # its client is gone: not computed
                continue
            jobs.append(job)
            count += len(job)
        self.deadline = time.monotonic() if self.waiting else None  # those left have waited long enough
        rows: dict[tuple, Row] = {}
        for job in jobs:
            job.left = len(job)
            tokens = job.tokens
            for i in range(len(job)):
                key = (tuple(tokens.prefix_ids[i]), tuple(tokens.text_ids[i]), tuple(tokens.suffix(i)))
                row = rows.get(key)
                if row is None:
                    row = rows[key] = Row(job, i, [])
                row.wants.append((job, i))
        groups: dict[frozenset[str], Rows] = {}  # in order of arrival
        for row in rows.values():
            groups.setdefault(frozenset(self.plan_of(job).name for job, _ in row.wants), []).append(row)
        size = self.limits.batch_size
        for group in groups.values():
            group.sort(key=lambda row: -row.job.lengths[row.i])  # stable: ties keep arrival order
            self.chunks.extend(group[i : i + size] for i in range(0, len(group), size))

    def _launch(self, rows: Rows, rider: Rider | None = None) -> Launched | None:
        """Queue a batch's work (carrying ``rider`` where it can); None if nothing of it is left to compute, or if it
        failed (and is answered)."""
        rows = _keep(rows, lambda job: not job.cancelled and not job.future.done())
        if not rows:
            return None  # every request in it is gone or failed: its texts are not computed
        start = time.monotonic()
        try:
            return self._queue(rows, start, rider)
        except Exception as err:
            failure = err
            if rider is not None:  # the rider may be what failed: the batch is tried once without it
                rider.logits = None
                try:
                    return self._queue(rows, start)
                except Exception as again:
                    failure = again
            self._alone(rows, failure)
            self._settle(rows, start)
            return None

    def _finish(self, launched: Launched) -> None:
        try:
            vectors = _by_plan(launched)
        except Exception as err:
            self._alone(launched.rows, err)
        else:
            self._deliver(launched.rows, vectors)
        finally:
            self._settle(launched.rows, launched.start)

    def _settle(self, rows: Rows, start: float) -> None:
        # Clients that send one request after another come back moments after their answers: when this batch
        # answered several, a gathering smaller than a batch waits for them a little (a quarter of the batch's
        # time, at most 4 x batch_wait_ms), so that concurrent clients share one batch rather than splitting into
        # two half-full ones that take turns. One client alone never waits for this. Once as many requests wait
        # as this batch answered, they are all back (or others came in their place) and the gathering runs at
        # once (see due()): under a steady load the model never idles through batch_wait_ms for companions who
        # are already there.
        self.answered = len({id(job) for row in rows for job, _ in row.wants})
        took = time.monotonic() - start
        wait = min(took / 4, 4 * self.limits.batch_wait_ms / 1000)
        self.settle = time.monotonic() + wait if self.answered > 1 else 0.0

    def _alone(self, rows: Rows, err: Exception) -> None:
        """A batch failed with ``err``: fail its one request, or run each request alone, so that one request's failure
        does not fail its batch companions."""
        jobs = list({id(job): job for row in rows for job, _ in row.wants}.values())
        if len(jobs) == 1:
            _fail(jobs[0], err)
            return
        for job in jobs:
            mine = _keep(rows, lambda other: other is job)  # noqa: B023 (called at once)
            try:
                self._deliver(mine, _by_plan(self._queue(mine, time.monotonic())))
            except Exception as alone:
                _fail(job, alone)

    def _deliver(self, rows: Rows, vectors: dict[str, np.ndarray]) -> None:
        """Give each input wanting a row its plan's vector of that row; a request with all its vectors is answered."""
        now = time.monotonic()
        for k, row in enumerate(rows):
            for job, i in row.wants:
                vector = vectors[self.plan_of(job).name][k]
                if job.vectors is None:
                    job.vectors = np.empty((len(job), vector.shape[0]), dtype=np.float32)
                job.vectors[i] = vector
                job.left -= 1
                if job.left == 0:
                    self.stats["embedding_requests"] += 1
                    self.stats["embedding_request_ms"] += round((now - job.arrived) * 1000)
                    job.future.set_result(job.vectors)

    def _queue(self, rows: Rows, start: float, rider: Rider | None = None) -> Launched:
        """Queue one batch's unit vectors under each plan its rows want, as ``encode(..., normalize_embeddings=True)``
        gives them, and their copy to the host; ``rider`` goes with it where the plans allow."""
        plans = list({plan.name: plan for plan in (self.plan_of(job) for row in rows for job, _ in row.wants)}.values())
        if rider is not None and not self.encoder.rides(plans):
            rider = None
        self.stats["embedding_batches"] += 1
        self.stats["embedded_texts"] += len(rows)
        # (plans, B, D) means over text tokens, normalised where they are (a zero vector stays zero). On the host
        # with torch's default thread pool (an engine built by create_app in a program that keeps it), normalising a
        # batch of 64 took 5-10 ms on a 16-core H200 machine, more than the GPU's forward of those texts; `nosink
        # serve` runs its engine with one CPU thread, where it costs about 0.1 ms.
        out, _ = self.encoder.encode_batch(_inputs(rows), range(len(rows)), plans, "mean", "right", False, rider)
        return Launched(rows, plans, ToHost(torch.nn.functional.normalize(out, dim=-1)), start)


def _by_plan(launched: Launched) -> dict[str, np.ndarray]:
    """A launched batch's unit vectors on the host, by plan name (waits for its GPU work)."""
    host = launched.vectors.wait().numpy()
    return {plan.name: host[k] for k, plan in enumerate(launched.plans)}


def _keep(rows: Rows, wanted: Callable[[EmbedJob], bool]) -> Rows:
    """``rows`` with only the wants of jobs that are ``wanted``; rows left wanting nothing are dropped."""
    kept = [Row(row.job, row.i, [(job, i) for job, i in row.wants if wanted(job)]) for row in rows]
    return [row for row in kept if row.wants]


def _fail(job: EmbedJob, err: Exception) -> None:
    job.cancelled = True  # its other chunks are skipped
    job.future.set_exception(err)


def _inputs(rows: Sequence[Row]) -> _texts.Tokenized:
    """The tokens of the rows, as one batch."""
    return _texts.Tokenized(
        prefix_ids=[row.job.tokens.prefix_ids[row.i] for row in rows],
        text_ids=[row.job.tokens.text_ids[row.i] for row in rows],
        suffix_ids=[row.job.tokens.suffix(row.i) for row in rows],
    )
