"""``nosink encode``: encode texts to a ``.npy`` or ``.safetensors`` file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from nosink.checks import count_arg, printable
from nosink.cli.args import EXIT_HELP, MODEL_HELP, POOLINGS, TEMPLATE_HELP, Parser, UsageError, exit_layer, template
from nosink.cli.inputs import model_path, saved_encoder, texts_of

_FORMATS = {".npy": "npy", ".safetensors": "safetensors"}


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "encode", help="encode texts to a .npy or .safetensors file", arguments=_arguments, check=_check
    )
    p.set_defaults(handler=run)


def _arguments(p: Parser) -> None:
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--spec", help="layer spec; optional for a saved encoder")
    p.add_argument("--text", action="append", default=[], help="a text to encode (repeatable)")
    p.add_argument("--file", help="a UTF-8 file, one text per line (no blank lines), '-' for standard input; "
                   "after --text")  # fmt: skip
    p.add_argument("-o", "--output", type=_output_path, required=True,
                   help="output file: .npy or .safetensors (any case), written under exactly this name")  # fmt: skip
    p.add_argument("--instruction", help="prompt put before every text (not pooled)")
    p.add_argument("--pooling", default="mean", choices=POOLINGS, help="how token vectors become one vector")
    p.add_argument("--batch-size", type=count_arg(), default=32, help="texts per forward pass")
    p.add_argument("--max-length", type=count_arg(), default=512, help="tokens per text; longer texts are cut")
    p.add_argument("--normalize", action="store_true", help="L2-normalise the vectors")
    p.add_argument("--template", type=template, help=TEMPLATE_HELP + " (it decides which tokens are pooled)")
    p.add_argument("--exit-layer", type=exit_layer, metavar="M", help=EXIT_HELP)
    p.add_argument(
        "--prepend",
        type=count_arg(),
        metavar="K",
        help="Token Prepending before layers 1..K (a placeholder after the sink token takes the last token's state)",
    )


def _check(args: argparse.Namespace) -> None:
    if not args.text and not args.file:
        raise UsageError("nothing to encode; give --text or --file")


def output_format(path: Path) -> str:
    """'npy' or 'safetensors', from the file name's suffix (any case); the one rule for checking and writing."""
    suffix = path.suffix.lower()
    if suffix not in _FORMATS:
        raise ValueError(f"output must end in .npy or .safetensors, got {printable(repr(path.name))}")
    return _FORMATS[suffix]


def _output_path(text: str) -> Path:
    path = Path(text).expanduser()
    try:
        output_format(path)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return path


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from nosink import EncoderFromDecoder

    texts = list(args.text) + (texts_of(args.file) if args.file else [])
    if not texts:
        raise ValueError("nothing to encode; give --text or --file")
    output: Path = args.output
    fmt = output_format(output)
    path = model_path(args.model)
    saved_encoder(path, args.spec)  # a plain decoder without --spec: said in the command line's words
    encoder = EncoderFromDecoder.from_pretrained(path, spec=args.spec, exit_layer=args.exit_layer, prepend=args.prepend)
    vectors = encoder.encode(
        texts,
        instruction=args.instruction,
        template=args.template,
        pooling=args.pooling,
        batch_size=args.batch_size,
        max_length=args.max_length,
        normalize_embeddings=args.normalize,
        show_progress_bar=None,
    )
    if fmt == "npy":
        with open(output, "wb") as f:  # a file object: np.save(name) would append ".npy" to "OUT.NPY"
            np.save(f, vectors)
    else:
        from safetensors.numpy import save_file

        save_file({"embeddings": vectors}, str(output), metadata={"spec": str(encoder.spec)})
    print(f"wrote {vectors.shape[0]} vectors of size {vectors.shape[1]} to {printable(str(output))}")
    return 0
