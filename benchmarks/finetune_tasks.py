"""Fine-tune a converted decoder on a task's unlabelled training text, then score the task beside the baselines.

    nice -n 5 python benchmarks/finetune_tasks.py --task sts --data ../shared/data --out /tmp/ft-sts/out \\
        --json benchmarks/results/finetune-sts/result.json

Training data is the *train* split of the task, without its labels: unlabelled text of the task's domain.
With ``--task sts --pairs MIN_SCORE`` it is supervised instead: the STS-B train pairs scored at least MIN_SCORE
(of 5), each an anchor and its positive for ``--objective mnrl`` (in-batch negatives).

- ``sts``: STS-B train sentences (both sides of every pair, deduplicated); scored on STS-B's full test split with
  the study's STS task (cosine similarities, Spearman, pairs as bootstrap units).
- ``banking77``: Banking77 train texts; scored with the study's classification task on the study's seeded,
  label-stratified samples (``--cls-train`` / ``--cls-test`` items; a logistic regression on the vectors,
  accuracy, test items as bootstrap units).
- ``ner``: CoNLL-2003 train sentences (words joined by spaces); scored with the study's NER probe (the first
  ``--ner-train`` train sentences train a linear probe per seed, mean entity F1 of 3 seeds on the reporting half
  of the first ``--ner-dev`` dev sentences, sentences as bootstrap units).

Training runs through ``nosink.finetune.finetune`` (LoRA, the spec's masks) with the instruction the study gives
the task. Each task is scored for the fine-tuned encoder (the folder ``finetune`` wrote, loaded with
``from_pretrained``), the same spec and exit without training, and all-MiniLM-L6-v2 (sentence-transformers, as the
study scores it), each with a 95% bootstrap interval, and the paired differences. Peak memory is the process's
maximum resident set size (``ru_maxrss``) when training ends (loading included).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import resource
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from nosink.evals import stats
from nosink.evals.baselines import baseline_folder
from nosink.evals.mteb_data import LOCAL_FOLDERS
from nosink.evals.study.candidates import Candidate
from nosink.evals.study.loaders import load_classification, load_sts
from nosink.finetune import FinetuneOptions, finetune
from nosink.models import EncoderFromDecoder
from nosink.models.weights import resolve_model

ENCODERS = ("fine-tuned", "all-MiniLM-L6-v2", "training-free")  # what --scores may name

# The study's training-free best for SmolLM2-135M per task (docs/results/study.md): spec, exit, metric.
DEFAULTS = {
    "sts": ("F* | B*13 | M0B*2", 25, "Spearman"),
    "banking77": ("F* | B*13 | M0B*2", None, "accuracy"),
    "ner": ("F* | B*11 | M0B*4", 20, "entity F1, mean of 3 probe seeds"),
}


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def cached(encode):
    store: dict[str, np.ndarray] = {}

    def vectors(texts):
        todo = [t for t in dict.fromkeys(texts) if t not in store]
        if todo:
            store.update(zip(todo, encode(todo), strict=True))
        return np.stack([store[t] for t in texts])

    return vectors


class Scorer:
    """One task: its unlabelled training text, its instruction, and how an encoder is scored on it."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.task = args.task
        self.instruction: str | None = None
        if args.task == "sts":
            self.sts = load_sts(args.data / "stsb", args.choose, args.test_items)  # test: all of it by default
            if args.choose:  # settings are chosen on a seeded sample of the dev split, never on test
                self.sts = dataclasses.replace(self.sts, name="STSBenchmark (dev)", report=self.sts.choose)
            self.instruction = str(self.sts.instruction)
            train = LOCAL_FOLDERS["STSBenchmark"][1](args.data / "stsb")["train"]
            self.train_texts = [*train["sentence1"], *train["sentence2"]]
            self.described = "STS-B train split sentences without scores"
            if args.pairs is not None:
                rows = zip(train["sentence1"], train["sentence2"], train["score"], strict=True)
                self.train_texts = [f"{a}\t{b}" for a, b, score in rows if float(score) >= args.pairs]
                self.described = f"STS-B train split pairs scored >= {args.pairs} (anchor, positive)"
            self.scored_on = (
                f"{len(self.sts.report)} seeded STS-B dev pairs (choosing)" if args.choose
                else f"STS-B test, {len(self.sts.report)} pairs"
            )  # fmt: skip
        elif args.task == "banking77":
            self.cls = load_classification(
                "Banking77Classification", args.data / "banking77", args.cls_train, args.test_items or args.cls_test
            )
            self.instruction = str(self.cls.instruction)
            data = LOCAL_FOLDERS["Banking77Classification"][1](args.data / "banking77")
            self.train_texts = list(data["train"]["text"])
            self.described = "Banking77 train split texts without labels"
            self.scored_on = f"Banking77 test sample, {len(self.cls.test)} items"
        else:
            from nosink.evals.ner import load_conll

            train = load_conll(args.data / "conll2003", "train")
            self.ner_train = train[: args.ner_train]
            self.ner_dev = load_conll(args.data / "conll2003", "dev")[: args.test_items or args.ner_dev]
            self.train_texts = [" ".join(s.words) for s in train]
            self.described = "CoNLL-2003 train split sentences (words joined by spaces) without tags"
            self.scored_on = f"CoNLL-2003 dev, reporting half of the first {len(self.ner_dev)} sentences"

    def sentences(self) -> list[str]:
        return list(dict.fromkeys(s.replace("\n", " ").strip() for s in self.train_texts if s.strip()))

    def encoder(self, encoder: EncoderFromDecoder, spec: str, exit_layer: int | None) -> stats.Statistic:
        if self.task == "ner":
            return self._ner(encoder, Candidate("F*" if spec == "F*" else "SUGGESTED", spec, exit_layer))
        return self._task().report_statistic(
            cached(lambda todo: encoder.encode(todo, self.instruction, batch_size=32, show_progress_bar=False))
        )

    def minilm(self) -> stats.Statistic:
        folder = baseline_folder("all-MiniLM-L6-v2")
        if self.task == "ner":
            from nosink.evals.baselines import TokenFeatures

            return self._ner(TokenFeatures(folder), Candidate("F*", "F*"))
        from sentence_transformers import SentenceTransformer

        minilm = SentenceTransformer(str(folder), device="cpu")
        return self._task().report_statistic(cached(lambda todo: minilm.encode(todo, batch_size=32)))

    def _task(self):
        return self.sts if self.task == "sts" else self.cls

    def _ner(self, features, candidate: Candidate) -> stats.Statistic:
        from nosink.evals.study.ner import ner_study

        return ner_study(features, self.ner_train, self.ner_dev, [candidate]).report[candidate]


