"""Full-corpus retrieval (SciFact, NFCorpus) through the study's retrieval path, with the encoding on another machine.

The study's :class:`~nosink.evals.study.RetrievalTask` and :class:`~nosink.evals.study.EmbeddingCache` do the
work; this script only splits it in three steps so that the encoding can run where a GPU is (a full corpus is
hours of CPU time for even a 135M model: benchmarks/results/retrieval-full.md says why):

1. ``export``: the task as the study loads it (:func:`~nosink.evals.study.load_retrieval`, full corpus, every
   test query, the seeded halves), written as JSON: no ``datasets`` needed where it is read;
2. ``embed``: every query and document encoded under each spec and Token Prepending depth (the specs of a depth
   in one :class:`~nosink.evals.study.EmbeddingCache` pass, shared layers once), and each query's top 100
   documents by cosine (:meth:`RetrievalTask.rankings`), written as one small ``rankings.npz`` with the
   encoding speed: no mteb needed there;
3. ``score``: nDCG@10 by mteb's evaluator (:meth:`RetrievalTask.scores_of`) over all test queries (MTEB's
   number), on the choosing half, and on the reporting half with its bootstrap interval (the study's number);
   the configuration chosen on the choosing half, and each spec's Token Prepending gain (depth chosen on the
   choosing half, paired interval on the reporting half). Several folders (runs split over calls, one per
   template) are scored as one set, the choice made over all their configurations.

    python benchmarks/retrieval_full.py export SciFact ../shared/data/scifact scifact.json
    python benchmarks/retrieval_full.py embed scifact.json MODEL --specs "F*" "F* | B*13 | M0B*2" \
        --prepend 0 1 2 --device cuda --out smollm2-scifact
    python benchmarks/retrieval_full.py score scifact.json smollm2-scifact smollm2-scifact.json
    python benchmarks/retrieval_full.py score scifact.json run1 run2 both.json  # one choice over both runs
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np


def export(name: str, folder: Path, out: Path) -> None:
    """Write the study's task (full corpus) as JSON."""
    from nosink.evals.study import load_retrieval

    task = load_retrieval(name, folder)
    assert task.quick is None
    payload = {
        "name": task.name, "query_instruction": task.query_instruction,
        "choose": task.choose, "report": task.report, "corpus": task.corpus,
        "relevant": {q: dict(r) for q, r in task.relevant.items()},
    }  # fmt: skip
    out.write_text(json.dumps(payload))


def _task(path: Path):
    from nosink.evals.study import RetrievalTask

    d = json.loads(path.read_text())
    tuples = {k: [tuple(x) for x in d[k]] for k in ("choose", "report", "corpus")}
    return RetrievalTask(d["name"], relevant=d["relevant"], query_instruction=d["query_instruction"], **tuples)


def _configs(args: argparse.Namespace) -> list[dict]:
    """Every configuration an ``embed`` run scores: each spec at each prepend depth (0: none)."""
    return [{"spec": s, "prepend": d} for d in args.prepend for s in args.specs]


