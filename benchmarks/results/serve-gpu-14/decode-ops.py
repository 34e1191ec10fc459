"""How many operations that launch work a chat's decode step runs, per layer: transformers' layers as the server's
decode step calls them (``nosink.serve.kv.Rows.step``, eager), counted by torch's profiler on the CPU.

On a GPU each such operation is at least one kernel, and a CUDA graph replays them one after the other; at a few
microseconds a kernel for a few rows, their count sets the step's time. Views (reshape, transpose, slice, ...)
launch nothing and are left out. Run from the checkout root: ``python benchmarks/results/serve-gpu-14/decode-ops.py``.
"""

import sys
from collections import Counter
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
import transformers as tf
from test_serve_chat import CONFIGS
from tiny import tiny_tokenizer

from nosink.serve import kv

VIEWS = {"view", "reshape", "unsqueeze", "transpose", "slice", "select", "expand", "detach_", "lift_fresh",
         "alias", "as_strided", "permute", "contiguous", "squeeze", "t", "_unsafe_view"}  # fmt: skip


def operations(family: str, layers: int) -> list[str]:
    """The operations that launch work (views left out) in one decode step of 2 chats, a tiny ``family`` LM of
    ``layers`` layers in bfloat16 (as served: the norms' float32 casts are real copies)."""
    config = CONFIGS[family]()
    config.vocab_size, config.num_hidden_layers = len(tiny_tokenizer()), layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = config.layer_types[:1] * layers
    torch.manual_seed(0)
    lm = tf.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    with torch.inference_mode():
        incoming, rows = kv.Rows(lm, graphs=False), kv.Rows(lm, graphs=False)
        incoming.prefill([[1, 5, 6, 7], [1, 8, 9]])
        rows.join([incoming])
        rows.step([10, 11])
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            rows.step([12, 13])
    top = [
        e.name.removeprefix("aten::")
        for e in prof.events()
        if e.name.startswith("aten::") and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))
    ]
    return [name for name in top if name not in VIEWS]


def main() -> None:
    for family in ("qwen2", "llama"):
        four, eight = operations(family, 4), operations(family, 8)
        per_layer = (len(eight) - len(four)) / 4
        fixed = len(four) - 4 * per_layer
        print(f"{family}: {per_layer:.0f} operations that launch work a layer, {fixed:.0f} a step besides "
              f"(one decode step of 2 chats: {len(four)} at 4 layers, {len(eight)} at 8)")  # fmt: skip
        layer = Counter(eight) - Counter(four)
        print("   a layer:", ", ".join(f"{name} {n // 4}" for name, n in layer.most_common()))
        besides = Counter(four) - layer  # `layer` holds 4 layers' operations: what 4 layers run besides them
        print("   besides:", ", ".join(f"{name} {n}" for name, n in besides.most_common()))


if __name__ == "__main__":
    main()
