"""``choose_sink_token`` on the three study models: each candidate's share of attention (mean over layers), the
stock model (``F*``) on 16 STS-B dev sentences, and the token chosen.

    python benchmarks/results/prepend/sink-choice.py --data ../shared/data/stsb
"""

import argparse
import csv
from pathlib import Path

import torch

from nosink import EncoderFromDecoder
from nosink.evals.sinks import choose_sink_token
from nosink.models.weights import resolve_model


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", nargs="+", default=["demo", "gemma-3-270m", "qwen2.5-0.5b"])
    p.add_argument("--data", type=Path, required=True, help="the STS-B folder (sts-dev.csv)")
    p.add_argument("--sentences", type=int, default=16)
    args = p.parse_args()
    with open(args.data / "sts-dev.csv", encoding="utf-8") as f:
        texts = [row[5] for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)][: args.sentences]
    print("| model | BOS token | candidates: share of attention on the first token (mean over layers) | chosen |")
    print("|---|---|---|---|")
    for name in args.models:
        encoder = EncoderFromDecoder.from_pretrained(resolve_model(name), "F*", dtype=torch.float32)
        choice = choose_sink_token(encoder, texts)
        shares = ", ".join(f"`{k}` {v:.3f}" for k, v in choice.masses.items())
        bos = encoder.tokenizer.bos_token
        print(f"| {name} | `{bos}` | {shares} | `{choice.sink_token}` |", flush=True)


if __name__ == "__main__":
    main()
