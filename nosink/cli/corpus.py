"""``nosink encode-corpus``: a corpus file into a folder of safetensors shards (resumable; many GPUs under torchrun)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from nosink.checks import count_arg
from nosink.cli.args import EXIT_HELP, MODEL_HELP, POOLINGS, Parser, exit_layer
from nosink.cli.inputs import model_path, saved_encoder


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "encode-corpus",
        help="encode a corpus file into a folder of safetensors shards (resumable; under torchrun, on many GPUs)",
        description="Encode every row of a .txt (one text a line), .jsonl or .parquet file into OUT: safetensors "
        "shards and a manifest.json. Run it alone, or under 'torchrun --nproc-per-node N' (and --nnodes ...) to "
        "share the rows among processes. Running the same command again resumes; other arguments are refused.",
        arguments=_arguments,
    )
    p.set_defaults(handler=run)


def _arguments(p: Parser) -> None:
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--spec", help="layer spec; optional for a saved encoder")
    p.add_argument(
        "--input",
        required=True,
        help="the corpus: .txt, .jsonl/.ndjson or .parquet; '-' for standard input (with --format)",
    )
    p.add_argument(
        "--format",
        dest="input_format",
        choices=["txt", "jsonl", "parquet"],
        help="the input's format (default: from its suffix); needed for '-' and pipes like /dev/stdin",
    )
    p.add_argument("--out", type=Path, required=True, help="output folder (new, empty, or an earlier run's)")
    p.add_argument("--text-field", default="text", help="the text's field or column (jsonl, parquet)")
    p.add_argument("--id-field", help="a field or column of ids to keep with the vectors (must be unique)")
    p.add_argument("--instruction", help="prompt put before every text (not pooled)")
    p.add_argument("--pooling", default="mean", choices=POOLINGS, help="how token vectors become one vector")
    p.add_argument("--normalize", action="store_true", help="L2-normalise the vectors")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"], help="stored vectors")
    p.add_argument("--model-dtype", choices=["float32", "bfloat16", "float16"], help="weights (default: checkpoint's)")
    p.add_argument("--batch-size", type=count_arg(), default=32, help="texts per forward pass")
    p.add_argument("--max-length", type=count_arg(), default=512, help="tokens per input; longer inputs are cut")
    p.add_argument("--exit-layer", type=exit_layer, metavar="M", help=EXIT_HELP + "; kept in the manifest")
    p.add_argument("--shard-rows", type=count_arg(), default=10_000, help="input rows per shard")
    p.add_argument("--skip-bad-rows", action="store_true", help="skip bad rows (listed in the manifest), not stop")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from nosink import EncoderFromDecoder
    from nosink.corpus import encode_corpus, local_device

    device = local_device()
    path = model_path(args.model)
    saved_encoder(path, args.spec)
    encoder = EncoderFromDecoder.from_pretrained(
        path, spec=args.spec, dtype=args.model_dtype, device=device, exit_layer=args.exit_layer
    )
    summary = encode_corpus(
        encoder, args.input, args.out, text_field=args.text_field, id_field=args.id_field,
        instruction=args.instruction, pooling=args.pooling, normalize=args.normalize, dtype=args.dtype,
        batch_size=args.batch_size, max_length=args.max_length, shard_rows=args.shard_rows,
        on_bad_row="skip" if args.skip_bad_rows else "error", input_format=args.input_format,
        show_progress=not args.no_progress,
    )  # fmt: skip
    if int(os.environ.get("RANK", "0")) == 0:
        reused = sum(r.reused for r in summary.ranks)
        print(f"encoded {summary.texts} texts ({summary.tokens} tokens) in {summary.seconds:.1f} s, "
              f"{summary.texts_per_second:.1f} texts/s, into {summary.folder}: {summary.encoded} of {summary.rows} "
              f"rows have vectors ({reused} from earlier runs), {summary.skipped} bad rows skipped")  # fmt: skip
        for r in summary.ranks:
            print(f"  rank {r.rank}: {r.texts} texts, {r.tokens} tokens, {r.seconds:.1f} s, "
                  f"{r.shards_written} shards written, {r.shards_reused} reused")  # fmt: skip
    return 0
