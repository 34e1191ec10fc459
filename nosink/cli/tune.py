"""``nosink tune``: choose a spec, template and exit layer on your own labelled data; write the encoder folder."""

from __future__ import annotations

import argparse
from typing import Any

from nosink.checks import count_arg
from nosink.cli.args import MODEL_HELP, Parser, positive_float

# The names of evals.study.userdata.TUNE_TASKS and FORMATS, for the help without importing torch (a test keeps
# them equal).
TASKS = ("sts", "classification", "retrieval", "ner")
DATA_HELP = (
    "your labelled data. sts: a .tsv (header naming sentence1, sentence2, score) or .jsonl of such objects; "
    "classification: a .tsv/.csv (header naming text, label) or .jsonl; retrieval: a BEIR folder (corpus.jsonl, "
    "queries.jsonl, qrels/test.tsv); ner: a CoNLL file (WORD ... TAG per line, a blank line between sentences)"
)


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "tune", help="choose a spec, template and exit layer on your own data; write the encoder folder",
        arguments=_arguments,
    )  # fmt: skip
    p.set_defaults(handler=run)


def _arguments(p: Parser) -> None:
    from nosink.cli.args import template

    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--task", required=True, choices=TASKS)
    p.add_argument("--data", required=True, help=DATA_HELP)
    p.add_argument("--out", required=True, help="the encoder folder to write (with tune.json, the report)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument(
        "--budget",
        type=count_arg(),
        metavar="N",
        help="encode at most N texts (whole templates are left out to keep within it)",
    )
    budget.add_argument(
        "--minutes",
        type=positive_float,
        metavar="M",
        help="start no template that the speed so far says would end after M minutes",
    )
    p.add_argument(
        "--templates",
        nargs="+",
        type=lambda t: t if t == "instruction" else template(t),
        default=["instruction", "PromptEOL", "PretendedCoT", "Echo"],
        help="templates to try, in order ('instruction': mean pooling, none)",
    )
    p.add_argument(
        "--exits",
        type=count_arg(),
        nargs="*",
        metavar="M",
        help="exit layers to try (default: half and three quarters of the depth; none: no exits)",
    )
    p.add_argument(
        "--prepends",
        type=count_arg(0),
        nargs="+",
        metavar="K",
        default=[0],
        help="Token Prepending depths to try (K: before layers 1..K; 0: none; each depth runs the grid again)",
    )
    p.add_argument(
        "--instruction",
        help="an instruction before each text without a template (queries only, "
        "for retrieval); encode() needs it again, the folder does not hold it",
    )
    p.add_argument(
        "--sink-token",
        help="the token put first (default: of the tokenizer's BOS, turn-start and EOS tokens, the one the model "
        "attends most; 'auto': the BOS token)",
    )
    p.add_argument("--seed", type=count_arg(0), default=0, help="the seed of the splits")
    p.add_argument("--batch-size", type=count_arg(), default=32)
    p.add_argument("--max-length", type=count_arg(), default=512)
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from nosink.evals.study.tune import TuneOptions, tune

    options = TuneOptions(
        model=args.model, task=args.task, data=args.data, out=args.out, budget=args.budget, minutes=args.minutes,
        templates=args.templates, exits=args.exits, instruction=args.instruction, seed=args.seed,
        prepends=[k or None for k in dict.fromkeys(args.prepends)], sink_token=args.sink_token,
        batch_size=args.batch_size, max_length=args.max_length, progress=args.progress,
    )  # fmt: skip
    result = tune(options, command="nosink " + " ".join(args.argv))
    p = result.payload

    def line(label: str, row: dict[str, Any]) -> str:
        exit_ = "" if row["exit_layer"] is None else f" @ exit {row['exit_layer']}"
        exit_ += "" if row.get("prepend") is None else f" @ prepend {row['prepend']}"
        what = f"{row['template']:<13} {row['spec']}{exit_}"
        scores = f"choose {row['choose']:.4f}   report {row['report']:.4f} [{row['low']:.4f}, {row['high']:.4f}]"
        return f"{label:<14} {what:<44} {scores}"

    print(f"{p['task']} on {args.data}: {len(result.tried)} configurations, {p['texts_encoded']} texts encoded, "
          f"{p['seconds']:.0f} s")  # fmt: skip
    shares = p["sink_attention"]
    if shares:
        said = ", ".join(f"{token} {share:.2f}" for token, share in shares.items())
        print(f"sink token: {p['sink_token']} (attention share, mean over layers: {said})")
    print(line("chosen", p["chosen"]))
    print(line("F*", p["F*"]))
    print(line("best reported", p["best_reported"]))
    d = p["chosen_minus_F*"]
    print(f"chosen - F*: {d['delta']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}], p = {d['p_value']:.3f}")
    if result.skipped:
        print(f"left out to keep within the budget: {', '.join(result.skipped)}")
    if args.instruction is not None and p["chosen"]["template"] == "instruction":
        print(f"encode with instruction={args.instruction!r}: the folder does not hold it")
    print(f"wrote {result.folder} (EncoderFromDecoder.from_pretrained and nosink serve load it)")
    return 0
