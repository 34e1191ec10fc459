"""The serving engine's embedding side alone on a GPU, with and without a batch in flight.

python benchmarks/results/serve-gpu-5/flight-probe.py --tokenizer TOKENIZER_DIR [--arch A] [--spec S] [--requests N]

N one-text requests, tokenized beforehand (as the front-ends do), wait in the engine at once; ``Batches.step()``
runs until all are answered, gathering ``--gather`` texts a batch (64: what 64 one-text clients give a gathering).
Texts/s of the engine alone, ``in_flight`` off (each batch answered before the next starts) and on (the next
batch queued on the GPU before the last is answered), interleaved, median of 7 after 2 warm-ups; and the GPU's
busy time a batch from the torch profiler (its kernels' time over the whole run, over the batches).
"""

import argparse
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
p.add_argument("--requests", type=int, default=2048)
p.add_argument("--gather", type=int, default=64)
args = p.parse_args()
torch.set_num_threads(1)  # as `nosink serve` runs its engine on a GPU
tok = tf.AutoTokenizer.from_pretrained(args.tokenizer)
config = ARCHS[args.arch]()
config.vocab_size = max(config.vocab_size, len(tok))
with torch.device("cuda"):
    lm = tf.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
limits = Limits(batch_size=128, batch_texts=args.gather, batch_wait_ms=0)
app = create_app(lm, tok, args.spec, limits=limits)
engine, encoder = app.state.engine, app.state.encoder
encoder.warm_up()
texts = corpus(args.requests)
sink = encoder.sink_ids()
tokens = [T.tokenize(tok, [t], sink=sink) for t in texts]


def run(in_flight: bool) -> float:
    engine.batches.in_flight = in_flight
    jobs = [EmbedJob(t) for t in tokens]
    for job in jobs:
        engine.batches.add(job)
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.inference_mode():
        while engine.batches.due():
            engine.batches.step()
    torch.cuda.synchronize()
    took = time.perf_counter() - start
    assert all(j.future.done() for j in jobs)
    return len(jobs) / took


print(
    f"{torch.cuda.get_device_name()}, {args.arch}, {args.spec}, {args.requests} one-text requests, "
    f"gathered {args.gather} at a time, engine on 1 CPU thread\n"
)
for mode in (False, True, False, True):
    run(mode)
rates: dict[bool, list[float]] = {False: [], True: []}
for _ in range(7):
    for mode in (False, True):
        rates[mode].append(run(mode))
batches_before = engine.stats["embedding_batches"]
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    run(True)
batches = engine.stats["embedding_batches"] - batches_before
gpu_ms = sum(e.self_device_time_total for e in prof.key_averages()) / 1000 / batches
print("| in flight | texts/s (median of 7) | passes |")
print("|---|---|---|")
for mode in (False, True):
    r = rates[mode]
    print(f"| {'on' if mode else 'off'} | {statistics.median(r):,.0f} | {min(r):,.0f}-{max(r):,.0f} |")
print(
    f"\nGPU busy {gpu_ms:.2f} ms a batch of {args.requests / batches:.1f} rows "
    f"(ceiling {args.requests / batches / gpu_ms * 1000:,.0f} texts/s)"
)
print(f"in flight / off: {statistics.median(rates[True]) / statistics.median(rates[False]):.2f}x")
