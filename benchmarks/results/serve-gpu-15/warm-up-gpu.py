"""What ``nosink serve --chat-compile`` does at start-up on a GPU, timed: ``kv.Rows(compiled=True).warm_up()``
(compiles the decode step of one chat and of several, and captures their CUDA graphs), then chats of 1, 8 and 16
rows, each first step and the next 50 timed, with the compilations torch counted after the warm-up (none is the
point: no chat waits for one). Random bf16 weights at a real shape (``benchmarks/bench_encoder.py``'s ARCHS). Run
from the checkout root with the package importable:
``python benchmarks/results/serve-gpu-15/warm-up-gpu.py --arch qwen2.5-0.5b``.
"""

import argparse
import sys
import time
from pathlib import Path

import torch
import transformers as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_encoder import ARCHS

from nosink.serve import kv


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--arch", default="qwen2.5-0.5b", choices=sorted(ARCHS))
    p.add_argument("--rows", type=int, default=16, help="the buffers' rows (the server's --max-active-chats)")
    args = p.parse_args()
    torch.manual_seed(0)
    with torch.device("cuda"):
        lm = tf.AutoModelForCausalLM.from_config(ARCHS[args.arch](), dtype=torch.bfloat16).eval()
    print(f"{args.arch} on {torch.cuda.get_device_name()}, torch {torch.__version__}, transformers {tf.__version__}")
    counters = torch._dynamo.utils.counters["stats"]
    with torch.inference_mode():
        rows = kv.Rows(lm, rows=args.rows, compiled=True)
        start = time.perf_counter()
        rows.warm_up()
        torch.cuda.synchronize()
        graphs = counters["unique_graphs"]
        print(f"warm_up: {time.perf_counter() - start:.1f} s, graphs compiled {graphs}, {rows.graph_counts()}")
        for n in (1, 8, 16):
            incoming = kv.Rows(lm)
            incoming.prefill([[1 + (7 * i + j) % 1000 for j in range(64)] for i in range(n)])
            rows.join([incoming])
            incoming.clear()
            start = time.perf_counter()
            rows.step([99] * n)
            torch.cuda.synchronize()
            first = time.perf_counter() - start
            start = time.perf_counter()
            for i in range(50):
                rows.step([100 + i] * n)
            torch.cuda.synchronize()
            ms = (time.perf_counter() - start) / 50 * 1e3
            print(
                f"{n:>2} chats: first step {first * 1e3:.1f} ms, then {ms:.2f} ms a step; graphs compiled since "
                f"warm_up: {counters['unique_graphs'] - graphs}; still compiling: {rows.compiling}",
                flush=True,
            )
            rows.clear()


if __name__ == "__main__":
    main()