def embed(args: argparse.Namespace) -> None:
    """Encode the task's queries and documents under each configuration and rank the corpus for every query.

    Writes one ``rankings.npz`` (each configuration's top ``k`` document indices and cosine similarities per
    query, and the run's metadata as JSON): a few MB that ``score`` turns into nDCG@10 with mteb's evaluator, so
    the encoding machine needs no mteb. Each prepend depth is its own encoder over the same weights; the specs of
    one depth share one :class:`~nosink.evals.study.EmbeddingCache` pass (their common layers run once).
    """
    import torch

    from nosink.evals.study import Candidate, EmbeddingCache, prepending
    from nosink.models import EncoderFromDecoder
    from nosink.models.loading import load_stock

    task = replace(_task(args.task), top_k=args.top_k)
    queries = list(dict.fromkeys([*task.choose, *task.report]))
    if args.st:
        _embed_trained(args, task, queries)
        return
    dtype = getattr(torch, args.dtype)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32  # float32 storage, products on TF32 tensor cores
    if args.gguf_file:
        model, tokenizer = load_stock(args.model, gguf_file=args.gguf_file)
        plain = EncoderFromDecoder.from_model(model.to(dtype), "F*", tokenizer, sink_token=args.sink_token)
    else:
        plain = EncoderFromDecoder.from_pretrained(args.model, "F*", dtype=dtype, sink_token=args.sink_token)
    plain = plain.to(args.device)
    instruction = None if args.template else task.instruction
    pooling = args.pooling or ("last" if args.template else "mean")
    cands = [Candidate("F*" if s == "F*" else f"spec{i}", s) for i, s in enumerate(args.specs)]
    docs = [t for _, t in task.corpus]
    arrays, timings = {}, {}
    for depth in args.prepend:
        encoder = plain if depth == 0 else prepending(plain, depth)
        cache = EmbeddingCache(encoder, args.template, instruction, args.batch_size, args.max_length, True, pooling)
        for what, texts in (("documents", docs), ("queries", [t for _, t in queries])):
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            cache.vectors(cands, texts)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            took = time.perf_counter() - start
            timings[f"prepend {depth}, {what}"] = {"texts": len(texts), "seconds": round(took, 2)}
            print(f"prepend {depth}, {what}", timings[f"prepend {depth}, {what}"], flush=True)
        for c in cands:
            i = args.prepend.index(depth) * len(cands) + cands.index(c)
            arrays[f"idx{i}"], arrays[f"sim{i}"] = _ranked(task, queries, partial(_lookup, cache, c))
    meta = {
        "model": Path(args.model).name, "gguf_file": args.gguf_file,
        "configs": _configs(args), "template": args.template, "pooling": pooling, "sink_token": args.sink_token,
        "timings": timings, "batch_size": args.batch_size, "max_length": args.max_length,
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "dtype": args.dtype, "tf32": args.tf32, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "note": "a prepend depth's specs in one EmbeddingCache pass (shared layers once); its seconds cover them all",
    }  # fmt: skip
    _write(args.out, arrays, meta, queries)


def _lookup(cache, candidate, texts):
    return cache.vectors([candidate], texts)[candidate.name]


def _ranked(task, queries, vectors) -> tuple[np.ndarray, np.ndarray]:
    """``task.rankings`` as arrays: ``(queries, k)`` corpus indices and their similarities, best first."""
    where = {doc: j for j, (doc, _) in enumerate(task.corpus)}
    results = task.rankings(queries, vectors)
    k = min(task.top_k, len(task.corpus))
    idx, sim = np.zeros((len(queries), k), np.int32), np.zeros((len(queries), k), np.float32)
    for row, (qid, _) in enumerate(queries):
        ranked = sorted(results[qid].items(), key=lambda kv: -kv[1])
        idx[row], sim[row] = [where[d] for d, _ in ranked], [s for _, s in ranked]
    return idx, sim


def _write(out: Path, arrays: dict, meta: dict, queries) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {**meta, "top_k": int(arrays["idx0"].shape[1]), "queries": [q for q, _ in queries]}
    np.savez_compressed(out / "rankings.npz", meta=np.array(json.dumps(meta)), **arrays)


