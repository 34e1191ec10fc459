"""An engine's embedding batch of N one-text requests on a GPU: wall time against the GPU's busy time.

python benchmarks/results/serve-gpu-4/batch-probe.py --tokenizer TOKENIZER_DIR [--spec SPEC] [--profile [--same]]

With ``--profile``: where the host time of a batch of 64 goes instead (cProfile and the torch profiler);
``--same`` feeds the same 64 texts every batch (one bucket, its graph replayed: the steady state).

Wall: ``Batches.step()`` from gathered requests to answered futures (median of 9). GPU: the sum of the kernels'
time in the torch profiler over 5 such steps, a fifth of it. Their difference is host work the GPU waits for.
"""

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers as tf
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_encoder import ARCHS
from bench_serve import corpus

from nosink.models import texts as T
from nosink.serve import Limits, create_app
from nosink.serve.jobs import EmbedJob

p = argparse.ArgumentParser()
p.add_argument("--arch", default="qwen2.5-0.5b")
p.add_argument("--spec", default="F* | M0B*12")
p.add_argument("--tokenizer", required=True)
p.add_argument("--profile", action="store_true", help="profile batches of 64 instead of the table")
p.add_argument("--same", action="store_true", help="with --profile: the same 64 texts every batch")
args = p.parse_args()
tok = tf.AutoTokenizer.from_pretrained(args.tokenizer)
config = ARCHS[args.arch]()
config.vocab_size = max(config.vocab_size, len(tok))
with torch.device("cuda"):
    lm = tf.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
app = create_app(lm, tok, args.spec, limits=Limits(batch_size=128, batch_texts=128, batch_wait_ms=0))
engine, encoder = app.state.engine, app.state.encoder
encoder.warm_up()
texts = corpus(4096)
sink = encoder.sink_ids()
at = [0]


def step(n: int) -> float:
    jobs = []
    for _ in range(n):
        jobs.append(EmbedJob(T.tokenize(tok, [texts[at[0] % len(texts)]], sink=sink)))
        at[0] += 1
    for job in jobs:
        engine.batches.add(job)
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.inference_mode():
        while any(not j.future.done() for j in jobs):
            engine.batches.step()
    torch.cuda.synchronize()
    return time.perf_counter() - start


print(f"{torch.cuda.get_device_name()}, {args.arch}, {args.spec}\n")
if not args.profile:
    print("| rows | wall ms a batch | GPU busy ms | host ms the GPU waits | wall texts/s |")
    print("|---|---|---|---|---|")
    for n in (8, 16, 32, 48, 64, 96, 128):
        for _ in range(3):
            step(n)
        wall = statistics.median(step(n) for _ in range(9))
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step(n)
        gpu = sum(e.self_device_time_total for e in prof.key_averages()) / 5 / 1000
        print(f"| {n} | {wall * 1000:.2f} | {gpu:.2f} | {wall * 1000 - gpu:.2f} | {n / wall:,.0f} |", flush=True)

else:
    if args.same:  # the same 64 texts every batch: one bucket, its graph replayed (steady state)
        _step = step

        def step(n: int) -> float:
            at[0] = 0
            return _step(n)

    for _ in range(5):
        step(64)
    times = sorted(step(64) for _ in range(9))
    print(f"wall ms a batch of 64, median of 9: {times[4] * 1000:.2f}\n")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(20):
        step(64)
    prof.disable()
    print("## cProfile of 20 batches of 64 one-text requests, by own time\n")
    pstats.Stats(prof).sort_stats("tottime").print_stats(45)
    print("## by cumulative time\n")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(60)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as tp:
        for _ in range(5):
            step(64)
    print(tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
    print(tp.key_averages().table(sort_by="self_cuda_time_total", row_limit=15))
