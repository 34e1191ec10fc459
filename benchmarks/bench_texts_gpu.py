"""Short texts on a GPU: encode() texts/s of every spec kind beside the stock model and sentence-transformers.

Small models on short texts are where the host, not the GPU, sets the pace. This runs, in one process on one
card, at a real architecture's shape with random weights (speed does not depend on their values) and a real
tokenizer, over the same texts (6-40 words, about 29 Qwen2.5 tokens each), at one batch size:

- stock: ``AutoModel`` on the tokenizer's padded batches, mean-pooled by hand, texts sorted by length as the
  other two sort them;
- sentence-transformers: the same model saved to a folder and loaded as a ``SentenceTransformer`` (mean pooling);
- nosink ``encode()`` for each spec, with CUDA graphs (the default: of the uncompiled layer loop, since a call of
  these texts does not repay compiling it) and without (``cuda_graphs=False``); for ``F*`` also ``compile=False``;
  with ``--warm-up`` also each spec after ``encoder.warm_up()`` (the graphs' layer loop compiled).

Each row is the median of ``--repeats`` passes after two warm-up passes (graphs are captured in the first),
rows interleaved pass by pass so that a slow spell of the machine hits each alike, and the order of the rows
turned by one each round (the row right after the stock rows ran 7-14% slow on an H200: see
``results/texts-gpu-final/``), so that with a multiple of the row count as ``--repeats`` each row runs in every
place equally often. Model-FLOPs utilization
counts the matrix products of one forward of the decoder's layers (``2 x`` their weights per token, plus
attention's ``4 x layers x width x length`` per token), divided by the card's dense bfloat16 peak; specs that run
extra layer passes (INTER) get no credit for them.

    python benchmarks/bench_texts_gpu.py --arch qwen2.5-0.5b --tokenizer PATH/TO/Qwen2.5-tokenizer
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_encoder import ARCHS, _model, synthetic_texts

from nosink import EncoderFromDecoder

PEAKS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense bf16 matrix throughput (SXM parts)

WORDS = (
    "the model reads every token of a sentence and writes one vector for it while the layers below keep their "
    "causal masks and the top layers look both ways so that each word sees what comes after it in the text "
    "retrieval benchmarks measure how often a relevant passage ranks first among thousands of candidates"
).split()


def texts_of(n: int, seed: int = 0) -> list[str]:
    """``n`` texts of 6 to 40 words (speed depends on length, not meaning)."""
    return synthetic_texts(n, seed, words=(6, 40), vocabulary=WORDS)


def specs_for(depth: int) -> list[str]:
    half = depth // 2
    return [
        "F*", f"F* | B*{half}", f"F* | R*{half}", f"F* | M0B*{half}", f"F* | M0F*{half}",
        f"F* | B*{half // 2} | M0B*{half - half // 2}", "F* | INTER(R*4)",
    ]  # fmt: skip


def flops_per_token(model: torch.nn.Module, mean_length: float) -> float:
    """Matrix-product FLOPs of one forward per token: the layers' weights, and attention over the mean length."""
    config = model.config
    weights = sum(p.numel() for name, p in model.named_parameters() if "layers." in name and p.ndim == 2)
    width = config.num_attention_heads * getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    return 2 * weights + 4 * config.num_hidden_layers * width * mean_length


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="qwen2.5-0.5b", choices=sorted(ARCHS))
    p.add_argument("--tokenizer", required=True, help="a tokenizer folder (Qwen2.5's in the committed runs)")
    p.add_argument("--texts", type=int, default=8192)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--specs", nargs="*", default=None, help="default: every spec kind at half the depth")
    p.add_argument("--no-st", action="store_true", help="leave sentence-transformers out")
    p.add_argument("--no-eager", action="store_true", help="leave out the runs without graphs or uncompiled")
    p.add_argument("--warm-up", action="store_true", help="also each spec after encoder.warm_up() (compiled graphs)")
    p.add_argument("--json", default=None, help="also write the rows here")
    args = p.parse_args()
    from transformers import AutoTokenizer

    device, dtype = "cuda", torch.bfloat16
    card = torch.cuda.get_device_name()
    peak = next((v for k, v in PEAKS.items() if k in card), None)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    model = _model(args.arch, device, dtype, vocab=len(tokenizer))
    texts = texts_of(args.texts)
    tokens = sum(len(ids) for ids in tokenizer(texts)["input_ids"])
    per_token = flops_per_token(model, tokens / len(texts))
    specs = args.specs or specs_for(model.config.num_hidden_layers)

    encoders: dict[str, EncoderFromDecoder] = {}
    runs: dict[str, object] = {"stock AutoModel, mean pool by hand": stock(model, tokenizer, texts, args.batch)}
    if not args.no_st:
        runs["sentence-transformers"] = sentence_transformers(model, tokenizer, texts, args.batch)
    for spec in specs:
        variants: dict[str, dict] = {"": {}}
        if not args.no_eager:
            variants[", cuda_graphs=False"] = {"cuda_graphs": False}
        if spec == "F*" and not args.no_eager:  # the default compiles the graphs' layer loop: what that gives
            variants[", compile=False"] = {"compile": False}
        if args.warm_up:
            variants[", after warm_up()"] = {"warm_up": True}
        for suffix, options in variants.items():
            warm = options.pop("warm_up", False)
            encoder = EncoderFromDecoder(model, spec, tokenizer, **options)
            if warm:
                encoder.warm_up()
            name = f"nosink `{spec}`{suffix}"
            encoders[name] = encoder
            runs[name] = lambda encoder=encoder: encoder.encode(texts, batch_size=args.batch, show_progress_bar=False)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(2):  # warm-up: kernels chosen; graphs captured (a bucket at its first batch)
        for fn in runs.values():
            fn()
    names = list(runs)
    for round_ in range(args.repeats):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            fn = runs[name]
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)

    import transformers

    print(f"\n{args.arch} shape, random bf16 weights, on {card} (torch {torch.__version__}, transformers "
          f"{transformers.__version__}); {len(texts):,} texts of 6-40 words, {tokens / len(texts):.1f} tokens "
          f"each on average, batch {args.batch}; median of {args.repeats} passes after two warm-up passes")  # fmt: skip
    peak_note = f"{peak / 1e12:.0f} TFLOP/s" if peak else "unknown"
    print(f"model FLOPs per token {per_token / 1e9:.3f} G; MFU against a dense bf16 peak of {peak_note}\n")
    print("| run | texts/s | passes, texts/s [min, max] | / stock | / sentence-transformers | / nosink `F*` | MFU |")
    print("|---|---|---|---|---|---|---|")
    rate = {name: len(texts) / statistics.median(took) for name, took in times.items()}
    st_rate = rate.get("sentence-transformers")
    rows = []
    for name, took in times.items():
        each = sorted(len(texts) / t for t in took)
        mfu = rate[name] * tokens / len(texts) * per_token / peak if peak else None
        row = {
            "run": name, "texts_per_s": rate[name], "passes": each, "mfu": mfu,
            "passes_in_order": [len(texts) / t for t in took],
            "vs_stock": rate[name] / rate["stock AutoModel, mean pool by hand"],
            "vs_st": rate[name] / st_rate if st_rate else None, "vs_f": rate[name] / rate["nosink `F*`"],
        }  # fmt: skip
        rows.append(row)
        shown = name.replace("|", "\\|")
        vs_st = f"{row['vs_st']:.2f}x" if row["vs_st"] else "-"
        print(f"| {shown} | {rate[name]:,.0f} | {each[0]:,.0f} - {each[-1]:,.0f} | {row['vs_stock']:.2f}x | {vs_st} "
              f"| {row['vs_f']:.2f}x | {f'{mfu:.1%}' if mfu else '-'} |", flush=True)  # fmt: skip
    captured = {name: len(e._graphs.graphs) for name, e in encoders.items() if e._graphs is not None}
    print(f"\ngraphs kept per encoder after the run: {captured}")
    if args.json:
        meta = {"arch": args.arch, "card": card, "texts": len(texts), "tokens": tokens, "batch": args.batch,
                "flops_per_token": per_token, "peak": peak, "torch": torch.__version__}  # fmt: skip
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


def stock(model: torch.nn.Module, tokenizer, texts: list[str], batch: int):
    """The stock model as a user writes it: padded batches, sorted by length, mean over the attention mask."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))

    def run() -> torch.Tensor:
        out = []
        with torch.inference_mode():
            for at in range(0, len(order), batch):
                inputs = tokenizer([texts[i] for i in order[at : at + batch]], padding=True, return_tensors="pt")
                inputs = inputs.to("cuda")
                hidden = model(**inputs).last_hidden_state
                mask = inputs["attention_mask"][..., None].to(hidden.dtype)
                out.append(((hidden * mask).sum(1) / mask.sum(1)).float().cpu())
        return torch.cat(out)

    return run


def sentence_transformers(model: torch.nn.Module, tokenizer, texts: list[str], batch: int):
    """The same weights as a SentenceTransformer (its default for a plain model: mean pooling), from a saved folder."""
    from sentence_transformers import SentenceTransformer

    folder = tempfile.mkdtemp(prefix="bench-st-")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    st = SentenceTransformer(folder, device="cuda", model_kwargs={"dtype": torch.bfloat16})

    def run():
        return st.encode(texts, batch_size=batch, show_progress_bar=False)

    return run


if __name__ == "__main__":
    main()
