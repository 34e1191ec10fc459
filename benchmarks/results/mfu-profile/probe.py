"""Where an encode() pass of short texts spends the GPU's time (issue 28's MFU target): texts/s and model-FLOPs
utilization at two batch sizes, then one pass under torch.profiler with the GPU's kernel time by kind and the
share of a plain pass's time in which the GPU runs some kernel (the profiled pass's kernel time over the
median unprofiled pass's wall time).

    python3 -P benchmarks/results/mfu-profile/probe.py --tokenizer TOKENIZER_DIR --archs llama-1b qwen2.5-0.5b
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_encoder import _model
from bench_texts_gpu import PEAKS, flops_per_token, texts_of

from nosink import EncoderFromDecoder

KINDS = (
    ("matrix products", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "splitk")),
    ("attention", ("flash", "fmha", "attention")),
    ("compiled (triton)", ("triton",)),
    ("copies and fills", ("memcpy", "memset")),
)


def kind_of(name: str, cat: str) -> str:
    low = f"{cat} {name}".lower()
    for kind, marks in KINDS:
        if any(mark in low for mark in marks):
            return kind
    return "other (eager torch kernels)"


def profile(fn) -> dict:
    """One call of ``fn`` under the profiler: the GPU's busy time by kind, its idle share, the top kernels."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    torch.cuda.synchronize()
    with profiler(activities=[ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.loads(Path(f.name).read_text())
    spans, by_kind, by_name = [], {}, {}
    for ev in trace.get("traceEvents", []):
        cat = str(ev.get("cat", ""))
        if cat not in ("kernel", "gpu_memcpy", "gpu_memset") or "dur" not in ev:
            continue
        start_us, dur = float(ev["ts"]), float(ev["dur"])
        spans.append((start_us, start_us + dur))
        kind = kind_of(ev.get("name", ""), cat)
        by_kind[kind] = by_kind.get(kind, 0.0) + dur
        key = ev.get("name", "")[:90]
        count, total = by_name.get(key, (0, 0.0))
        by_name[key] = (count + 1, total + dur)
    spans.sort()
    busy, end = 0.0, None
    for a, b in spans:
        if end is None or a > end:
            busy += b - a
            end = b
        elif b > end:
            busy += b - end
            end = b
    first, last = spans[0][0], max(b for _, b in spans)
    return {
        "wall_ms": wall * 1000, "kernel_span_ms": (last - first) / 1000, "busy_ms": busy / 1000,
        "by_kind_ms": {k: v / 1000 for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top": sorted(((v[1] / 1000, v[0], k) for k, v in by_name.items()), reverse=True)[:15],
        "kernels": len(spans),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--archs", nargs="+", default=["llama-1b", "qwen2.5-0.5b"])
    p.add_argument("--texts", type=int, default=8192)
    p.add_argument("--batches", type=int, nargs="+", default=[128, 512])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    from transformers import AutoTokenizer

    card = torch.cuda.get_device_name()
    peak = next((v for k, v in PEAKS.items() if k in card), None)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    texts = texts_of(args.texts)
    tokens = sum(len(ids) for ids in tokenizer(texts)["input_ids"])
    print(f"{card}, torch {torch.__version__}; {len(texts):,} texts, {tokens / len(texts):.1f} tokens each")
    out = {"card": card, "torch": torch.__version__, "rows": []}
    for arch in args.archs:
        model = _model(arch, "cuda", torch.bfloat16, vocab=len(tokenizer))
        per_token = flops_per_token(model, tokens / len(texts))
        half = model.config.num_hidden_layers // 2
        runs = {}
        for spec in ("F*", f"F* | M0B*{half}"):
            encoder = EncoderFromDecoder(model, spec, tokenizer)
            for batch in args.batches:
                runs[(spec, batch)] = lambda e=encoder, b=batch: e.encode(texts, batch_size=b, show_progress_bar=False)
        times = {key: [] for key in runs}
        for _ in range(2):
            for fn in runs.values():
                fn()
        for _ in range(args.repeats):
            for key, fn in runs.items():
                torch.cuda.synchronize()
                start = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                times[key].append(time.perf_counter() - start)
        print(f"\n## {arch} shape ({per_token / 1e9:.3f} GFLOP a token), median of {args.repeats} interleaved passes\n")
        print("| spec | batch | texts/s | MFU | GPU busy | kernels | by kind (ms of GPU time in one pass) |")
        print("|---|---|---|---|---|---|---|")
        for key, fn in runs.items():
            rate = len(texts) / statistics.median(times[key])
            mfu = rate * tokens / len(texts) * per_token / peak if peak else float("nan")
            prof = profile(fn)
            kinds = "; ".join(f"{k} {v:.1f}" for k, v in prof["by_kind_ms"].items())
            spec, batch = key
            wall = statistics.median(times[key]) * 1000  # the profiled pass is slower on the host: share of a plain one
            print(f"| `{spec.replace('|', chr(92) + '|')}` | {batch} | {rate:,.0f} | {mfu:.1%} | "
                  f"{prof['busy_ms']:.1f} of {wall:.1f} ms ({prof['busy_ms'] / wall:.0%}) | "
                  f"{prof['kernels']:,} | {kinds} |", flush=True)  # fmt: skip
            out["rows"].append({"arch": arch, "spec": spec, "batch": batch, "texts_per_s": rate, "mfu": mfu, **prof})
        for row in out["rows"]:
            if row["arch"] == arch and row["batch"] == args.batches[0]:
                print(f"\ntop kernels, `{row['spec']}` batch {row['batch']} (ms, calls, name):")
                for ms, count, name in row["top"]:
                    print(f"  {ms:8.2f} {count:6d}  {name}")
        del model, runs
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
