"""Whether the chats' decode step (``nosink.serve.kv.Rows._forward``: transformers' forward over the server's own KV
cache) compiles whole with ``torch.compile(dynamic=True)`` and gives the eager step's logits: a tiny Qwen2 LM on the
CPU, two chats, three steps, each compared with the same step of an uncompiled copy of the cache. Groundwork for a
decode step with fewer kernels (``decode-ops.txt``); its time on a GPU is not measured here.
Run from the checkout root: ``python benchmarks/results/serve-gpu-14/decode-compile-cpu.py``.
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from test_serve_chat import SEEDS, tiny_lm

from nosink.serve import kv


def main() -> None:
    lm, _ = tiny_lm("qwen2", SEEDS["qwen2"])
    with torch.inference_mode():
        incoming = kv.Rows(lm, graphs=False)
        incoming.prefill([[1, 5, 6, 7], [1, 8, 9]])
        compiled, eager = kv.Rows(lm, graphs=False), kv.Rows(lm, graphs=False)
        compiled.join([incoming])
        eager.join([incoming])
        compiled._forward = torch.compile(compiled._forward, dynamic=True)  # type: ignore[method-assign]
        start = time.perf_counter()
        for step in range(3):
            a, b = compiled.step([10 + step, 11 + step]), eager.step([10 + step, 11 + step])
            took = time.perf_counter() - start
            print(
                f"step {step}: largest difference of the logits {(a - b).abs().max().item():.1e}, {took:.1f} s so far"
            )
    counters = torch._dynamo.utils.counters
    print(
        f"graphs compiled: {counters['stats']['unique_graphs']}, graph breaks: {sum(counters['graph_break'].values())}"
    )


if __name__ == "__main__":
    main()
