"""The chats' decode step on a GPU, as the server runs it (``nosink.serve.kv.Rows``, its CUDA graph replayed), as
it is (``eager``) and with ``compiled=True`` (the whole forward through ``torch.compile(dynamic=True)`` before the
capture: ``whole``): milliseconds a step for 1, 8 and 16 chats at 64 tokens of prompt, the first step's time
(compilation and capture; here the prompts' prefill is compiled too, which the server does not do), and whether the
logits match the first mode's. Random bf16 weights at a real shape (``benchmarks/bench_encoder.py``'s ARCHS). Run
from the checkout root with the package importable:
``python benchmarks/results/serve-gpu-15/decode-step-gpu.py --arch qwen2.5-0.5b``.
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


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed_steps(rows: kv.Rows, n: int, steps: int) -> tuple[float, torch.Tensor]:
    """Milliseconds a step over ``steps`` steps (after 3 unmeasured ones), and the last step's logits."""
    for i in range(3):
        rows.step([100 + i] * n)
    sync()
    start = time.perf_counter()
    for i in range(steps):
        logits = rows.step([200 + i % 50] * n)
    sync()
    return (time.perf_counter() - start) / steps * 1e3, logits


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--arch", default="qwen2.5-0.5b", choices=sorted(ARCHS))
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--device", default="cuda", help="cpu: only to try the script")
    p.add_argument("--modes", nargs="+", default=["eager", "whole"], choices=["eager", "whole"])
    p.add_argument("--chats", nargs="+", type=int, default=[1, 8, 16])
    args = p.parse_args()
    torch.manual_seed(0)
    with torch.device(args.device):
        lm = tf.AutoModelForCausalLM.from_config(ARCHS[args.arch](), dtype=torch.bfloat16).eval()
    card = torch.cuda.get_device_name() if args.device == "cuda" else "the CPU"
    print(f"{args.arch} on {card}, torch {torch.__version__}, transformers {tf.__version__}")
    with torch.inference_mode():
        for n in args.chats:
            prompts = [[1 + (7 * i + j) % 1000 for j in range(64)] for i in range(n)]
            results = {}
            for mode in args.modes:
                compiled = mode == "whole"
                start = time.perf_counter()
                rows, incoming = kv.Rows(lm, rows=n, compiled=compiled), kv.Rows(lm, compiled=compiled)
                incoming.prefill(prompts)
                rows.join([incoming])
                incoming.clear()
                rows.step([99] * n)  # the first step: compiles (where asked) and captures
                sync()
                first = time.perf_counter() - start
                ms, logits = timed_steps(rows, n, args.steps)
                results[mode] = logits
                graphs = rows.graph_counts()
                print(
                    f"{n:>2} chats, {mode:<8}: {ms:6.2f} ms a step ({n / ms * 1e3:7.0f} tokens/s), "
                    f"first step {first:5.1f} s, graphs {graphs}"
                )
            for mode in args.modes[1:]:
                diff = (results[mode] - results[args.modes[0]]).abs().max().item()
                same = (results[mode].argmax(-1) == results[args.modes[0]].argmax(-1)).float().mean().item()
                print(
                    f"   {mode} against {args.modes[0]}: largest difference of the last logits {diff:.3g}, "
                    f"same greedy token {same:.0%}"
                )


if __name__ == "__main__":
    main()
