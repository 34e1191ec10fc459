"""M0B as one call against two on long and padded batches (the forward alone): issue 28's "no regression
elsewhere" rows. The same random bf16 model at the Qwen2.5-0.5B shape, `bench_encoder.batches`' inputs; the
median of 7 interleaved passes after 2 warm-ups (rows over 1,024 tokens replay no graph).

    python3 -P benchmarks/results/m0b-one-call/long.py
"""

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_encoder import _model, batches
from probe import two_calls

from nosink import EncoderFromDecoder

model = _model("qwen2.5-0.5b", "cuda", torch.bfloat16)
print("| shape | padding | `F*` tok/s | `F* \\| M0B*12` one call | two calls | one / two |\n|---|---|---|---|---|---|")
for seq, batch in ((8192, 2), (2048, 8), (512, 32)):
    for padding in (0.0, 0.3):
        data = batches(2, batch, seq, model.config.vocab_size, "cuda", padding=padding)
        tokens = sum(int(mask.sum()) for _, mask in data)
        runs = {
            "F*": (EncoderFromDecoder(model, "F*"), False),
            "one": (EncoderFromDecoder(model, "F* | M0B*12"), False),
            "two": (EncoderFromDecoder(model, "F* | M0B*12"), True),
        }
        times = {name: [] for name in runs}
        with torch.inference_mode():
            for rep in range(9):
                for name, (encoder, old) in runs.items():
                    with two_calls(old):
                        torch.cuda.synchronize()
                        start = time.perf_counter()
                        for ids, mask in data:
                            encoder(input_ids=ids, attention_mask=mask)
                        torch.cuda.synchronize()
                    if rep >= 2:
                        times[name].append(time.perf_counter() - start)
        rate = {name: tokens / statistics.median(t) for name, t in times.items()}
        f, one, two = rate["F*"], rate["one"], rate["two"]
        row = (
            f"| {seq} x {batch} | {padding:.0%} | {f:,.0f} | {one:,.0f} ({one / f:.2f}x) | {two:,.0f} ({two / f:.2f}x)"
        )

        print(f"{row} | {one / two:.3f} |", flush=True)
