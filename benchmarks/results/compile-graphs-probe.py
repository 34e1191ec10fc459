"""Probe (issue 28): do torch.compile-d layers inside the encoder's CUDA graphs raise encode()'s throughput?

Times ``encode()`` with CUDA graphs over uncompiled layers (``compile=False``) and with the default
(``compile=None``: the graphs' layer loop compiled at the first capture), same texts and model, then compares the
vectors; ``--everywhere`` adds ``compile=True``. Its first run, before ``compile=None`` existed, patched
``EncoderFromDecoder._graphs_apply`` to let ``compile=True`` replay graphs.

    python benchmarks/results/compile-graphs-probe.py --tokenizer TOK --arch qwen2.5-0.5b --specs "F*" "F* | M0B*12"
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_encoder import _model
from bench_texts_gpu import PEAKS, flops_per_token, texts_of

from nosink import EncoderFromDecoder

p = argparse.ArgumentParser()
p.add_argument("--arch", default="qwen2.5-0.5b")
p.add_argument("--tokenizer", required=True)
p.add_argument("--specs", nargs="+", default=["F*"])
p.add_argument("--texts", type=int, default=8192)
p.add_argument("--repeats", type=int, default=3)
p.add_argument("--everywhere", action="store_true", help="also compile=True (every layer call compiled)")
p.add_argument("--mode", default=None, help="torch.compile mode (default: its default)")
args = p.parse_args()


tok = AutoTokenizer.from_pretrained(args.tokenizer)
model = _model(args.arch, "cuda", torch.bfloat16, vocab=len(tok))
texts = texts_of(args.texts)
tokens = sum(len(ids) for ids in tok(texts)["input_ids"])
per_token = flops_per_token(model, tokens / len(texts))
peak = next((v for k, v in PEAKS.items() if k in torch.cuda.get_device_name()), None)
options = {} if args.mode is None else {"mode": args.mode}
print(
    f"{args.arch} on {torch.cuda.get_device_name()}, torch {torch.__version__}, {len(texts)} texts, compile {options}"
)
for spec in args.specs:
    runs = {
        "graphs": EncoderFromDecoder(model, spec, tok, compile=False),
        "graphs + compile": EncoderFromDecoder(model, spec, tok, **({"compile": options} if options else {})),
    }
    if args.everywhere:
        runs["compile=True"] = EncoderFromDecoder(model, spec, tok, compile=True)
    vectors, times = {}, {name: [] for name in runs}
    for name, enc in runs.items():
        start = time.perf_counter()
        for _ in range(2):
            vectors[name] = enc.encode(texts, batch_size=128, show_progress_bar=False, convert_to_tensor=True).float()
        torch.cuda.synchronize()
        print(f"  {spec} {name}: warm-up {time.perf_counter() - start:.1f} s", flush=True)
    for _ in range(args.repeats):
        for name, enc in runs.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            enc.encode(texts, batch_size=128, show_progress_bar=False)
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    base = len(texts) / statistics.median(times["graphs"])
    for name, took in times.items():
        rate = len(texts) / statistics.median(took)
        mfu = rate * tokens / len(texts) * per_token / peak if peak else float("nan")
        graphs = len(runs[name]._graphs.graphs) if runs[name]._graphs is not None else 0
        print(
            f"| {spec} | {name} | {rate:,.0f} texts/s | {rate / base:.2f}x | MFU {mfu:.1%} | {graphs} graphs |",
            flush=True,
        )
    a, b = vectors["graphs"], vectors["graphs + compile"]
    cos = torch.nn.functional.cosine_similarity(a, b, dim=-1)
    print(f"  vectors: max |diff| {(a - b).abs().max().item():.3g}, min cosine {cos.min().item():.6f}", flush=True)