def timed(score: Callable[..., stats.Statistic], *args) -> tuple[stats.Statistic, stats.Interval, float]:
    start = time.perf_counter()
    statistic = score(*args)
    return statistic, stats.bootstrap_ci(statistic), time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=sorted(DEFAULTS), default="sts")
    p.add_argument("--model", default="demo", help="the decoder (default: SmolLM2-135M-Instruct)")
    p.add_argument("--spec", default=None, help="default: the study's best training-free spec for SmolLM2")
    p.add_argument("--exit-layer", type=int, default=None, help="default: that configuration's exit")
    p.add_argument("--data", type=Path, required=True, help="the folder holding stsb/, banking77/, conll2003/")
    p.add_argument("--out", type=Path, required=True, help="where the fine-tuned folder goes")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--minutes", type=float, default=25.0)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--objective", nargs="+", default=["simcse"])
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--attention-dropout", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-only", action="store_true", help="score the folder --out holds; train nothing")
    p.add_argument("--resume", action="store_true", help="train on from the checkpoint in --out (a larger --steps)")
    p.add_argument("--test-items", type=int, default=None, help="a smaller test sample (a smoke run only)")
    p.add_argument(
        "--choose",
        type=int,
        default=None,
        metavar="N",
        help="sts: score on N seeded dev pairs (the study's choosing sample) instead of test",
    )
    p.add_argument(
        "--scores",
        nargs="+",
        default=list(ENCODERS),
        choices=list(ENCODERS),
        help="which encoders to score (default: all three)",
    )
    p.add_argument(
        "--pairs",
        type=float,
        default=None,
        metavar="MIN_SCORE",
        help="sts: train on the STS-B train pairs scored >= MIN_SCORE (supervised; use --objective mnrl)",
    )
    p.add_argument("--cls-train", type=int, default=770, help="banking77: the study's training sample")
    p.add_argument("--cls-test", type=int, default=770, help="banking77: the study's test sample")
    p.add_argument("--ner-train", type=int, default=600, help="ner: the study's probe training sentences")
    p.add_argument("--ner-dev", type=int, default=600, help="ner: the study's dev sentences (halved)")
    p.add_argument("--autocast", choices=["bfloat16"], default=None, help="mixed precision (AMX CPUs: ~1.35x faster)")
    p.add_argument("--lora-layers", default="converted", help="'converted': the backward stops at the first one")
    args = p.parse_args()
    if args.choose and args.task != "sts":
        p.error("--choose is for --task sts (banking77 and ner keep the study's own samples)")
    if args.pairs is not None and (args.task != "sts" or args.objective != ["mnrl"]):
        p.error("--pairs is for --task sts with --objective mnrl (the pairs are anchors and positives)")
    if "fine-tuned" not in args.scores:
        p.error("--scores must include fine-tuned: the paired differences are taken against it")
    spec, exit_layer, metric = DEFAULTS[args.task]
    args.spec = args.spec or spec
    args.exit_layer = exit_layer if args.exit_layer is None else args.exit_layer

    scorer = Scorer(args)
    sentences = scorer.sentences()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    texts = args.out.parent / f"{args.out.name}-train-sentences.txt"
    texts.write_text("\n".join(sentences) + "\n", encoding="utf-8")

    options = FinetuneOptions(
        objectives=tuple(args.objective), steps=args.steps, minutes=args.minutes, batch_size=args.batch_size,
        learning_rate=args.lr, max_length=args.max_length, instruction=scorer.instruction,
        exit_layer=args.exit_layer, attention_dropout=args.attention_dropout, seed=args.seed,
        lora_layers=args.lora_layers, checkpoint_every=50, autocast=args.autocast,
    )  # fmt: skip
    model = str(resolve_model(args.model))
    # The code that runs is the checkout's at the start (a commit made during a long run must not be named).
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True).stdout.strip()
    payload: dict = {"command": "python benchmarks/finetune_tasks.py " + " ".join(
        f"--{k.replace('_', '-')}" + ("" if v is True else " " + " ".join(shlex.quote(str(x)) for x in (
            v if isinstance(v, list) else [v])))
        for k, v in vars(args).items() if v not in (None, False)
    )}  # fmt: skip
    if args.eval_only:
        meta = json.loads((args.out / "nosink.json").read_text(encoding="utf-8"))["training"]
        steps, seconds, train_peak, losses = meta["steps"], meta["seconds"], None, []
    else:
        result = finetune(model, args.spec, texts, args.out, options, resume=args.resume)
        steps, seconds, train_peak, losses = result.steps, result.seconds, peak_mib(), result.losses
        print(f"trained {steps} steps in {seconds / 60:.1f} min, peak RSS {train_peak:.0f} MiB")
    payload |= {
        "commit": commit + (" (with uncommitted changes)" if dirty else ""),
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, CPU",
        "task": args.task, "metric": metric, "model": model, "spec": args.spec, "exit_layer": args.exit_layer,
        "training_data": f"{scorer.described} ({len(sentences)} unique)",
        "options": options.to_dict(), "steps": steps, "training_minutes": round(seconds / 60, 2),
        "loss_first_10": [round(x, 4) for x in losses[:10]], "loss_last_10": [round(x, 4) for x in losses[-10:]],
        "peak_rss_mib_after_training": None if train_peak is None else round(train_peak),
        "scores": {}, "paired_differences": {}, "scoring_seconds": {},
    }  # fmt: skip

    def interval(ci: stats.Interval) -> dict:
        return {"estimate": round(ci.estimate, 4), "low": round(ci.low, 4), "high": round(ci.high, 4)}

    statistics: dict[str, stats.Statistic] = {}

    def record(name: str, scored: tuple) -> None:
        statistic, ci, secs = scored
        print(name, ci)
        payload["test_units"] = statistic.n
        payload["scores"][name] = interval(ci)
        payload["scoring_seconds"][name] = round(secs)
        if name != "fine-tuned":
            c = stats.compare(statistics["fine-tuned"], statistic)
            delta = {**interval(c.delta), "p_value": round(c.p_value, 4)}
            payload["paired_differences"][f"fine-tuned - {name}"] = delta
        statistics[name] = statistic
        if args.json:  # after each score, so that a run cut short keeps what it has
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")

    payload["scored_on"] = scorer.scored_on
    tuned = EncoderFromDecoder.from_pretrained(args.out)
    record("fine-tuned", timed(scorer.encoder, tuned, args.spec, args.exit_layer))
    del tuned
    if "all-MiniLM-L6-v2" in args.scores:
        record("all-MiniLM-L6-v2", timed(scorer.minilm))
    if "training-free" in args.scores:
        plain = EncoderFromDecoder.from_pretrained(model, args.spec, exit_layer=args.exit_layer)
        record("training-free", timed(scorer.encoder, plain, args.spec, args.exit_layer))
    print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