def _embed_trained(args: argparse.Namespace, task, queries) -> None:
    """A sentence-transformers encoder (no instruction, its own ``max_seq_length``), as the study's baselines and
    MTEB run it: its rankings, and the speed."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(args.model, device=args.device)
    docs = [t for _, t in task.corpus]
    parts, timings = [], {}
    for what, texts in (("queries", [t for _, t in queries]), ("documents", docs)):
        start = time.perf_counter()
        parts.append(model.encode(texts, batch_size=args.batch_size, normalize_embeddings=True, show_progress_bar=True))
        took = time.perf_counter() - start
        timings[what] = {"texts": len(texts), "seconds": round(took, 2), "texts_per_s": round(len(texts) / took, 1)}
        print(what, timings[what], flush=True)
    lookup = dict(zip([*(t for _, t in queries), *docs], np.concatenate(parts).astype(np.float32), strict=True))
    idx, sim = _ranked(task, queries, lambda texts: np.stack([lookup[t] for t in texts]))
    name = Path(args.model).name
    meta = {
        "model": name, "configs": [{"spec": f"{name} (trained encoder)", "prepend": 0}], "template": None,
        "pooling": None,
        "timings": timings, "batch_size": args.batch_size, "max_length": model.max_seq_length,
        "device": args.device, "dtype": "float32", "torch": torch.__version__, "threads": torch.get_num_threads(),
        "note": "a sentence-transformers encoder: no instruction, texts cut at its own max_seq_length", "trained": True,
    }  # fmt: skip
    _write(args.out, {"idx0": idx, "sim0": sim}, meta, queries)


def score(args: argparse.Namespace) -> None:
    """nDCG@10 of each configuration's rankings: over all test queries (MTEB's number), on the choosing half, and
    on the reporting half with its interval; for Token Prepending, the depth chosen on the choosing half and its
    paired gain on the reporting half over the same spec without it.

    Several folders (runs split over machines or calls, or one per template) are scored as one set of
    configurations, so that the choice on the choosing half is made over all of them; a configuration (template,
    spec, depth) given twice counts once, from the first folder that has it.
    """
    if args.out.is_dir():
        raise SystemExit(f"{args.out} is a folder: the last argument is the JSON file to write")
    task = _task(args.task)
    runs = [_rankings(task, folder) for folder in args.rankings]
    _check_comparable(runs)
    rows, per_query, seen, repeated = [], [], {}, []
    for folder, meta, arrays in runs:
        position = {q: i for i, q in enumerate(meta["queries"])}
        for i, config in enumerate(meta["configs"]):
            config = {**config, "template": meta["template"]}
            key = (config["template"], config["spec"], config["prepend"])
            ranked = _in_order(meta["queries"], arrays[f"idx{i}"], arrays[f"sim{i}"])
            if key in seen:
                same = all(np.array_equal(a, b) for a, b in zip(seen[key], ranked, strict=True))
                repeated.append({**config, "folder": folder.name, "same_rankings": same})
                if not same:
                    print(f"warning: {folder}: {key} ranks otherwise than the first folder's; the first is kept")
                continue
            seen[key] = ranked
            row, report = _scored(task, config, position, arrays[f"idx{i}"], arrays[f"sim{i}"])
            rows.append(row)
            per_query.append(report)
            print(row, flush=True)
    metas = [meta for _, meta, _ in runs]
    templates = list(dict.fromkeys(m["template"] for m in metas))
    untemplated = any(m["template"] is None and not m.get("trained") for m in metas)
    payload = {
        "task": task.name, "mode": "full", "mteb_comparable": True, "n_documents": len(task.corpus),
        "metric": f"nDCG@10 by mteb's calculate_retrieval_scores (pytrec_eval), cosine top {metas[0]['top_k']}",
        "query_instruction": task.query_instruction if untemplated else None,
        "template": templates[0] if len(templates) == 1 else templates,
        "embed": [{k: v for k, v in m.items() if k != "queries"} for m in metas],
        "rankings": [folder.name for folder, _, _ in runs], "repeated": repeated, "results": rows,
        "chosen": max(rows, key=lambda r: r["choose_half"]), "prepend": _prepend_gains(rows, per_query),
    }  # fmt: skip
    print("chosen on the choosing half:", payload["chosen"])
    for gain in payload["prepend"]:
        print("prepend:", gain)
    args.out.write_text(json.dumps(payload, indent=1) + "\n")


def _scored(task, config: dict, position: dict, idx: np.ndarray, sim: np.ndarray) -> tuple[dict, np.ndarray]:
    """One configuration's row (all-query, choosing-half and reporting-half nDCG@10, the last with its interval)
    and its reporting queries' scores."""
    from nosink.evals import stats

    every_query = [*task.choose, *task.report]
    results = {
        q: {task.corpus[j][0]: float(s) for j, s in zip(idx[r], sim[r], strict=True)} for q, r in position.items()
    }
    values = dict(zip([q for q, _ in every_query], task.scores_of(every_query, results), strict=True))
    choose = np.array([values[q] for q, _ in task.choose])
    report = np.array([values[q] for q, _ in task.report])
    ci = stats.bootstrap_ci(stats.mean_of("ndcg_at_10", report), seed=0)
    row = {
        **config, "ndcg_at_10_all_queries": round(float(np.mean(list(values.values()))), 4),
        "n_queries": len(values), "choose_half": round(float(choose.mean()), 4), "report_half": round(ci.estimate, 4),
        "report_low": round(ci.low, 4), "report_high": round(ci.high, 4), "n_report": len(report),
    }  # fmt: skip
    return row, report


