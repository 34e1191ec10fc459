"""How close ``nosink tune``'s choice comes to the best configuration it tried, on real tasks (issue 30's target:
within 1 point on the reporting split for at least 6 of 8 model-task pairs).

For each model and task this writes a seeded sample of a task's *test* split in the format ``nosink tune`` reads
(``evals/study/userdata.py``), runs :func:`nosink.evals.study.tune.tune` on it (which cuts it into a choosing and
a reporting split itself and chooses on the first only), and reads from its ``tune.json`` the chosen
configuration's reporting score, the best reporting score among everything it tried, and ``F*``'s:

    python benchmarks/tune_check.py --data ../shared/data --models demo gemma-3-270m \\
        --tasks sts banking77 emotion ner --work /tmp/tune-check --json benchmarks/results/tune-check/result.json

Tasks: ``sts`` (STS-B test pairs, scores 0-5), ``banking77`` and ``emotion`` (test texts with their labels,
``--task classification``), ``ner`` (CoNLL-2003 *dev* sentences: the local copy has no test split). A point is
0.01 of the metric (Spearman, accuracy, entity F1).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import subprocess
import time
from pathlib import Path

from nosink.evals.mteb_data import LOCAL_FOLDERS
from nosink.evals.study.tune import TuneOptions, tune

FOLDERS = {"sts": "stsb", "banking77": "banking77", "emotion": "emotion", "ner": "conll2003"}
MTEB = {"sts": "STSBenchmark", "banking77": "Banking77Classification", "emotion": "EmotionClassification"}


def export(task: str, data: Path, out: Path, n: int, seed: int) -> tuple[Path, str]:
    """A seeded sample of ``n`` test items of ``task`` in tune's format: ``(file, tune's task name)``."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    if task == "ner":
        from nosink.evals.ner import load_conll

        sentences = load_conll(data / FOLDERS[task], "dev")  # the shared copy has no test split
        picked = sorted(rng.sample(range(len(sentences)), min(n, len(sentences))))
        path = out / "ner.conll"
        blocks = ["\n".join(f"{w} {t}" for w, t in zip(sentences[i].words, sentences[i].tags, strict=True))
                  for i in picked]  # fmt: skip
        path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
        return path, "ner"
    test = LOCAL_FOLDERS[MTEB[task]][1](data / FOLDERS[task])["test"]
    if task == "sts":
        rows = list(zip(test["sentence1"], test["sentence2"], test["score"], strict=True))
        header = ["sentence1", "sentence2", "score"]
    else:
        rows = list(zip(test["text"], test["label"], strict=True))
        header = ["text", "label"]
    rows = [rows[i] for i in sorted(rng.sample(range(len(rows)), min(n, len(rows))))]
    path = out / f"{task}.tsv"
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_MINIMAL)
        writer.writerow(header)
        writer.writerows(rows)
    return path, "sts" if task == "sts" else "classification"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--data", type=Path, required=True, help="the folder holding stsb/, banking77/, emotion/, conll2003/"
    )
    p.add_argument("--models", nargs="+", default=["demo"])
    p.add_argument("--tasks", nargs="+", default=["sts", "banking77", "emotion", "ner"], choices=sorted(FOLDERS))
    p.add_argument("--items", type=int, nargs="+", default=[600, 1000, 600, 600],
                   help="test items sampled per task, in --tasks order")  # fmt: skip
    p.add_argument("--templates", nargs="+", default=["instruction", "PromptEOL"])
    p.add_argument("--prepends", type=int, nargs="+", default=[0], help="Token Prepending depths (0: none)")
    p.add_argument("--work", type=Path, required=True, help="data files and encoder folders go here")
    p.add_argument("--json", type=Path, help="write the rows here (after each pair)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows = []
    for model in args.models:
        for task, n in zip(args.tasks, args.items, strict=False):
            path, kind = export(task, args.data, args.work / "data", n, args.seed)
            options = TuneOptions(
                model=model, task=kind, data=path, out=args.work / f"{model}-{task}", templates=tuple(args.templates),
                prepends=tuple(d or None for d in args.prepends), seed=args.seed, progress=False,
            )  # fmt: skip
            start = time.perf_counter()
            payload = tune(options).payload
            chosen, best, base = payload["chosen"], payload["best_reported"], payload["F*"]
            gap = best["report"] - chosen["report"]
            row = {
                "model": model, "task": task, "items": n, "chosen": f"{chosen['template']} / {chosen['name']}",
                "chosen_report": chosen["report"], "chosen_low": chosen["low"], "chosen_high": chosen["high"],
                "best": f"{best['template']} / {best['name']}", "best_report": best["report"],
                "F*_report": base["report"], "gap_points": round(100 * gap, 2), "within_1_point": gap <= 0.01,
                "tried": len(payload["tried"]), "minutes": round((time.perf_counter() - start) / 60, 1),
                "chosen_prepend": chosen.get("prepend"), "best_prepend": best.get("prepend"),
                "sink_token": payload.get("sink_token"), "sink_attention": payload.get("sink_attention"),
            }  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps({"commit": commit, "args": {k: str(v) for k, v in vars(args).items()},
                                                 "rows": rows}, indent=2) + "\n", encoding="utf-8")  # fmt: skip
    print("\n| model | task | chosen | its report | best tried | its report | gap (points) | F* |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        r = {k: v.replace("|", "\\|") if isinstance(v, str) else v for k, v in r.items()}
        print(f"| {r['model']} | {r['task']} | {r['chosen']} | {r['chosen_report']:.3f} | {r['best']} | "
              f"{r['best_report']:.3f} | {r['gap_points']:.2f} | {r['F*_report']:.3f} |")  # fmt: skip
    print(f"\nwithin 1 point: {sum(r['within_1_point'] for r in rows)} of {len(rows)}")


if __name__ == "__main__":
    main()
