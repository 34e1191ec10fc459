"""``nosink eval``: the paper's evaluations (ner, sweep, mteb, classify, study), each a subcommand."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from nosink.checks import count_arg
from nosink.cli.args import (
    DATA_ENV,
    EXIT_HELP,
    MODEL_HELP,
    TEMPLATE_HELP,
    Parser,
    UsageError,
    exit_layer,
    positive_float,
    template,
)
from nosink.cli.inputs import data_folder, is_baseline, model_path, refuse_for_baseline

STUDY_DESCRIPTION = (
    "The study of layer specs x prompt templates x early exits for one model (or an encoder baseline): each "
    "configuration's spec is chosen on one split and reported on another with a 95% bootstrap interval; one JSON file "
    "per task in --out. The same arguments as 'python -m nosink.evals.study'."
)


def add_parser(commands: Any) -> None:
    ev = commands.add_parser(
        "eval", help="the paper's evaluations: ner, sweep, mteb, classify, study (see 'nosink eval -h')"
    )
    evaluations = ev.add_subparsers(dest="evaluation", required=True, metavar="EVALUATION")
    add = evaluations.add_parser
    add("ner", help="CoNLL-2003 NER probe for one spec", arguments=_ner_arguments).set_defaults(handler=_ner)
    add("sweep", help="NER probe for every spec of the paper's configurations (k, k0 sweeps), with table and plot",
        arguments=_sweep_arguments).set_defaults(handler=_ner)  # fmt: skip
    add("mteb", help="the paper's MTEB subset through mteb (local copies or the hub)",
        arguments=_mteb_arguments).set_defaults(handler=_mteb)  # fmt: skip
    add("classify", help="logistic regression on frozen embeddings (domain tasks, section 4.1)",
        arguments=_classify_arguments).set_defaults(handler=_classify)  # fmt: skip
    add("study", help="specs x prompt templates x early exits: chosen on one split, reported on another with 95%% CIs",
        description=STUDY_DESCRIPTION, arguments=_study_arguments,
        check=_study_check).set_defaults(handler=_study)  # fmt: skip


# --- ner and sweep --------------------------------------------------------------------------------------------------


def _probe_arguments(p: Parser) -> None:
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--data", default=None,
                   help=f"CoNLL folder (train.txt, dev.txt) or hub id; default: ${DATA_ENV}/conll2003 if "
                   "that exists, else eriktks/conll2003")  # fmt: skip
    p.add_argument("--train-limit", type=count_arg(), help="train the probe on the first N training sentences")
    p.add_argument("--limit", type=count_arg(), help="evaluate on the first N dev sentences (quick runs)")
    p.add_argument("--max-length", type=count_arg(), default=32, help="tokens per sentence, as in the official code")
    p.add_argument("--epochs", type=count_arg(), default=3, help="training epochs of the probe")
    p.add_argument("--lr", type=positive_float, default=5e-3, help="the probe's learning rate")
    p.add_argument("--out", type=Path, default=Path("results"), help="folder for the results")


def _ner_arguments(p: Parser) -> None:
    _probe_arguments(p)
    p.add_argument("--spec", help="layer spec (required unless MODEL is an encoder baseline)")
    p.add_argument("--exit-layer", type=exit_layer, metavar="M", help=EXIT_HELP)


def _sweep_arguments(p: Parser) -> None:
    _probe_arguments(p)
    p.add_argument("--configs", nargs="+", default=["INPLACE-BIDIR", "INPLACE-BACK", "MASK0-BIDIR"],
                   help="configurations to sweep (paper names; MASK0&BIDIR sweeps k x k0)")  # fmt: skip
    p.add_argument("--ks", type=count_arg(), nargs="+", help="k values (default: 1,2,4,6,8,10,12,16,... up to depth)")
    p.add_argument("--k0s", type=count_arg(), nargs="+", help="k0 values for MASK0&BIDIR (default 1 2 3)")
    p.add_argument("--task", default="ner",
                   help=f"'ner' (default) or an MTEB task, e.g. STSBenchmark (--data: data folder, "
                   f"default ${DATA_ENV})")  # fmt: skip


def _ner(args: argparse.Namespace) -> int:
    from nosink import EncoderFromDecoder
    from nosink.evals.ner import NERConfig, evaluate_ner, load_conll
    from nosink.evals.run_sweeps import ner_sweep

    if args.evaluation == "ner" and is_baseline(args.model):
        refuse_for_baseline(args, "--exit-layer")
    ner = args.evaluation == "ner" or args.task == "ner"
    if args.data is not None:
        data = args.data
    elif ner:
        data = str(data_folder("conll2003") or "eriktks/conll2003")
    else:
        data = data_folder()
    train = load_conll(data, "train")[: args.train_limit] if ner else []
    dev = load_conll(data, "dev")[: args.limit] if ner else []
    config = NERConfig(lr=args.lr, epochs=args.epochs, max_length=args.max_length)
    baseline = args.evaluation == "ner" and is_baseline(args.model)
    if baseline:
        from nosink.evals.baselines import TokenFeatures, baseline_folder

        path = str(baseline_folder(args.model))
        encoder = TokenFeatures(path, name=args.model)
    else:
        if args.evaluation == "ner" and not args.spec:
            raise ValueError("--spec is required for a decoder")
        path = model_path(args.model)
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


# --- mteb -----------------------------------------------------------------------------------------------------------


def _mteb_arguments(p: Parser) -> None:
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--specs", nargs="+", help="layer specs (a sweep shares work); not for encoder baselines")
    p.add_argument("--tasks", nargs="+", help="mteb task names (default: the paper's subset)")
    where_data = f"folder of local copies (stsb/, banking77/, emotion/, <Task>/); default: ${DATA_ENV}"
    p.add_argument("--data-dir", type=Path, help=where_data)
    p.add_argument("--limit", type=count_arg(), help="at most N items per split, seeded (quick runs; not comparable)")
    p.add_argument("--batch-size", type=count_arg(), default=32, help="texts per forward pass")
    p.add_argument("--out", type=Path, default=Path("results/mteb"), help="folder for mteb's result files")
    p.add_argument("--overwrite", action="store_true", help="re-run tasks whose results are already in --out")
    p.add_argument("--template", type=template, help=TEMPLATE_HELP + "; not for encoder baselines")
    p.add_argument("--exit-layer", type=exit_layer, metavar="M", help=EXIT_HELP + "; not for encoder baselines")


def _mteb(args: argparse.Namespace) -> int:
    from nosink import EncoderFromDecoder
    from nosink.evals.mteb_eval import run_mteb

    if is_baseline(args.model):
        refuse_for_baseline(args, "--template", "--exit-layer")
    data_dir = args.data_dir or data_folder()
    if is_baseline(args.model):
        from sentence_transformers import SentenceTransformer

        from nosink.evals.baselines import baseline_folder

        path = str(baseline_folder(args.model))
        encoder: Any = SentenceTransformer(path, device="cpu")
        name = f"sentence-transformers/{args.model}"
    else:
        if not args.specs:
            raise ValueError("--specs is required for a decoder")
        path = model_path(args.model)
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


# --- classify -------------------------------------------------------------------------------------------------------


def _classify_arguments(p: Parser) -> None:
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--train", type=Path, required=True, help="CSV/TSV (with header) or JSONL of training texts")
    p.add_argument("--test", type=Path, required=True, help="the same for the test texts")
    p.add_argument("--text-column", default="text", help="the texts' column or field")
    p.add_argument("--label-column", default="label", help="the labels' column or field")
    p.add_argument("--specs", nargs="+", required=True, help="one or more layer specs, evaluated in one pass")
    p.add_argument("--instruction", help="prompt before every text (the paper uses none for domain tasks)")
    p.add_argument("--smote", choices=["auto", "yes", "no"], default="auto",
                   help="oversample with SMOTE: auto = when small (<1000) or imbalanced (>=3x)")  # fmt: skip
    p.add_argument("--limit", type=count_arg(), help="a seeded, label-stratified sample of N training and N test texts")
    p.add_argument("--out", type=Path, default=Path("results"), help="folder for classification.json")


def _classify(args: argparse.Namespace) -> int:
    from nosink import EncoderFromDecoder
    from nosink.evals.classify import evaluate_classification, read_labeled, subsample

    train = subsample(read_labeled(args.train, args.text_column, args.label_column), args.limit)
    test = subsample(read_labeled(args.test, args.text_column, args.label_column), args.limit)
    path = model_path(args.model)
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


# --- study ----------------------------------------------------------------------------------------------------------


def _study_arguments(p: Parser) -> None:
    from nosink.evals.study import add_arguments

    add_arguments(p, data_env=DATA_ENV)


def _study_check(args: argparse.Namespace) -> None:
    """``--data``, else ``$NOSINK_DATA``: read after parsing, so that the usage shows ``--data`` as optional."""
    if args.data is None:
        args.data = os.environ.get(DATA_ENV) or None
    if args.data is None:
        raise UsageError(f"the following arguments are required: --data (or set ${DATA_ENV})")


def _study(args: argparse.Namespace) -> int:
    import shlex

    from nosink.evals.study import ner_table, options_from_args, results_table, run
    from nosink.models.weights import MODELS

    if not is_baseline(args.model) and args.model not in MODELS:  # run() resolves a short name after its checks
        args.model = model_path(args.model)  # a folder or a hub id, checked
    run(options_from_args(args), shlex.join(["nosink", *args.argv]))
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
