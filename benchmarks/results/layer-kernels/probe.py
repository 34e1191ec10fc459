"""What one decoder layer costs the GPU at the batch sizes a server makes: the kernels of one replayed batch.

On the Qwen2.5-0.5B and Llama-3.2-1B shapes (random bf16 weights, the tokenizer folder given), the encoder's own
batch step (``encode_batch``, CUDA graphs on, the layers compiled) at 21 and 128 rows after every bucket is
captured; then torch's profiler (CUDA activity) over one more such batch: each kernel in order with its GPU time,
one layer's kernels listed (the kernels between two flash-attention calls), the counts and times by kind. Then the
matrix products of one layer alone, as the layer makes them (q, k, v; gate, up) and merged (one qkv, one gate-up
product), replayed in a CUDA graph, to see what merging would save. From the checkout root:

    python benchmarks/results/layer-kernels/probe.py .gpu/tok
"""

import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1])]


def kind(name):
    if "flash" in name:
        return "attention"
    if "nvjet" in name or "gemm" in name or "cutlass" in name or "sm90" in name:
        return "matrix product"
    if name.startswith("triton"):
        return "compiled"
    if "elementwise" in name.lower() or "copy" in name.lower() or "fill" in name.lower():
        return "eager elementwise/copy"
    return "other"


def kernels_of(run):
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    events = [e for e in events if "Memcpy" not in e.name and "Memset" not in e.name] + [
        e for e in events if "Memcpy" in e.name or "Memset" in e.name
    ]
    events.sort(key=lambda e: e.time_range.start)
    return [(e.name, e.time_range.end - e.time_range.start, e.time_range.start) for e in events]


def layer_table(arch, tok, spec):
    import torch
    from bench_serve import corpus
    from bench_serve_gpu import build

    from nosink import EncoderFromDecoder
    from nosink.models import texts as _texts

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        build(arch, tok, folder, "bfloat16", "cuda")
        encoder = EncoderFromDecoder.from_pretrained(str(folder), spec=spec, dtype="bfloat16", device="cuda")
    encoder.warm_up()
    texts = corpus(4096)
    tokens = _texts.tokenize(encoder.tokenizer, texts, sink=encoder.sink_ids(), max_length=512)
    plans = [encoder.plan]
    layers = len(encoder.parts.layers)

    def launch(rows):
        out, _ = encoder.encode_batch(tokens, rows, plans, "mean", "right", False)
        return out

    print(f"\n## {arch}, `{spec}` ({layers} layers)\n")
    for n in (21, 128):
        batches = [list(range(i, i + n)) for i in range(0, 4096 - n, n)][:24]
        for _ in range(2):
            for rows in batches:
                launch(rows)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for rows in batches:
            launch(rows)
        torch.cuda.synchronize()
        per = (time.perf_counter() - t0) / len(batches)
        tokens_in = sum(len(tokens.prefix_ids[r]) + len(tokens.text_ids[r]) for r in batches[0])
        first = batches[0]
        ks = kernels_of(lambda: launch(first))  # noqa: B023 (called here, in this iteration)
        span = (ks[-1][2] + ks[-1][1] - ks[0][2]) / 1000 if ks else 0.0
        busy = sum(k[1] for k in ks) / 1000
        flash = [i for i, k in enumerate(ks) if kind(k[0]) == "attention"]
        print(
            f"### {n} rows ({tokens_in} tokens in the first batch): back to back {1000 * per:.2f} ms a batch; "
            f"profiled batch: {len(ks)} kernels, {len(ks) / layers:.1f} a layer, GPU busy {busy:.2f} of "
            f"{span:.2f} ms span\n"
        )
        by = Counter()
        for name, dur, _ in ks:
            by[kind(name)] += dur
        count = Counter(kind(k[0]) for k in ks)
        print("| kind | kernels | GPU us | us a layer |\n|---|---|---|---|")
        for k, us in by.most_common():
            print(f"| {k} | {count[k]} | {us:.0f} | {us / layers:.1f} |")
        if len(flash) >= 3:
            a, b = flash[len(flash) // 2], flash[len(flash) // 2 + 1]
            print(f"\none layer (kernels {a}..{b - 1}), in order:\n")
            print("| kernel | us | gap before, us |\n|---|---|---|")
            for i in range(a, b):
                name, dur, start = ks[i]
                gap = start - (ks[i - 1][2] + ks[i - 1][1])
                print(f"| {name[:110]} | {dur:.1f} | {gap:.1f} |")
        print()
    torch.cuda.empty_cache()


def merged_products():
    import torch

    print("\n## One layer's matrix products alone, separate and merged (CUDA graph of 20 layers' worth, bf16)\n")
    print("| shape | tokens | q,k,v separate us | qkv merged us | gate,up separate us | gate-up merged us |")
    print("|---|---|---|---|---|---|")
    shapes = {"qwen2.5-0.5b": (896, 896, 128, 4864, True), "llama-1b": (2048, 2048, 512, 8192, False)}
    for arch, (d, nq, nkv, inter, bias) in shapes.items():
        g = torch.Generator(device="cuda").manual_seed(0)
        wq, wk, wv, wg, wu = (_random(o, d, g) for o in (nq, nkv, nkv, inter, inter))
        bq, bk, bv = (torch.zeros(n, device="cuda", dtype=torch.bfloat16) if bias else None for n in (nq, nkv, nkv))
        wqkv, wgu = torch.cat([wq, wk, wv]), torch.cat([wg, wu])
        bqkv = torch.cat([bq, bk, bv]) if bias else None
        for t in (550, 3100):
            x = _random(t, d, g)
            runs = (
                [(x, wq, bq), (x, wk, bk), (x, wv, bv)],
                [(x, wqkv, bqkv)],
                [(x, wg, None), (x, wu, None)],
                [(x, wgu, None)],
            )
            row = [_graph_us(products) for products in runs]
            print(f"| {arch} | {t} | {row[0]:.1f} | {row[1]:.1f} | {row[2]:.1f} | {row[3]:.1f} |")


def _random(rows, cols, generator):
    import torch

    return torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16, generator=generator) * 0.02


def _graph_us(products):
    # The microseconds of one round of `products` (F.linear arguments), 20 rounds captured in one CUDA graph.
    import torch

    def run():
        return [torch.nn.functional.linear(*args) for args in products]

    for _ in range(3):
        run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(20):
            run()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(10):
            graph.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1000 / 200)
    return statistics.median(times)


def main():
    import torch

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    merged_products()
    layer_table("qwen2.5-0.5b", sys.argv[1], "F* | M0B*12")
    layer_table("llama-1b", sys.argv[1], "F*")


if __name__ == "__main__":
    main()
