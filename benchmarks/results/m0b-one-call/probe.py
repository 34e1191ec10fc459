"""M0B layers as one variable-length call (segments sharing keys) against two (the rest, then each row's first
query): encode() texts/s in one process, passes interleaved, and the vectors of both against the dense mask.

    python3 -P benchmarks/results/m0b-one-call/probe.py --tokenizer TOKENIZER_DIR --archs qwen2.5-0.5b llama-1b

"Two calls" is the same code with ``varlen.takes_used_keys`` answering False while that encoder runs (its graphs
are captured, and its eager batches run, on the two-call route).
"""

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_encoder import _model
from bench_texts_gpu import texts_of

import nosink.models.varlen as varlen
from nosink import EncoderFromDecoder


@contextlib.contextmanager
def two_calls(on: bool):
    if not on:
        yield
        return
    original = varlen.takes_used_keys
    varlen.takes_used_keys = lambda: False
    try:
        yield
    finally:
        varlen.takes_used_keys = original


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--archs", nargs="+", default=["qwen2.5-0.5b", "llama-1b"])
    p.add_argument("--texts", type=int, default=8192)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    import inspect

    from torch.nn.attention.varlen import varlen_attn
    from transformers import AutoTokenizer

    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}; varlen_attn takes seqused_k: "
        f"{'seqused_k' in inspect.signature(varlen_attn).parameters}; takes_used_keys(): {varlen.takes_used_keys()}"
    )
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    texts = texts_of(args.texts)
    for arch in args.archs:
        model = _model(arch, "cuda", torch.bfloat16, vocab=len(tokenizer))
        half = model.config.num_hidden_layers // 2
        mixed = f"F* | B*{half // 2} | M0B*{half - half // 2}"
        rows = [
            ("F*", False), (f"F* | B*{half}", False), (f"F* | M0B*{half}", False), (f"F* | M0B*{half}", True),
            (mixed, False), (mixed, True),
        ]  # fmt: skip
        runs = {}
        for spec, old in rows:
            encoder = EncoderFromDecoder(model, spec, tokenizer)

            def run(encoder=encoder, old=old, some=None):
                with two_calls(old):
                    return encoder.encode(some or texts, batch_size=args.batch, show_progress_bar=False)

            runs[f"`{spec}`" + (", two calls" if old else "")] = run
        times = {name: [] for name in runs}
        for _ in range(2):
            for fn in runs.values():
                fn()
        for _ in range(args.repeats):
            for name, fn in runs.items():
                torch.cuda.synchronize()
                start = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                times[name].append(time.perf_counter() - start)
        rate = {name: len(texts) / statistics.median(t) for name, t in times.items()}
        print(f"\n## {arch} shape, random bf16 weights, {len(texts):,} texts, batch {args.batch}, median of "
              f"{args.repeats} interleaved passes after 2 warm-ups\n")  # fmt: skip
        print("| run | texts/s | passes [min, max] | / `F*` |\n|---|---|---|---|")
        for name, t in times.items():
            each = sorted(len(texts) / x for x in t)
            shown = name.replace("|", "\\|")
            ratio = rate[name] / rate["`F*`"]
            print(f"| {shown} | {rate[name]:,.0f} | {each[0]:,.0f} - {each[-1]:,.0f} | {ratio:.3f}x |")
        # Exactness: the vectors of 512 texts, one call and two, against the dense mask (no fast path, no graphs).
        some = texts[:512]
        for spec in (f"F* | M0B*{half}", mixed):
            dense = EncoderFromDecoder(model, spec, tokenizer, fast_attention=False, cuda_graphs=False)
            want = torch.as_tensor(dense.encode(some, batch_size=args.batch, show_progress_bar=False)).float()
            one = torch.as_tensor(runs[f"`{spec}`"](some=some)).float()
            two = torch.as_tensor(runs[f"`{spec}`, two calls"](some=some)).float()
            cos = torch.nn.functional.cosine_similarity
            print(f"\n`{spec}` vectors of 512 texts against the dense mask: one call max |diff| "
                  f"{(one - want).abs().max():.2e}, min cosine {cos(one, want).min():.6f}; two calls max |diff| "
                  f"{(two - want).abs().max():.2e}, min cosine {cos(two, want).min():.6f}; one against two max |diff| "
                  f"{(one - two).abs().max():.2e}")  # fmt: skip
        del model, runs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