def _in_order(queries: list[str], idx: np.ndarray, sim: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A configuration's rankings with the queries sorted, so that two folders' can be compared."""
    order = np.argsort(queries)
    return idx[order], sim[order]


def _rankings(task, folder: Path) -> tuple[Path, dict, dict]:
    """A folder's ``rankings.npz``: its metadata and arrays, refused unless its queries are the task's test queries."""
    data = np.load(folder / "rankings.npz")
    meta = json.loads(str(data["meta"]))
    if sorted(meta["queries"]) != sorted(q for q, _ in [*task.choose, *task.report]):
        raise SystemExit(f"{folder}: the rankings' queries are not {task.name}'s test queries")
    return folder, meta, {k: data[k] for k in data.files if k != "meta"}


def _check_comparable(runs: list[tuple[Path, dict, dict]]) -> None:
    """Folders scored as one set must rank the same way (top k) from texts encoded the same way by the same model
    (sink token, length limit, dtype, TF32, and one pooling per template): only the template, specs and depths may
    differ. Folders written before ``embed`` recorded its model have none, and pass only with each other."""
    first = runs[0][1]
    pooling: dict = {}
    for folder, meta, _ in runs:
        for key in ("model", "gguf_file", "top_k", "sink_token", "max_length", "dtype", "tf32"):
            if meta.get(key) != first.get(key):
                raise SystemExit(
                    f"{folder}: its {key} is {meta.get(key)!r}, {runs[0][0]}'s is {first.get(key)!r}; "
                    "score folders encoded differently one at a time"
                )
        if pooling.setdefault(meta["template"], meta.get("pooling")) != meta.get("pooling"):
            raise SystemExit(
                f"{folder}: template {meta['template']!r} with pooling {meta.get('pooling')!r}, another folder "
                f"has it with {pooling[meta['template']]!r}; score them one at a time"
            )


def _prepend_gains(rows: list[dict], per_query: list[np.ndarray]) -> list[dict]:
    """Per template and spec: the depth with the best choosing-half score (ties: the shallower) against depth 0,
    on the reporting half."""
    from nosink.evals import stats

    gains = []
    for template, spec in dict.fromkeys((r.get("template"), r["spec"]) for r in rows):
        at = {r["prepend"]: i for i, r in enumerate(rows) if (r.get("template"), r["spec"]) == (template, spec)}
        depths = sorted(d for d in at if d > 0)
        if 0 not in at or not depths:
            continue
        best = max(depths, key=lambda d: (rows[at[d]]["choose_half"], -d))
        with_tp, without = (stats.mean_of("ndcg_at_10", per_query[at[d]]) for d in (best, 0))
        c = stats.compare(with_tp, without)
        gains.append({
            "template": template, "spec": spec, "chosen_depth": best,
            "choose_by_depth": {d: rows[at[d]]["choose_half"] for d in [0, *depths]},
            "gain": round(c.delta.estimate, 4), "low": round(c.delta.low, 4), "high": round(c.delta.high, 4),
            "p_value": round(c.p_value, 3),
        })  # fmt: skip
    return gains


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="step", required=True)
    e = sub.add_parser("export")
    e.add_argument("name", choices=["SciFact", "NFCorpus"])
    e.add_argument("folder", type=Path)
    e.add_argument("out", type=Path)
    m = sub.add_parser("embed")
    m.add_argument("task", type=Path)
    m.add_argument("model")
    m.add_argument("--gguf-file")
    m.add_argument("--st", action="store_true", help="MODEL is a sentence-transformers folder (a trained baseline)")
    m.add_argument("--specs", nargs="+", default=["F*"])
    m.add_argument("--template", default=None, help="a preset's name (none: the paper's instruction, mean pooling)")
    m.add_argument("--pooling", default=None, help="default: last with a template, mean without")
    m.add_argument("--prepend", type=int, nargs="+", default=[0], help="Token Prepending depths (0: none)")
    m.add_argument("--sink-token", default="auto")
    m.add_argument("--tf32", action="store_true", help="float32 products on TF32 tensor cores (a GPU's)")
    m.add_argument("--top-k", type=int, default=100, help="documents ranked per query (mteb: 100)")
    m.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    m.add_argument("--device", default="cuda")
    m.add_argument("--batch-size", type=int, default=32)
    m.add_argument("--max-length", type=int, default=512)
    m.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("score")
    s.add_argument("task", type=Path)
    s.add_argument("rankings", type=Path, nargs="+", help="the folder embed wrote; several are scored as one set")
    s.add_argument("out", type=Path)
    args = p.parse_args()
    if args.step == "export":
        export(args.name, args.folder, args.out)
    elif args.step == "embed":
        embed(args)
    else:
        score(args)


if __name__ == "__main__":
    main()
