"""Issue 57, call 2: where a fresh process's first encode() call loses its time without graphs, and what compiling
costs with a cold and a warm compiler cache. One mode per fresh process (see call2.sh).

    python benchmarks/results/cold-start/diag.py MODE FOLDER [N]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_texts_gpu import texts_of

from nosink import EncoderFromDecoder


def main() -> None:
    mode, folder = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
    texts = texts_of(n)
    if mode == "cudnn-off":
        torch.backends.cuda.enable_cudnn_sdp(False)
    graphs = mode in ("compile", "default")
    t0 = time.perf_counter()
    encoder = EncoderFromDecoder.from_pretrained(
        folder, spec="F* | M0B*12", dtype=torch.bfloat16, device="cuda", cuda_graphs=graphs
    )
    print(
        f"{mode}: loaded in {time.perf_counter() - t0:.2f} s; cudnn sdp {torch.backends.cuda.cudnn_sdp_enabled()}, "
        f"flash {torch.backends.cuda.flash_sdp_enabled()}, "
        f"mem-efficient {torch.backends.cuda.mem_efficient_sdp_enabled()}"
    )
    if mode == "compile":
        t0 = time.perf_counter()
        encoder.warm_up()
        print(f"  warm_up (compile): {time.perf_counter() - t0:.2f} s")
    if mode == "profile":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            encoder.encode(texts, batch_size=128, show_progress_bar=False)
            print(f"  first call (profiled): {time.perf_counter() - t0:.2f} s")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=70))
    else:
        t0 = time.perf_counter()
        encoder.encode(texts, batch_size=128, show_progress_bar=False)
        print(f"  first call: {time.perf_counter() - t0:.2f} s")
    for i in range(2):
        t0 = time.perf_counter()
        encoder.encode(texts, batch_size=128, show_progress_bar=False)
        print(f"  call {i + 2}: {time.perf_counter() - t0:.2f} s  {encoder.graph_counts()}")


if __name__ == "__main__":
    main()
