"""Corpus-encoding throughput on 1 vs N GPUs: random weights at a real shape, a generated corpus.

    python benchmarks/bench_corpus.py prepare /tmp/bench --rows 200000          # model folder + corpus.jsonl
    torchrun --standalone --nproc-per-node 1 -m nosink.cli encode-corpus /tmp/bench/model \\
        --input /tmp/bench/corpus.jsonl --id-field id --out /tmp/bench/gpu1 --model-dtype bfloat16 \\
        --dtype float16 --batch-size 256 --no-progress
    torchrun --standalone --nproc-per-node 2 -m nosink.cli encode-corpus ... --out /tmp/bench/gpu2
    python benchmarks/bench_corpus.py compare /tmp/bench/gpu1 /tmp/bench/gpu2    # JSON: texts/s, ratio

The model is Llama-3-8B's shape cut to 4 layers (hidden 4096, 32 heads, 8 KV heads, MLP 14,336, vocabulary
128,256) with seeded random weights, converted with ``F* | M0B*2``; ``--tiny`` makes a toy for a CPU check. The
tokenizer is word-level (one token per word, built in code, so nothing is downloaded), and text lengths
follow a log-normal law with a median of 80 words (a retrieval passage; mean about 96), cut to 4..400 words.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

SPEC = "F* | M0B*2"
VOCAB = 30_000  # words of the generated language


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3} | {f"w{i}": i + 4 for i in range(VOCAB)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", eos_token="</s>", bos_token="<s>"
    )


def prepare(folder: Path, rows: int, tiny: bool, seed: int = 0) -> None:
    import torch
    import transformers as tf

    from nosink import EncoderFromDecoder

    shape = dict(hidden_size=4096, intermediate_size=14_336, num_attention_heads=32, num_key_value_heads=8)
    if tiny:
        shape = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
    config = tf.LlamaConfig(
        **shape, num_hidden_layers=4, vocab_size=128_256, max_position_embeddings=8192, rope_theta=500_000.0,
        rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(seed)
    decoder = tf.AutoModel.from_config(config, dtype=torch.bfloat16)
    spec = SPEC
    EncoderFromDecoder(decoder, spec, _tokenizer()).save_pretrained(folder / "model")
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.rint(rng.lognormal(np.log(80), 0.6, size=rows)), 4, 400).astype(int)
    words = np.char.add("w", rng.integers(0, VOCAB, size=int(lengths.sum())).astype(str))
    ends = np.cumsum(lengths)
    with (folder / "corpus.jsonl").open("w") as fh:
        for i, (start, end) in enumerate(zip(ends - lengths, ends, strict=True)):
            fh.write(json.dumps({"id": f"p{i}", "text": " ".join(words[start:end])}) + "\n")


def compare(folders: list[Path]) -> dict:
    from nosink import load_corpus_embeddings

    runs = [load_corpus_embeddings(f) for f in folders]
    base = np.asarray(runs[0].vectors, dtype=np.float32)
    out = {"runs": []}
    for folder, run in zip(folders, runs, strict=True):
        summary = run.manifest["summary"]
        vectors = np.asarray(run.vectors, dtype=np.float32)
        out["runs"].append({
            "folder": str(folder),
            "world_size": run.manifest["world_size"],
            "texts": summary["texts"],
            "tokens": summary["tokens"],
            "seconds": summary["seconds"],
            "texts_per_second": summary["texts_per_second"],
            "per_rank": summary["ranks"],
            "same_rows_as_first": bool(np.array_equal(run.rows, runs[0].rows)),
            "max_abs_diff_from_first": float(np.abs(vectors - base).max()) if len(base) else 0.0,
        })  # fmt: skip
    speeds = [r["texts_per_second"] for r in out["runs"]]
    out["speedup_vs_first"] = [round(s / speeds[0], 3) for s in speeds]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pr = sub.add_parser("prepare")
    pr.add_argument("folder", type=Path)
    pr.add_argument("--rows", type=int, default=200_000)
    pr.add_argument("--tiny", action="store_true")
    co = sub.add_parser("compare")
    co.add_argument("folders", type=Path, nargs="+")
    args = p.parse_args()
    if args.command == "prepare":
        args.folder.mkdir(parents=True, exist_ok=True)
        prepare(args.folder, args.rows, args.tiny)
    else:
        json.dump(compare(args.folders), sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
