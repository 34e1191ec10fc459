# ruff: noqa: B023 (each closure runs within its loop pass)
"""Attention over a packed stream of short rows, by kernel: what one layer's attention costs on a batch of
``encode()`` (sorted texts of about 24 tokens, 128 rows) and whether each kernel gives the flash kernel's output.

    python3 -P benchmarks/results/attention-probe/probe.py --tokenizer TOKENIZER_DIR

Kernels: the variable-length flash kernel as nosink calls it in a graph (rows bounded by a power of two),
cutlass' memory-efficient kernel with the same bounds (``aten._efficient_attention_forward``), FlexAttention
with a block mask of the rows (blocks of 128 and 64 tokens), and SDPA on the rows padded to one length.
Causal (``F``) and full (``B``) windows; times are the median of 50 calls after 10, CUDA events.
"""

import argparse
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_texts_gpu import texts_of

SHAPES = {"llama-1b": (32, 8, 64), "qwen2.5-0.5b": (14, 2, 64)}


def timed(fn, n: int = 50) -> float:
    for _ in range(10):
        fn()
    times = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--batch", type=int, default=128)
    args = p.parse_args()
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from torch.nn.attention.varlen import varlen_attn
    from transformers import AutoTokenizer

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("efficient op:", torch.ops.aten._efficient_attention_forward.default._schema)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    lengths_all = sorted(len(ids) + 1 for ids in tokenizer(texts_of(8192))["input_ids"])  # + the sink token
    flex = torch.compile(flex_attention, dynamic=False)
    dev = "cuda"
    for arch, (h, hkv, d) in SHAPES.items():
        print(f"\n## {arch}: {h} query heads, {hkv} key/value heads, head size {d}; batch of {args.batch} rows\n")
        print("| rows (tokens) | window | flash varlen (nosink) | mem-efficient varlen | flex, blocks 128 | "
              "flex, blocks 64 | flex mask build | SDPA padded (+ pad/unpad) | max |diff| to flash |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|")
        for where in (0.1, 0.9):
            at = int(where * (len(lengths_all) - args.batch))
            lengths = lengths_all[at : at + args.batch][::-1]
            n = sum(lengths)
            bound = max(16, 2 ** math.ceil(math.log2(max(lengths))))
            cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=dev)
            torch.manual_seed(0)
            q = torch.randn(n, h, d, device=dev, dtype=torch.bfloat16)
            k = torch.randn(n, hkv, d, device=dev, dtype=torch.bfloat16)
            v = torch.randn(n, hkv, d, device=dev, dtype=torch.bfloat16)
            doc = torch.repeat_interleave(torch.arange(len(lengths), device=dev), torch.tensor(lengths, device=dev))
            for window, causal in (("F", True), ("B", False)):
                win = (-1, 0) if causal else (-1, -1)
                ref = varlen_attn(q, k, v, cu, cu, bound, bound, window_size=win)
                t_flash = timed(lambda: varlen_attn(q, k, v, cu, cu, bound, bound, window_size=win))
                cells, diffs = [], []

                def eff():
                    kk, vv = (x.repeat_interleave(h // hkv, dim=1) for x in (k, v))
                    return torch.ops.aten._efficient_attention_forward(
                        q[None], kk[None], vv[None], None, cu, cu, bound, bound, 0.0, 2 if causal else 0, False
                    )[0][0]

                try:
                    diffs.append((eff().float() - ref.float()).abs().max().item())
                    cells.append(f"{timed(eff):.1f}")
                except Exception as err:
                    cells.append(f"failed: {type(err).__name__}: {str(err)[:60]}")

                def mask_mod(b, hh, qi, ki):
                    same = doc[qi] == doc[ki]
                    return same & (qi >= ki) if causal else same

                qt, kt, vt = (x.transpose(0, 1)[None] for x in (q, k, v))
                build_ms = None
                for block in (128, 64):
                    try:
                        mask = create_block_mask(mask_mod, None, None, n, n, device=dev, BLOCK_SIZE=block)
                        if block == 128:
                            build_ms = timed(
                                lambda: create_block_mask(mask_mod, None, None, n, n, device=dev, BLOCK_SIZE=128), 10
                            )

                        def run(mask=mask):
                            return flex(qt, kt, vt, block_mask=mask, enable_gqa=True)

                        out = run()[0].transpose(0, 1)
                        diffs.append((out.float() - ref.float()).abs().max().item())
                        cells.append(f"{timed(run):.1f}")
                    except Exception as err:
                        cells.append(f"failed: {type(err).__name__}: {str(err)[:60]}")
                cells.append(f"{build_ms:.0f}" if build_ms else "-")
                longest = max(lengths)
                index = torch.arange(n, device=dev)  # the rows lie one after another
                rowpos = torch.cat([torch.arange(L, device=dev) for L in lengths])
                rowid = doc

                def padded():
                    qp = q.new_zeros(len(lengths), longest, h, d)
                    kp = k.new_zeros(len(lengths), longest, hkv, d)
                    vp = v.new_zeros(len(lengths), longest, hkv, d)
                    qp[rowid, rowpos], kp[rowid, rowpos], vp[rowid, rowpos] = q[index], k[index], v[index]
                    valid = torch.zeros(len(lengths), longest, dtype=torch.bool, device=dev)
                    valid[rowid, rowpos] = True
                    mask = valid[:, None, None, :]
                    if causal:
                        mask = mask & torch.ones(longest, longest, dtype=torch.bool, device=dev).tril()
                    o = F.scaled_dot_product_attention(
                        qp.transpose(1, 2), kp.transpose(1, 2), vp.transpose(1, 2), attn_mask=mask, enable_gqa=True
                    )
                    return o.transpose(1, 2)[rowid, rowpos]

                try:
                    diffs.append((padded().float() - ref.float()).abs().max().item())
                    cells.append(f"{timed(padded):.1f}")
                except Exception as err:
                    cells.append(f"failed: {type(err).__name__}: {str(err)[:60]}")
                worst = max(diffs) if diffs else float("nan")
                head = f"| {len(lengths)} of {min(lengths)}-{max(lengths)} ({n}) | {window} | {t_flash:.1f} | "
                print(head + " | ".join(cells) + f" | {worst:.1e} |", flush=True)
    print("\ntimes in microseconds a call; the mask build is once a batch (shared by every layer)")


if __name__ == "__main__":
    main()
