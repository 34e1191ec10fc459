"""encode()'s host side on a GPU machine: each batch's vectors added at their texts' rows by torch's index_add_
(before) or numpy on one thread (after), interleaved in one process, and the add alone at the shapes of a pass.

python benchmarks/results/encode-accumulate/probe.py --arch llama-1b --tokenizer TOKENIZER_DIR
"""

import argparse
import inspect
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_texts_gpu import PEAKS, _model, flops_per_token, texts_of

import nosink.models.encoding as encoding
from nosink.models import EncoderFromDecoder

p = argparse.ArgumentParser()
p.add_argument("--arch", default="llama-1b")
p.add_argument("--tokenizer", required=True)
p.add_argument("--texts", type=int, default=8192)
p.add_argument("--repeats", type=int, default=5)
args = p.parse_args()

after = encoding.encode_texts
line = "totals[:, done.key.numpy()] += done.vectors.numpy()"
source = inspect.getsource(after)
assert line in source
namespace = dict(vars(encoding))
exec(
    "from __future__ import annotations\n" + source.replace(line, "sums.index_add_(1, done.key, done.vectors)"),
    namespace,
)
before = namespace["encode_texts"]

card = torch.cuda.get_device_name()
tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
model = _model(args.arch, "cuda", torch.bfloat16, vocab=len(tokenizer))
texts = texts_of(args.texts)
tokens = sum(len(ids) for ids in tokenizer(texts)["input_ids"])
per_token = flops_per_token(model, tokens / len(texts))
peak = next((v for k, v in PEAKS.items() if k in card), None)
width, half = model.config.hidden_size, model.config.num_hidden_layers // 2
print(f"{card}, {args.arch} (hidden {width}), {len(texts):,} texts, {tokens / len(texts):.1f} tokens each, batch 128, "
      f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads\n")  # fmt: skip

# The add alone: a pass's (1, texts, D) float32 sums, 128 rows a batch, at torch's default threads.
sums = torch.zeros(1, len(texts), width)
vectors = torch.randn(1, 128, width).pin_memory()
keys = [torch.arange(i, i + 128) for i in range(0, len(texts) - 127, 128)]
totals = sums.numpy()


def numpy_add(k: torch.Tensor) -> None:
    totals[:, k.numpy()] += vectors.numpy()


for name, add in [("torch index_add_", lambda k: sums.index_add_(1, k, vectors)), ("numpy +=", numpy_add)]:
    for k in keys[:8]:
        add(k)
    start = time.perf_counter()
    for k in keys:
        add(k)
    print(f"- {name}: {(time.perf_counter() - start) / len(keys) * 1000:.3f} ms a batch of 128")
print()

print("| spec | add | texts/s (median) | passes [min, max] | MFU |")
print("|---|---|---|---|---|")
for spec in ("F*", f"F* | M0B*{half}"):
    encoder = EncoderFromDecoder(model, spec, tokenizer)
    times: dict[str, list[float]] = {"index_add_ (before)": [], "numpy (after)": []}
    fns = {"index_add_ (before)": before, "numpy (after)": after}
    for i in range(2 + args.repeats):
        for name, fn in fns.items():
            encoding.encode_texts = fn
            torch.cuda.synchronize()
            start = time.perf_counter()
            encoder.encode(texts, batch_size=128, show_progress_bar=False)
            torch.cuda.synchronize()
            if i >= 2:
                times[name].append(time.perf_counter() - start)
    for name, took in times.items():
        rate = len(texts) / statistics.median(took)
        each = sorted(len(texts) / t for t in took)
        mfu = f"{rate * tokens / len(texts) * per_token / peak:.1%}" if peak else "-"
        shown = spec.replace("|", "\\|")
        print(f"| `{shown}` | {name} | {rate:,.0f} | {each[0]:,.0f} - {each[-1]:,.0f} | {mfu} |", flush=True)
encoding.encode_texts = after
