# ruff: noqa: E402, E501  (a one-off diagnostic kept as it ran: imports after the path setup, long report lines)
"""Where encode()'s time goes on the GPU machine: variants of encode() against the forward alone, and profiles."""

import cProfile
import io
import os
import pstats
import statistics
import sys
import time

import torch

DEV = os.environ.get("DEV", "cuda")
if DEV == "cpu":
    torch.cuda.synchronize = lambda: None
sys.path.insert(0, sys.argv[1])  # the benchmarks folder
from bench_encoder import _model, synthetic_texts
from transformers import AutoTokenizer

from nosink import EncoderFromDecoder
from nosink.models import encoder as enc_mod
from nosink.models import texts as T

tok = AutoTokenizer.from_pretrained(sys.argv[2])
model = _model(os.environ.get("ARCH", "qwen2.5-0.5b"), DEV, torch.bfloat16 if DEV == "cuda" else torch.float32)
texts = synthetic_texts(int(os.environ.get("N", 8192)))
B = 128
encoder = EncoderFromDecoder(model, "F*", tok)
tokens = T.tokenize(tok, texts, None, sink=encoder.sink_ids(), max_length=512)
groups = T.batches(tokens.lengths, B)
pid = T.pad_id(tok)
on_dev = [(p.input_ids.to(DEV), p.attention_mask.to(DEV)) for p in (T.pad(tokens, r, pid) for r in groups)]


def fwd():
    with torch.inference_mode():
        for ids, m in on_dev:
            encoder(ids, m)


def enc():
    encoder.encode(texts, batch_size=B, show_progress_bar=False)


def enc_tokens():
    for r in groups:
        encoder.encode_tokens(tokens, r)


def enc_onechunk():
    old = enc_mod.ENCODE_CHUNK_BATCHES
    enc_mod.ENCODE_CHUNK_BATCHES = 10**6
    try:
        enc()
    finally:
        enc_mod.ENCODE_CHUNK_BATCHES = old


def enc_nooverlap():
    f = EncoderFromDecoder._tokenizes_in_chunks
    EncoderFromDecoder._tokenizes_in_chunks = lambda self, d: False
    try:
        enc()
    finally:
        EncoderFromDecoder._tokenizes_in_chunks = f


def tokenize_only():
    for chunk in T.Chunks(
        tok, texts, None, sink=encoder.sink_ids(), max_length=512, first=B, size=64 * B, prefetch=True, offsets=False
    ):
        for t in chunk.prompts:
            for r in T.batches(t.lengths, B):
                T.pad(t, r, pid, pin_memory=DEV == "cuda")


import gc


def enc_nogc():
    gc.disable()
    try:
        enc()
    finally:
        gc.enable()


fns = [fwd, enc_tokens, enc, enc_nogc, tokenize_only]
for f in fns:
    f()
times = {f.__name__: [] for f in fns}
for _ in range(5):
    for f in fns:
        torch.cuda.synchronize()
        t = time.perf_counter()
        f()
        torch.cuda.synchronize()
        times[f.__name__].append(time.perf_counter() - t)
base = statistics.median(times["fwd"])
for name, ts in times.items():
    m = statistics.median(ts)
    print(
        f"{name:15s} {len(texts) / m:8,.0f} texts/s  {m / len(groups) * 1e3:6.2f} ms/batch  x{base / m:.2f} of fwd   all: {[round(t, 3) for t in ts]}"
    )


# padding of encode()'s batches vs globally sorted
def padfrac(groups_, toks):
    real = sum(toks.lengths[i] for g in groups_ for i in g)
    full = sum(max(toks.lengths[i] for i in g) * len(g) for g in groups_)
    return 1 - real / full


print(f"padding, global sort: {padfrac(groups, tokens):.3f}")
fr = []
for chunk in T.Chunks(tok, texts, None, sink=encoder.sink_ids(), max_length=512, first=B, size=64 * B):
    t = chunk.prompts[0]
    gs = T.batches(t.lengths, B)
    fr.append((sum(t.lengths), sum(max(t.lengths[i] for i in g) * len(g) for g in gs)))
print(f"padding, chunk sort: {1 - sum(a for a, _ in fr) / sum(b for _, b in fr):.3f}")
if os.environ.get("PROFILE") != "1":
    sys.exit(0)
for f in (fwd, enc):
    pr = cProfile.Profile()
    torch.cuda.synchronize()
    pr.enable()
    f()
    torch.cuda.synchronize()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
    print(f"==== cProfile {f.__name__}")
    print(s.getvalue()[:6000])
from torch.profiler import ProfilerActivity, profile

for f in (fwd, enc):
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV == "cuda" else [])) as prof:
        f()
        torch.cuda.synchronize()
    print(f"==== torch.profiler {f.__name__}")
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=60))
    ev = prof.key_averages()
    gpu = sum(e.self_device_time_total for e in ev) / 1e3
    print(f"GPU kernel time total {gpu:.1f} ms")
