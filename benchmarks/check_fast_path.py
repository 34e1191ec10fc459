"""The fast attention path against the dense-mask path on any device, in float32, on the tiny test models.

The CPU tests (tests/test_fast_attention.py) cover CPU; this runs the same comparison where the fast
path takes CUDA-only kernels (variable-length attention for padded bidirectional layers, fp16/bf16 only).
In bf16 it compares each route and the dense mask with a float32 dense reference: the fast route is exact
when its error is of the size of the dense path's own rounding error. Padded batches are checked both on
the padded layout and packed (``pack_padding=True``: real tokens only, the variable-length kernel in bf16).
On CUDA it also counts host-device synchronisations inside the layer loop (``torch.cuda.set_sync_debug_mode``).

    python benchmarks/check_fast_path.py --device cuda
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from tiny import CONFIGS, tiny_decoder

from nosink import EncoderFromDecoder
from nosink.layerspec import Kind, build_mask
from nosink.models.attention import Layout, Packed, Route, attend

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
    for pack in (False, True):
        worst = 0.0
        for family in sorted(CONFIGS):
            model = tiny_decoder(family).to(args.device)
            for spec in SPECS:
                for side, mask in masks.items():
                    real = mask.to(args.device).bool()
                    with torch.inference_mode():
                        fast = EncoderFromDecoder(model, spec, fast_attention=True, pack_padding=pack)
                        a = fast(ids, mask).last_hidden_state
                        b = EncoderFromDecoder(model, spec, fast_attention=False)(ids, mask).last_hidden_state
                    diff = (a - b)[real].abs().max().item()
                    worst = max(worst, diff)
                    if diff > 1e-4:
                        print(f"{family} {spec!r} {side}: max |fast - dense| = {diff:.2e}")
        print(f"float32 on {args.device}, {'packed' if pack else 'padded layout'}: {len(CONFIGS)} families x "
              f"{len(SPECS)} specs x {len(masks)} paddings, max |fast - dense| over real tokens = "
              f"{worst:.2e}")  # fmt: skip
    half(args.device)
    if args.device.startswith("cuda"):
        syncs(args.device)


def syncs(device: str) -> None:
    """Host-device synchronisations inside the layer loop (after the batch is prepared), per route."""
    import warnings

    model = tiny_decoder("llama", dtype=torch.bfloat16).to(device)  # no sliding window: every padded batch packs
    counts: dict[str, int] = {}
    original = EncoderFromDecoder._run

    def watched(self, *a, **kw):
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = original(self, *a, **kw)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        counts["n"] = counts.get("n", 0) + sum("synchroniz" in str(w.message) for w in caught)
        return out

    EncoderFromDecoder._run = watched
    try:
        ids = torch.randint(3, 96, (4, 64), device=device)
        mask = torch.ones(4, 64, dtype=torch.long, device=device)
        mask[1, 40:], mask[2, 10:] = 0, 0
        print("host-device syncs inside the layer loop (bf16, llama tiny, 4 x 64 tokens):")
        for spec in ["F*", "F* | M0B*2", "F* | R*2", "M2F* | B", "F* | INTER(M1B*2)"]:
            row = []
            for label, m, pack in [("unpadded", torch.ones_like(mask), None), ("padded", mask, False),
                                   ("packed", mask, True)]:  # fmt: skip
                counts.clear()
                with torch.inference_mode():
                    EncoderFromDecoder(model, spec, fast_attention=True, pack_padding=pack)(ids, m)
                row.append(f"{label} {counts.get('n', 0)}")
            print(f"  {spec:>18}: " + ", ".join(row))
    finally:
        EncoderFromDecoder._run = original


def half(device: str, seq: int = 300) -> None:
    """bf16 routes and bf16 dense masks, each against a float32 dense reference."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(4, 8, seq, 64, generator=g)
    k, v = torch.randn(4, 2, seq, 64, generator=g), torch.randn(4, 2, seq, 64, generator=g)
    lengths = torch.tensor([seq, 211, 37, 1])
    right = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    print(f"bf16 on {device}, attention alone (4 x 8/2 heads x {seq} x 64): max error to a float32 dense reference "
          "over real queries (packed: the padded batch's real tokens as one stream)")  # fmt: skip
    for side, mask in {"none": torch.ones(4, seq, dtype=torch.long), "right": right, "left": right.flip(-1)}.items():
        for kind in [Kind("F"), Kind("B"), Kind("R"), Kind("F", 0), Kind("B", 0), Kind("B", 3), Kind("B", 150)]:
            dense = build_mask(kind, mask)
            kr, vr = k.repeat_interleave(4, 1), v.repeat_interleave(4, 1)
            ref = F.scaled_dot_product_attention(q, kr, vr, attn_mask=dense).transpose(1, 2)
            half_in = [x.to(device, torch.bfloat16) for x in (q, k, v)]
            fast = attend(*half_in, Route(kind, Layout(mask.to(device)))).float().cpu()
            masked = F.scaled_dot_product_attention(
                half_in[0], kr.to(device, torch.bfloat16), vr.to(device, torch.bfloat16), attn_mask=dense.to(device)
            )
            masked = masked.transpose(1, 2).float().cpu()
            real = mask.bool()  # padding rows are their own value: compare real queries
            packed = Packed(mask.to(device))

            def pack(x, packed=packed):  # (B, H, T, D) -> (1, H, N, D)
                return packed.pack(x.transpose(1, 2)).transpose(1, 2)

            streamed = attend(*(pack(x) for x in half_in), Route(kind, packed))[0].float().cpu()  # (N, H, D)
            packed_err = (streamed - ref[real]).abs().max().item()
            print(f"  {side:>5} {kind!s:>5}: fast {(fast - ref)[real].abs().max().item():.1e}, "
                  f"packed {packed_err:.1e}, dense {(masked - ref)[real].abs().max().item():.1e}")  # fmt: skip


if __name__ == "__main__":
    main()
