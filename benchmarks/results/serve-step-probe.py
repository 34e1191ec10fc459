"""Where an engine's embedding batch spends its time on a GPU: one batch of N one-text requests, profiled.

python benchmarks/results/serve-step-probe.py --tokenizer TOKENIZER_DIR --arch qwen2.5-0.5b --spec "F* | M0B*12"
"""

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch
import transformers as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_encoder import ARCHS
from bench_serve import corpus

from nosink.models import texts as T
from nosink.serve import Limits, create_app
from nosink.serve.jobs import EmbedJob

p = argparse.ArgumentParser()
p.add_argument("--arch", default="qwen2.5-0.5b")
p.add_argument("--spec", default="F* | M0B*12")
p.add_argument("--tokenizer", required=True)
p.add_argument("--torch-profile", action="store_true", help="also the torch profiler's tables of 5 batches of 64")
args = p.parse_args()
tok = tf.AutoTokenizer.from_pretrained(args.tokenizer)
config = ARCHS[args.arch]()
config.vocab_size = max(config.vocab_size, len(tok))
with torch.device("cuda"):
    lm = tf.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
app = create_app(lm, tok, args.spec, limits=Limits(batch_size=128, batch_texts=128, batch_wait_ms=0))
engine, encoder = app.state.engine, app.state.encoder
texts = corpus(4096)
sink = encoder.sink_ids()


def step(n: int, per: int, profile: bool = False) -> float:
    jobs = [EmbedJob(T.tokenize(tok, texts[i : i + per], sink=sink)) for i in range(0, n, per)]
    for job in jobs:
        engine.batches.add(job)
    torch.cuda.synchronize()
    prof = cProfile.Profile() if profile else None
    start = time.perf_counter()
    with torch.inference_mode():
        if prof:
            prof.enable()
        while any(not j.future.done() for j in jobs):
            engine.batches.step()
        if prof:
            prof.disable()
    torch.cuda.synchronize()
    took = time.perf_counter() - start
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    return took


for n, per in [(32, 1), (32, 1), (32, 32), (128, 1), (128, 128), (128, 1), (128, 128)]:
    took = step(n, per)
    print(f"{n} texts in {n // per} requests: {took * 1000:.1f} ms ({n / took:,.0f} texts/s)", flush=True)
for n in (1, 8, 16, 32, 48, 64, 96, 128):
    took = sorted(step(n, 1) for _ in range(7))[3]
    print(f"batch of {n} one-text requests: median {took * 1000:.2f} ms ({n / took:,.0f} texts/s)", flush=True)
if args.torch_profile:
    from torch.profiler import ProfilerActivity, profile

    step(64, 1)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step(64, 1)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12))
tokens = T.tokenize(tok, texts[:128], sink=sink)
for _ in range(3):
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.inference_mode():
        encoder.encode_tokens(tokens)
    torch.cuda.synchronize()
    print(f"encode_tokens of 128 texts: {(time.perf_counter() - start) * 1000:.1f} ms")
for _ in range(2):
    start = time.perf_counter()
    encoder.encode(texts[:1024], batch_size=128, show_progress_bar=False)
    print(f"encode() of 1024 texts: {(time.perf_counter() - start) * 1000:.1f} ms")
step(32, 1, profile=True)
