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

NER (``--task ner``, ``--data`` the CoNLL-2003 folder): the study's probe protocol (linear probes on the first
``--n-train`` training sentences with seeds 0, 1 and 2; the first ``--n-test`` dev sentences cut in seeded halves),
the depth chosen on the choosing half, the gain reported on the other, sentences as units. The encoder that
prepends gets one more token (``max_length`` 33 against 32) so that both read the same words.
Retrieval (``--task scifact|nfcorpus``, ``--data`` the BEIR folder): the test queries in seeded halves, the depth
chosen on the first, nDCG@10 (mteb's metric code) reported on the second; the full corpus, or the study's quick
mode with ``--queries``, ``--other-docs`` and ``--doc-words``.

    python benchmarks/prepend_gain.py --task ner --data ../shared/data/conll2003 --spec "F* | B*11 | M0B*4" \
        --exit-layer 20 --depths 1 2 4 --json out.json
    python benchmarks/prepend_gain.py --task scifact --data ../shared/data/scifact --spec "F* | B*13 | M0B*2" \
        --queries 60 --other-docs 90 --doc-words 64 --depths 1 2 4 --json out.json

Prints one line per depth (dev score), then the chosen depth's test score beside the same configuration
without prepending and the paired difference.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from pathlib import Path

# Classification tasks: the study's task name and its default sample sizes (docs/results/study.md).
TASKS = {
    "sts": ("STSBenchmark", None, None),
    "banking77": ("Banking77Classification", 770, 770),
    "emotion": ("EmotionClassification", 500, 500),
    "ner": ("CoNLL-2003", 600, 600),  # the study's sentences: the first 600 train and dev sentences
    "scifact": ("SciFact", None, None),
    "nfcorpus": ("NFCorpus", None, None),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="demo", help="a decoder folder, hub id or short name")
    p.add_argument("--task", choices=sorted(TASKS), default="sts")
    p.add_argument("--data", required=True, help="the task's folder (STS-B: sts-dev.csv, sts-test.csv)")
    p.add_argument("--n-train", type=int, default=None, help="classification, NER: training items")
    p.add_argument("--n-test", type=int, default=None, help="classification: test items; NER: dev sentences")
    p.add_argument("--queries", type=int, default=None, help="retrieval quick mode: a seeded sample of test queries")
    p.add_argument("--other-docs", type=int, default=None, help="retrieval quick mode: unjudged documents kept")
    p.add_argument("--doc-words", type=int, default=None, help="retrieval quick mode: documents cut to these words")
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
    from nosink.models.weights import MODELS, model_path

    model = model_path(args.model) if args.model in MODELS else args.model
    plain = EncoderFromDecoder.from_pretrained(model, args.spec, exit_layer=args.exit_layer, sink_token=args.sink_token)

    def prepending(depth: int | None) -> EncoderFromDecoder:
        """The configuration's encoder over the same weights, prepending before layers 1..depth (None: ``plain``)."""
        if depth is None:
            return plain
        return EncoderFromDecoder.from_model(
            plain.decoder, args.spec, plain.tokenizer, exit_layer=args.exit_layer, sink_token=args.sink_token,
            prepend=depth,
        )  # fmt: skip

    seconds: dict[str, float] = {}
    pooling = args.pooling or ("last" if args.template else "mean")
    gain_of = ner_gain if args.task == "ner" else partial(vector_gain, pooling=pooling)
    name, scores, base_dev, best, with_tp, without = gain_of(args, prepending, seconds)
    gain = stats.compare(with_tp, without)
    chosen = prepending(best).plan
    ci_with, ci_without = stats.bootstrap_ci(with_tp), stats.bootstrap_ci(without)
    print(f"test ({with_tp.n} units): {plain.plan.name}: {ci_without.estimate:.4f} "
          f"[{ci_without.low:.4f}, {ci_without.high:.4f}]")  # fmt: skip
    print(f"test: {chosen.name}: {ci_with.estimate:.4f} [{ci_with.low:.4f}, {ci_with.high:.4f}]")
    print(f"gain: {gain.delta.estimate:+.4f} [{gain.delta.low:+.4f}, {gain.delta.high:+.4f}], p = {gain.p_value:.3f}")
    print("seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()))
    if args.json:
        args.json.write_text(json.dumps({
            "model": Path(str(model)).name, "spec": args.spec, "template": args.template, "pooling": pooling,
            "task": name, "exit_layer": args.exit_layer, "sink_token": args.sink_token,
            "test_units": with_tp.n, "dev_without": base_dev, "dev_by_depth": scores, "chosen_depth": best,
            "test_without": [ci_without.estimate, ci_without.low, ci_without.high],
            "test_with": [ci_with.estimate, ci_with.low, ci_with.high],
            "gain": [gain.delta.estimate, gain.delta.low, gain.delta.high], "p_value": gain.p_value,
            "seconds": seconds,
        }, indent=2) + "\n")  # fmt: skip


def _print_choice(name: str, base_dev: float, scores: dict[int, float]) -> int:
    print(f"{name}, choosing: without {base_dev:.4f}")
    for k, score in scores.items():
        print(f"choosing: prepend 1..{k}: {score:.4f} ({score - base_dev:+.4f})")
    return max(scores, key=scores.get)  # type: ignore[arg-type]


def vector_gain(args, prepending, seconds, pooling):
    """STS, classification, retrieval: each depth's choosing score, the chosen depth, both reporting statistics."""
    from nosink.evals.study.cache import EmbeddingCache
    from nosink.evals.study.candidates import Candidate
    from nosink.evals.study.loaders import load_classification, load_retrieval, load_sts

    name, n_train, n_test = TASKS[args.task]
    if args.task == "sts":
        task = load_sts(args.data, args.choose, args.report)
    elif args.task in ("scifact", "nfcorpus"):
        task = load_retrieval(name, args.data, args.queries, args.other_docs, doc_words=args.doc_words)
        print(f"{name}: {len(task.choose)} + {len(task.report)} queries, {len(task.corpus):,} documents"
              f"{'; quick mode: ' + task.quick if task.quick else ' (the full corpus)'}")  # fmt: skip
    else:
        task = load_classification(name, args.data, args.n_train or n_train, args.n_test or n_test)
    instruction = None if args.template else task.instruction
    # one cache of vectors per encoder (each text encoded once per configuration; retrieval's corpus serves both halves)
    caches = {k: EmbeddingCache(prepending(k), args.template, instruction, args.batch_size, pooling=pooling)
              for k in [None, *args.depths]}  # fmt: skip
    candidate = Candidate("F*", args.spec, args.exit_layer)

    def lookup(k):
        return lambda texts: caches[k].vectors([candidate], texts)[candidate.name]

    scores = {k: task.choose_score(lookup(k)) for k in args.depths}
    base_dev = task.choose_score(lookup(None))
    best = _print_choice(task.name, base_dev, scores)
    with_tp, without = task.report_statistic(lookup(best)), task.report_statistic(lookup(None))
    for k, cache in caches.items():
        seconds[f"{'plain' if k is None else f'prepend {k}'}"] = cache.seconds  # choosing and reporting
    return task.name, scores, base_dev, best, with_tp, without


def ner_gain(args, prepending, seconds):
    """NER: the study's probes (three seeds, dev in seeded halves) without prepending and at each depth."""
    from dataclasses import replace

    from nosink.evals.ner import NERConfig, load_conll
    from nosink.evals.study.candidates import Candidate
    from nosink.evals.study.ner import ner_study

    _, n_train, n_dev = TASKS["ner"]
    train = load_conll(args.data, "train")[: args.n_train or n_train]
    dev = load_conll(args.data, "dev")[: args.n_test or n_dev]
    print(f"CoNLL-2003: {len(train)} training sentences, {len(dev)} dev sentences in halves")
    candidate = Candidate("F*", args.spec, args.exit_layer)
    config = NERConfig()
    start = time.perf_counter()
    without = ner_study(prepending(None), train, dev, [candidate], config=config)
    seconds["plain"] = time.perf_counter() - start
    studies = {}
    for k in args.depths:  # one encoder a depth: ner_study takes specs, each encoder its own prepend
        tp = prepending(k)
        start = time.perf_counter()
        # one more token for the placeholder, so that both encoders read the same words
        studies[k] = ner_study(tp, train, dev, [candidate], config=replace(config, max_length=config.max_length + 1))
        seconds[f"prepend {k}"] = time.perf_counter() - start
    scores = {k: s.choose[candidate] for k, s in studies.items()}
    best = _print_choice("CoNLL-2003 NER", without.choose[candidate], scores)
    with_tp, plain_report = studies[best].report[candidate], without.report[candidate]
    return "CoNLL-2003 NER", scores, without.choose[candidate], best, with_tp, plain_report


if __name__ == "__main__":
    main()
