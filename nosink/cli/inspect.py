"""``nosink inspect``: attention maps, the attention-sink profile and a suggested spec."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from nosink.checks import count_arg, printable
from nosink.cli.args import MODEL_HELP, Parser, fraction
from nosink.cli.inputs import lines_of, model_path


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "inspect", help="attention maps, attention-sink profile and a suggested spec", arguments=_arguments
    )
    p.set_defaults(handler=run)


def _arguments(p: Parser) -> None:
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--spec", default="F*", help="spec to inspect (default 'F*': the unconverted model)")
    p.add_argument("--compare", nargs="*", default=[], help="more specs whose sink profiles go in the same plot")
    p.add_argument("--text", action="append", default=[], help="a sample text (repeatable)")
    p.add_argument("--file", help="sample texts, one per line (blank lines are skipped), '-' for standard input")
    p.add_argument("--layers", type=count_arg(minimum=0), nargs="+", help="layer steps to draw (default: all)")
    p.add_argument("--threshold", type=fraction, default=0.5, help="share on the first token that makes a sink layer")
    p.add_argument("--positions", type=count_arg(), default=3, help="report shares on this many first positions")
    p.add_argument("--max-tokens", type=count_arg(minimum=2), default=32,
                   help="at most this many tokens per text; the maps cut texts to a common length")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("inspect"), help="folder for the figures and tables")


def run(args: argparse.Namespace) -> int:
    from nosink import EncoderFromDecoder
    from nosink.evals.plotting import require_matplotlib
    from nosink.evals.report import inspect_encoder

    require_matplotlib()  # before the model loads
    texts = list(args.text) + ([t for t in lines_of(args.file) if t.strip()] if args.file else [])
    if not texts:
        raise ValueError("give sample texts with --text or --file")
    path = model_path(args.model)
    encoder = EncoderFromDecoder.from_pretrained(path, spec=args.spec, attn_implementation="eager")
    report = inspect_encoder(
        encoder,
        texts,
        args.out,
        label=Path(path).name,
        compare=args.compare,
        layers=args.layers,
        positions=args.positions,
        threshold=args.threshold,
        max_tokens=args.max_tokens,
        meta={"command": " ".join(sys.argv)},
    )
    print(f"{printable(report.model)}, spec {report.spec}: share of attention on the first {args.positions} positions")
    print(f"{'layer':>5}  {'kind':<5} {'role':<7} " + " ".join(f"pos{p:<4}" for p in range(args.positions)) + " sink")
    for p in report.profile:
        shares = " ".join(f"{x:7.3f}" for x in p.shares)
        print(f"{p.layer:>5}  {p.kind:<5} {p.role:<7} {shares}  {'yes' if p.is_sink else ''}")
    if report.suggestion is not None:
        print(f"\nsuggested spec: {report.suggestion.spec}  ({report.suggestion.reason})")
    print(f"wrote {args.out}/attention_maps.png, sink_profile.png, sinks_*.csv, inspect.json")
    return 0
