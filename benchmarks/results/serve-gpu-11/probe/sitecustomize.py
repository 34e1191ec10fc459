"""Probes for the served embedding batches, switched on by environment variables in every process that starts
with this folder first on ``PYTHONPATH`` (the server's model process and its front-ends among them). Nothing is
imported or changed until ``nosink.serve.embedding`` or ``nosink.serve.http`` is, and then only what a variable
asks for:

- ``NOSINK_PROBE_TIMELINE=FILE``: each embedding batch's rows, tokens, the GPU's time on it and its idle time
  before it (CUDA events), the host's time launching it and waiting for it, written to FILE (CSV) every 250
  batches.
- ``NOSINK_PROBE_BEHIND=N``: while a batch is in flight, the next is launched behind it only when N texts wait or
  the GPU has finished the one in flight (else the engine answers that one first and gathers what came meanwhile).
  Unset: launched as soon as anything waits (the engine's own rule).
- ``NOSINK_PROBE_ONE_WRITE=0``: a response's head and body written in two calls again (uvicorn's own way).
"""

import importlib.abc
import importlib.machinery
import os
import sys
import time


def _patch_embedding(module):
    behind = os.environ.get("NOSINK_PROBE_BEHIND")
    timeline = os.environ.get("NOSINK_PROBE_TIMELINE")
    batches = module.Batches
    if behind:
        least = int(behind)
        due = batches.due

        def due_behind(self):
            if self.in_flight is not None and not self.chunks and self.waiting:
                event = self.in_flight.vectors.event
                return self.texts >= least or event is None or event.query()
            return due(self)

        batches.due = due_behind
    if timeline:
        import torch

        rows_out = []
        queue, finish = batches._queue, batches._finish

        def queue_timed(self, rows, start):
            begun = torch.cuda.Event(enable_timing=True)
            begun.record()
            t0 = time.perf_counter()
            launched = queue(self, rows, start)
            ended = torch.cuda.Event(enable_timing=True)  # the batch's own event is not timed: one of ours behind it
            ended.record()
            lengths = max(r.job.lengths[r.i] for r in rows)
            launched.probe = (begun, ended, t0, time.perf_counter(), len(rows), lengths)
            return launched

        def finish_timed(self, launched):
            probe = getattr(launched, "probe", None)
            t0 = time.perf_counter()
            launched.vectors.wait()
            waited = time.perf_counter() - t0
            finish(self, launched)
            if probe is None or launched.vectors.event is None:
                return
            begun, end, l0, l1, n, longest = probe
            end.synchronize()
            previous = getattr(self, "_probe_end", None)
            gap = previous.elapsed_time(begun) if previous is not None else float("nan")
            self._probe_end = end
            requests = len({id(job) for row in launched.rows for job, _ in row.wants})
            rows_out.append(
                f"{l0:.6f},{n},{requests},{longest},{begun.elapsed_time(end):.4f},{gap:.4f},"
                f"{(l1 - l0) * 1000:.4f},{waited * 1000:.4f}"
            )
            if len(rows_out) % 250 == 0:
                with open(timeline, "w") as out:
                    out.write("t,rows,requests,longest,gpu_ms,gpu_idle_before_ms,launch_ms,wait_ms\n")
                    out.write("\n".join(rows_out) + "\n")

        batches._queue, batches._finish = queue_timed, finish_timed


def _patch_http(module):
    if os.environ.get("NOSINK_PROBE_ONE_WRITE") == "0":
        module._HeadWithBody = lambda transport, cycle: transport


PATCHES = {"nosink.serve.embedding": _patch_embedding, "nosink.serve.http": _patch_http}


class _Patcher(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            PATCHES[name](module)

        spec.loader.exec_module = exec_module
        return spec


if any(os.environ.get(k) for k in ("NOSINK_PROBE_TIMELINE", "NOSINK_PROBE_BEHIND", "NOSINK_PROBE_ONE_WRITE")):
    sys.meta_path.insert(0, _Patcher())
