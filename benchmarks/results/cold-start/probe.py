"""Issue 57, item 1: what a CUDA-graph capture of encode()'s pooled layer loop costs, and where the time goes.

One process, one shape, random bf16 weights, a real tokenizer. For an encoder with graphs of uncompiled layers
(``compile=False``) and then the default (``compile=None``: the captured layer loop compiled), three calls of
``encode()`` on the same 1,000 texts, each timed, and every capture timed in its parts: the run before the capture
(on the capture's side stream, synchronized), the capture itself (host time from ``capture_begin`` to
``capture_end``, which includes the graph's instantiation), and dynamo's counters around it. Then the profiler's
top host operations over one uncompiled capture, and each bucket's batch timed eagerly and replayed.

    python benchmarks/results/cold-start/probe.py --arch qwen2.5-0.5b --tokenizer .gpu/tok
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_encoder import _model
from bench_texts_gpu import texts_of

from nosink import EncoderFromDecoder
from nosink.models import graphs as graphs_module

LOG: list[dict] = []


def timed_capture(run, device, pool):
    """models.graphs.capture with its parts timed (the same steps)."""
    counters = torch._dynamo.utils.counters
    before = dict(counters["stats"])
    current = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(current)
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    try:
        with torch.cuda.stream(side):
            run()
            side.synchronize()
            t1 = time.perf_counter()
            graph.capture_begin(pool=pool, capture_error_mode="thread_local")
            try:
                outputs = run()
                t2 = time.perf_counter()
            finally:
                graph.capture_end()
            t3 = time.perf_counter()
    finally:
        current.wait_stream(side)
    torch.cuda.synchronize()
    t4 = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    t5 = time.perf_counter()
    LOG.append({
        "pre_run": t1 - t0, "capture_python": t2 - t1, "capture_end": t3 - t2, "first_replay": t5 - t4,
        "dynamo": {k: v - before.get(k, 0) for k, v in counters["stats"].items() if v != before.get(k, 0)},
    })  # fmt: skip
    return graph, outputs


def calls(encoder: EncoderFromDecoder, texts: list[str], n: int, batch: int) -> None:
    for i in range(n):
        LOG.clear()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        encoder.encode(texts, batch_size=batch, show_progress_bar=False)
        torch.cuda.synchronize()
        took = time.perf_counter() - t0
        caps = sum(e["pre_run"] + e["capture_python"] + e["capture_end"] for e in LOG)
        print(f"  call {i + 1}: {took:.3f} s, {len(LOG)} captures taking {caps:.3f} s; {encoder.graph_counts()}")
        for e in LOG:
            print(f"    pre-run {e['pre_run'] * 1e3:7.1f} ms  capture {e['capture_python'] * 1e3:7.1f} ms  "
                  f"end {e['capture_end'] * 1e3:6.1f} ms  replay {e['first_replay'] * 1e3:5.2f} ms  "
                  f"{e['dynamo']}")  # fmt: skip
        sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--arch", default="qwen2.5-0.5b")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--spec", default="F* | M0B*12")
    p.add_argument("--texts", type=int, default=1000)
    p.add_argument("--batch", type=int, default=128)
    args = p.parse_args()
    from transformers import AutoTokenizer

    graphs_module.capture = timed_capture
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    model = _model(args.arch, "cuda", torch.bfloat16, vocab=len(tokenizer))
    texts = texts_of(args.texts)
    print(f"{args.arch} on {torch.cuda.get_device_name()}, torch {torch.__version__}; built in "
          f"{time.perf_counter() - t0:.1f} s; spec {args.spec}, {len(texts)} texts, batch {args.batch}")  # fmt: skip

    print("graphs off (cuda_graphs=False):")
    calls(EncoderFromDecoder(model, args.spec, tokenizer, cuda_graphs=False), texts, 2, args.batch)
    print("graphs of uncompiled layers (compile=False):")
    plain = EncoderFromDecoder(model, args.spec, tokenizer, compile=False)
    calls(plain, texts, 3, args.batch)

    print("the profiler over one uncompiled capture (a new batch size, its second batch captures):")
    odd = texts[:77]
    plain.encode(odd, batch_size=77, show_progress_bar=False)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        plain.encode(odd, batch_size=77, show_progress_bar=False)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))
    print(f"  log of that capture: {LOG[-1] if LOG else None}")

    print("the default (compile=None): warm_up() first, timed, then the calls:")
    default = EncoderFromDecoder(model, args.spec, tokenizer)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    compiled = default.warm_up()
    torch.cuda.synchronize()
    print(f"  warm_up(): {time.perf_counter() - t0:.2f} s, compiled={compiled}, "
          f"dynamo {dict(torch._dynamo.utils.counters['stats'])}")  # fmt: skip
    calls(default, texts, 3, args.batch)
    print("  another 1,000 texts (other lengths, other buckets):")
    calls(default, texts_of(args.texts, seed=7), 2, args.batch)

    print("the default again, a fresh encoder without warm_up() (compile at its first capture):")
    fresh = EncoderFromDecoder(model, args.spec, tokenizer)
    calls(fresh, texts_of(args.texts, seed=11), 3, args.batch)
    print(f"memory: allocated {torch.cuda.memory_allocated() / 2**20:.0f} MiB, "
          f"reserved {torch.cuda.memory_reserved() / 2**20:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
