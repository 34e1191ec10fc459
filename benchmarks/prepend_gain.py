"""Token Prepending's gain on a task: the same configuration with and without it, a paired bootstrap interval.

STS-B (``--task sts``): the depth is chosen on STS-B dev pairs (a seeded sample) and the gain reported on the full
test set (1,379 pairs), pairs as units. Banking77 and Emotion (``--task banking77|emotion``, ``--data`` their
folder): the study's protocol, a logistic regression on the vectors, the depth chosen on a stratified holdout of
the seeded training sample, the gain reported on the seeded test sample, items as units. Both configurations are
scored on the same resamples (``nosink.evals.stats.compare``).
Several depths share one pass (plans that prepend over different layers share a batch); the configuration
without prepending runs through a second encoder over the same weights.

    python benchmarks/prepend_gain.py --model demo --data ../shared/data/stsb --spec "F*" --template PromptEOL \
        --pooling last --depths 2 4 6 8 --choose 300 --json out.json
    python benchmarks/prepend_gain.py --task banking77 --data ../shared/data/banking77 --spec "F* | B*13 | M0B*2" \
        --template PromptEOL --n-train 770 --n-test 770 --depths 1 2 4 --json out.json

Prints one line per depth (dev score), then the chosen depth's test score beside the same configuration
without prepending and the paired difference.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

# Classification tasks: the study's task name and its default sample sizes (docs/results/study.md).
TASKS = {
    "sts": ("STSBenchmark", None, None),
    "banking77": ("Banking77Classification", 770, 770),
    "emotion": ("EmotionClassification", 500, 500),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="demo", help="a decoder folder, hub id or short name")
    p.add_argument("--task", choices=sorted(TASKS), default="sts")
    p.add_argument("--data", required=True, help="the task's folder (STS-B: sts-dev.csv, sts-test.csv)")
    p.add_argument("--n-train", type=int, default=None, help="classification: training items (default: the study's)")
    p.add_argument("--n-test", type=int, default=None, help="classification: test items (default: the study's)")
    p.add_argument("--spec", default="F*")
    p.add_argument("--template", default=None, help="a preset's name (none: the paper's instruction, mean pooling)")
    p.add_argument("--pooling", default=None, help="default: last with a template, mean without")
    p.add_argument("--exit-layer", type=int, default=None)
    p.add_argument("--depths", type=int, nargs="+", default=[2, 4, 6, 8])
    p.add_argument("--sink-token", default="auto")
    p.add_argument("--choose", type=int, default=300, help="dev pairs to choose the depth on (seeded sample)")
    p.add_argument("--report", type=int, default=None, help="test pairs to report on (default: all)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()

    from nosink import EncoderFromDecoder
    from nosink.evals import stats
    from nosink.evals.study.loaders import load_classification, load_sts
    from nosink.models.weights import MODELS, model_path

    if args.task == "sts":
        task = load_sts(args.data, args.choose, args.report)
    else:
        name, n_train, n_test = TASKS[args.task]
        task = load_classification(name, args.data, args.n_train or n_train, args.n_test or n_test)
    pooling = args.pooling or ("last" if args.template else "mean")
    instruction = None if args.template else task.instruction
    model = model_path(args.model) if args.model in MODELS else args.model
    plain = EncoderFromDecoder.from_pretrained(model, args.spec, exit_layer=args.exit_layer, sink_token=args.sink_token)
    tp = EncoderFromDecoder.from_model(
        plain.decoder, args.spec, plain.tokenizer, exit_layer=args.exit_layer, sink_token=args.sink_token,
        prepend=args.depths[0],
    )  # fmt: skip
    seconds: dict[str, float] = {}

    def vectors(encoder, plans, texts, label):
        start = time.perf_counter()
        out = encoder.encode_specs(
            plans, texts, instruction, template=args.template, pooling=pooling, batch_size=args.batch_size
        )
        seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - start
        return {name: dict(zip(texts, v, strict=True)) for name, v in out.items()}

    def lookup(table):
        return lambda ts: np.stack([table[t] for t in ts])

    plans = [tp.plan_for(args.spec, prepend=k) for k in args.depths]
    choose_texts, report_texts = task.texts("choose"), task.texts("report")
    dev = vectors(tp, plans, choose_texts, "prepend, dev")
    dev_plain = vectors(plain, [plain.plan], choose_texts, "plain, dev")[plain.plan.name]
    scores = {k: task.choose_score(lookup(dev[plan.name])) for k, plan in zip(args.depths, plans, strict=True)}
    base_dev = task.choose_score(lookup(dev_plain))
    print(f"{task.name}, choosing: without {base_dev:.4f}")
    for k, score in scores.items():
        print(f"choosing: prepend 1..{k}: {score:.4f} ({score - base_dev:+.4f})")
    best = max(scores, key=scores.get)  # type: ignore[arg-type]
    chosen = tp.plan_for(args.spec, prepend=best)
    test = vectors(tp, [chosen], report_texts, "prepend, test")[chosen.name]
    test_plain = vectors(plain, [plain.plan], report_texts, "plain, test")[plain.plan.name]
    with_tp, without = task.report_statistic(lookup(test)), task.report_statistic(lookup(test_plain))
    gain = stats.compare(with_tp, without)
    ci_with, ci_without = stats.bootstrap_ci(with_tp), stats.bootstrap_ci(without)
    print(f"test ({with_tp.n} units): {plain.plan.name}: {ci_without.estimate:.4f} "
          f"[{ci_without.low:.4f}, {ci_without.high:.4f}]")  # fmt: skip
    print(f"test: {chosen.name}: {ci_with.estimate:.4f} [{ci_with.low:.4f}, {ci_with.high:.4f}]")
    print(f"gain: {gain.delta.estimate:+.4f} [{gain.delta.low:+.4f}, {gain.delta.high:+.4f}], p = {gain.p_value:.3f}")
    print("seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()))
    if args.json:
        args.json.write_text(json.dumps({
            "model": Path(str(model)).name, "spec": args.spec, "template": args.template, "pooling": pooling,
            "task": task.name, "exit_layer": args.exit_layer, "sink_token": args.sink_token,
            "test_units": with_tp.n, "dev_without": base_dev, "dev_by_depth": scores, "chosen_depth": best,
            "test_without": [ci_without.estimate, ci_without.low, ci_without.high],
            "test_with": [ci_with.estimate, ci_with.low, ci_with.high],
            "gain": [gain.delta.estimate, gain.delta.low, gain.delta.high], "p_value": gain.p_value,
            "seconds": seconds,
        }, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
