"""The fast attention path against the dense-mask path on any device, in float32, on the tiny test models.

The CPU tests (tests/test_fast_attention.py) cover CPU; this runs the same comparison where the fast
path takes CUDA-only kernels (variable-length attention for padded bidirectional layers):

    python benchmarks/check_fast_path.py --device cuda
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from tiny import CONFIGS, tiny_decoder

from nosink import EncoderFromDecoder

SPECS = ["F*", "B*", "R*", "M0F*", "M0B*", "M2F*", "M2B*", "M9B*", "M20F*", "F | B | R | M1B", "F* | INTER(R*2)"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seq", type=int, default=37)
    args = p.parse_args()
    g = torch.Generator().manual_seed(0)
    seq = args.seq
    ids = torch.randint(3, 96, (4, seq), generator=g)
    masks = {"none": torch.ones(4, seq, dtype=torch.long)}
    right = torch.ones(4, seq, dtype=torch.long)
    right[1, 20:], right[2, 3:], right[3, 30:] = 0, 0, 0
    masks["right"], masks["left"] = right, right.flip(-1)
    worst = 0.0
    for family in sorted(CONFIGS):
        model = tiny_decoder(family).to(args.device)
        for spec in SPECS:
            for side, mask in masks.items():
                with torch.inference_mode():
                    a = EncoderFromDecoder(model, spec, fast_attention=True)(ids, mask).last_hidden_state
                    b = EncoderFromDecoder(model, spec, fast_attention=False)(ids, mask).last_hidden_state
                diff = (a - b).abs().max().item()
                worst = max(worst, diff)
                if diff > 1e-4:
                    print(f"{family} {spec!r} {side}: max |fast - dense| = {diff:.2e}")
    print(f"float32 on {args.device}: {len(CONFIGS)} families x {len(SPECS)} specs x {len(masks)} paddings, "
          f"max |fast - dense| = {worst:.2e}")  # fmt: skip


if __name__ == "__main__":
    main()
