"""Fine-tune a converted decoder on unlabelled STS-B training sentences, then score STS-B test beside the baselines.

    nice -n 5 python benchmarks/finetune_sts.py --data ../shared/data --out /tmp/ft-sts \\
        --json benchmarks/results/finetune-sts/result.json

Training data: the sentences of STS-B's *train* split (both sides of every pair, deduplicated), without their
scores: unlabelled text of the task's domain. Training runs through ``nosink.finetune.finetune`` (LoRA, the
spec's masks), with the STS instruction the study scores with. Then STS-B's full test split is scored with the
study's own task code (``evals/study``: cosine similarities, Spearman, pairs as bootstrap units) for

- the fine-tuned encoder (the folder ``finetune`` wrote, loaded with ``from_pretrained``),
- the same spec and exit without training (the study's training-free best for SmolLM2-135M),
- all-MiniLM-L6-v2 (sentence-transformers, no instruction), as the study scores it,

each with a 95% bootstrap interval, and the paired differences. Peak memory is the process's maximum resident
set size (``ru_maxrss``) when training ends (loading included).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import shlex
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

from nosink.evals import stats
from nosink.evals.baselines import baseline_folder
from nosink.evals.mteb_data import LOCAL_FOLDERS
from nosink.evals.study.loaders import load_sts
from nosink.finetune import FinetuneOptions, finetune
from nosink.models import EncoderFromDecoder
from nosink.models.weights import resolve_model


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


def score(task, encode) -> tuple[stats.Statistic, stats.Interval, float]:
    start = time.perf_counter()
    statistic = task.report_statistic(cached(encode))
    return statistic, stats.bootstrap_ci(statistic), time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="demo", help="the decoder (default: SmolLM2-135M-Instruct)")
    p.add_argument("--spec", default="F* | B*13 | M0B*2", help="the study's best training-free spec for SmolLM2")
    p.add_argument("--exit-layer", type=int, default=25)
    p.add_argument("--data", type=Path, required=True, help="the folder holding stsb/")
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
    p.add_argument("--test-pairs", type=int, default=None, help="a seeded sample of test pairs (a smoke run only)")
    p.add_argument("--lora-layers", default="converted", help="'converted': the backward stops at layer 10")
    args = p.parse_args()

    task = load_sts(args.data / "stsb", 0, args.test_pairs)  # the full test split; the instruction the study uses
    train = LOCAL_FOLDERS["STSBenchmark"][1](args.data / "stsb")["train"]
    sentences = list(dict.fromkeys(s.strip() for s in [*train["sentence1"], *train["sentence2"]] if s.strip()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    texts = args.out.parent / f"{args.out.name}-train-sentences.txt"
    texts.write_text("\n".join(s.replace("\n", " ") for s in sentences) + "\n", encoding="utf-8")

    options = FinetuneOptions(
        objectives=tuple(args.objective), steps=args.steps, minutes=args.minutes, batch_size=args.batch_size,
        learning_rate=args.lr, max_length=args.max_length, instruction=task.instruction, exit_layer=args.exit_layer,
        attention_dropout=args.attention_dropout, seed=args.seed, lora_layers=args.lora_layers, checkpoint_every=50,
    )  # fmt: skip
    model = str(resolve_model(args.model))
    payload: dict = {"command": "nice -n 5 python benchmarks/finetune_sts.py " + " ".join(
        f"--{k.replace('_', '-')}" + ("" if v is True else " " + " ".join(shlex.quote(str(x)) for x in (
            v if isinstance(v, list) else [v])))
        for k, v in vars(args).items() if v not in (None, False)
    )}  # fmt: skip
    if args.eval_only:
        meta = json.loads((args.out / "nosink.json").read_text(encoding="utf-8"))["training"]
        steps, seconds, train_peak, losses = meta["steps"], meta["seconds"], None, []
    else:
        result = finetune(model, args.spec, texts, args.out, options)
        steps, seconds, train_peak, losses = result.steps, result.seconds, peak_mib(), result.losses
        print(f"trained {steps} steps in {seconds / 60:.1f} min, peak RSS {train_peak:.0f} MiB")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    payload |= {
        "commit": commit,
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, CPU",
        "model": model, "spec": args.spec, "exit_layer": args.exit_layer,
        "training_data": f"STS-B train split sentences without scores ({len(sentences)} unique)",
        "options": options.to_dict(), "steps": steps, "training_minutes": round(seconds / 60, 2),
        "loss_first_10": [round(x, 4) for x in losses[:10]], "loss_last_10": [round(x, 4) for x in losses[-10:]],
        "peak_rss_mib_after_training": None if train_peak is None else round(train_peak),
        "stsb_test_spearman": {}, "paired_differences": {}, "scoring_seconds": {},
    }  # fmt: skip

    def interval(ci: stats.Interval) -> dict:
        return {"estimate": round(ci.estimate, 4), "low": round(ci.low, 4), "high": round(ci.high, 4)}

    def record(name: str, scored: tuple) -> None:
        statistic, ci, secs = scored
        print(name, ci)
        payload["test_pairs"] = statistic.n
        payload["stsb_test_spearman"][name] = interval(ci)
        payload["scoring_seconds"][name] = round(secs)
        if name != "fine-tuned":
            c = stats.compare(statistics["fine-tuned"], statistic)
            payload["paired_differences"][f"fine-tuned - {name}"] = {
                **interval(c.delta),
                "p_value": round(c.p_value, 4),
            }
        statistics[name] = statistic
        if args.json:  # after each score, so that a run cut short keeps what it has
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")

    statistics: dict[str, stats.Statistic] = {}

    def nosink_encode(encoder):
        return lambda todo: encoder.encode(todo, task.instruction, batch_size=32, show_progress_bar=False)

    tuned = EncoderFromDecoder.from_pretrained(args.out)
    record("fine-tuned", score(task, nosink_encode(tuned)))
    del tuned
    from sentence_transformers import SentenceTransformer

    minilm = SentenceTransformer(str(baseline_folder("all-MiniLM-L6-v2")), device="cpu")
    record("all-MiniLM-L6-v2", score(task, lambda todo: minilm.encode(todo, batch_size=32)))
    plain = EncoderFromDecoder.from_pretrained(model, args.spec, exit_layer=args.exit_layer)
    record("training-free", score(task, nosink_encode(plain)))
    print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
