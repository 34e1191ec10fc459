"""``nosink finetune``: train a LoRA adapter on a converted encoder (LLM2Vec's recipe, or pairs) into a folder."""

from __future__ import annotations

import argparse
from typing import Any

from nosink.checks import count_arg, printable
from nosink.cli.args import EXIT_HELP, POOLINGS, Parser, UsageError, exit_layer, number, positive_float
from nosink.cli.inputs import model_path


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "finetune",
        help="train a LoRA adapter on the encoder a spec makes (MNTP, SimCSE or pairs); weights shared",
        arguments=_arguments,
        check=_check,
    )
    p.set_defaults(handler=run)


_fraction = number(0, 1, low_included=True, high_included=False)  # dropouts and the mask share: [0, 1)


def _arguments(p: Parser) -> None:
    p.add_argument("model", help="the base decoder: hub id, local transformers folder, or 'demo'")
    p.add_argument("--spec", required=True, help="layer spec, e.g. 'F* | M0B*4'")
    p.add_argument("--data", required=True,
                   help="UTF-8 file: a text per line (mntp, simcse), or anchor TAB positive (mnrl)")  # fmt: skip
    p.add_argument("--out", required=True, help="output folder (new or empty; or the run to --resume)")
    p.add_argument("--objective", nargs="+", default=["simcse"], choices=["mntp", "simcse", "mnrl"],
                   help="losses added up at each step (mnrl: supervised pairs, alone)")  # fmt: skip
    p.add_argument("--steps", type=count_arg(), default=None, help="optimizer steps in all (default 1000 "
                   "unless --minutes is given)")  # fmt: skip
    p.add_argument("--minutes", type=positive_float, default=None, help="minutes of training in all")
    p.add_argument("--batch-size", type=count_arg(), default=32, help="texts (or pairs) per step")
    p.add_argument("--lr", type=positive_float, default=1e-4, help="AdamW learning rate")
    p.add_argument("--seed", type=int, default=0, help="data order, masks, dropout, adapter initialisation")
    p.add_argument("--rank", type=count_arg(), default=16, help="LoRA rank")
    p.add_argument("--alpha", type=positive_float, default=32.0, help="LoRA alpha")
    p.add_argument("--lora-dropout", type=_fraction, default=0.05, help="dropout on the adapter's input")
    p.add_argument("--lora-layers", default="all", choices=["all", "converted"],
                   help="which layers get the adapter: all the spec runs, or only the converted ones")  # fmt: skip
    p.add_argument("--attention-dropout", type=_fraction, default=0.1,
                   help="attention dropout while training (SimCSE's augmentation)")  # fmt: skip
    p.add_argument("--temperature", type=positive_float, default=0.05, help="of the contrastive losses")
    p.add_argument("--mask-probability", type=_fraction, default=0.2, help="MNTP: share of text tokens masked")
    p.add_argument("--max-length", type=count_arg(), default=128, help="tokens per text; longer texts are cut")
    p.add_argument("--pooling", default="mean", choices=POOLINGS, help="as for encode")
    p.add_argument("--instruction", help="prompt put before every text, as encode(instruction=) will be given")
    p.add_argument("--exit-layer", type=exit_layer, metavar="M", help=EXIT_HELP + "; recorded in the folder")
    p.add_argument("--autocast", choices=["bfloat16"], default=None,
                   help="mixed precision: matrix products in bfloat16, the adapter in the weights' dtype")  # fmt: skip
    p.add_argument("--checkpoint-every", type=count_arg(), default=100, help="steps between checkpoints")
    p.add_argument("--resume", action="store_true", help="continue the run whose checkpoint is in --out")
    p.add_argument("--copy-base", action="store_true", help="save the base model into OUT/base (self-contained)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _check(args: argparse.Namespace) -> None:
    if "mnrl" in args.objective and len(args.objective) > 1:
        raise UsageError("--objective mnrl trains on pairs and goes alone")


def run(args: argparse.Namespace) -> int:
    from nosink.finetune import FinetuneOptions, finetune

    steps = args.steps if args.steps is not None or args.minutes is not None else 1000
    options = FinetuneOptions(
        objectives=tuple(args.objective), steps=steps, minutes=args.minutes, batch_size=args.batch_size,
        learning_rate=args.lr, seed=args.seed, rank=args.rank, alpha=args.alpha, lora_dropout=args.lora_dropout,
        lora_layers=args.lora_layers,
        attention_dropout=args.attention_dropout, temperature=args.temperature,
        mask_probability=args.mask_probability, max_length=args.max_length, pooling=args.pooling,
        instruction=args.instruction, exit_layer=args.exit_layer, checkpoint_every=args.checkpoint_every,
        autocast=args.autocast, show_progress_bar=not args.no_progress,
    )  # fmt: skip
    result = finetune(
        model_path(args.model), args.spec, args.data, args.out, options, resume=args.resume, copy_base=args.copy_base
    )
    last = f", last loss {result.losses[-1]:.4f}" if result.losses else ""
    print(
        f"trained {result.steps} steps in {result.seconds / 60:.1f} min{last}; wrote {printable(str(result.folder))} "
        "(load it with EncoderFromDecoder.from_pretrained, or nosink encode / serve)"
    )
    return 0
