"""``nosink plan``: how a spec runs on a model, layer by layer (mask kind, stream)."""

from __future__ import annotations

import argparse
from typing import Any

from nosink.checks import count_arg
from nosink.cli.args import Parser
from nosink.cli.inputs import load_config, model_path


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "plan", help="show how a spec runs on a model: layer, mask kind, stream", arguments=_arguments
    )
    p.set_defaults(handler=run)


def _arguments(p: Parser) -> None:
    p.add_argument("spec", help='a layer spec, e.g. "F* | B*7 | M0B*3"')
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--depth", type=count_arg(), help="number of decoder layers")
    where.add_argument("--model", help="read the depth from this model's config (hub id, folder or 'demo')")


def run(args: argparse.Namespace) -> int:
    from nosink import parse_spec

    spec = parse_spec(args.spec)
    depth = args.depth if args.depth is not None else load_config(model_path(args.model)).num_hidden_layers
    table = spec.resolve(depth).table()  # every check before the first line is printed
    print(f"spec {spec} on {depth} layers\n")
    print(table)
    return 0
