"""Full-corpus retrieval (SciFact, NFCorpus) through the study's retrieval path, with the encoding on another machine.

The study's :class:`~nosink.evals.study.RetrievalTask` and :class:`~nosink.evals.study.EmbeddingCache` do the
work; this script only splits it in three steps so that the encoding can run where a GPU is (a full corpus is
hours of CPU time for even a 135M model: benchmarks/results/retrieval-full.md says why):

1. ``export``: the task as the study loads it (:func:`~nosink.evals.study.load_retrieval`, full corpus, every
   test query, the seeded halves), written as JSON: no ``datasets`` needed where it is read;
2. ``embed``: the embeddings of every query and document under each spec (one
   :class:`~nosink.evals.study.EmbeddingCache` pass, shared layers once), one ``.npz`` per spec, and the
   encoding speed;
3. ``score``: nDCG@10 by mteb's evaluator (:meth:`RetrievalTask.per_query`) over all test queries (MTEB's
   number), and over the reporting half with its bootstrap interval (the study's number).
"""

from __future__ import annotations

import argparse
import json
import time
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


def embed(args: argparse.Namespace) -> None:
    """Encode the task's queries and documents under each spec; one ``.npz`` per spec, and the timings."""
    import torch

    from nosink.evals.study import Candidate, EmbeddingCache
    from nosink.models import EncoderFromDecoder
    from nosink.models.loading import load_stock

    task = _task(args.task)
    if args.st:
        _embed_trained(args, task)
        return
    model, tokenizer = load_stock(args.model, gguf_file=args.gguf_file) if args.gguf_file else (args.model, None)
    if tokenizer is None:
        encoder = EncoderFromDecoder.from_pretrained(args.model, "F*", dtype=torch.float32)
    else:
        encoder = EncoderFromDecoder.from_model(model.float(), "F*", tokenizer)
    encoder = encoder.to(args.device)
    cands = [Candidate("F*" if s == "F*" else "converted", s) for s in args.specs]
    cache = EmbeddingCache(encoder, None, task.instruction, args.batch_size, args.max_length, show_progress_bar=True)
    queries = list(dict.fromkeys(t for _, t in [*task.choose, *task.report]))
    docs = [t for _, t in task.corpus]
    timings = {}
    for what, texts in (("documents", docs), ("queries", queries)):
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        cache.vectors(cands, texts)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        took = time.perf_counter() - start
        timings[what] = {"texts": len(texts), "seconds": round(took, 2), "texts_per_s": round(len(texts) / took, 1)}
        print(what, timings[what], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    for i, c in enumerate(cands):
        vectors = cache.vectors([c], [*queries, *docs])[c.name]
        np.savez(args.out / f"spec{i}.npz", vectors=vectors.astype(np.float32), spec=c.spec)
    meta = {
        "specs": args.specs, "timings": timings, "batch_size": args.batch_size, "max_length": args.max_length,
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "dtype": "float32", "torch": torch.__version__, "threads": torch.get_num_threads(),
        "note": "all specs in one EmbeddingCache pass (shared layers once); the seconds cover every spec",
    }  # fmt: skip
    (args.out / "embed.json").write_text(json.dumps(meta, indent=1) + "\n")


def _embed_trained(args: argparse.Namespace, task) -> None:
    """A sentence-transformers encoder (no instruction, its own ``max_seq_length``), as the study's baselines and
    MTEB run it: one ``.npz`` of unit vectors, and the speed."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(args.model, device=args.device)
    queries = list(dict.fromkeys(t for _, t in [*task.choose, *task.report]))
    docs = [t for _, t in task.corpus]
    parts, timings = [], {}
    for what, texts in (("queries", queries), ("documents", docs)):
        start = time.perf_counter()
        parts.append(model.encode(texts, batch_size=args.batch_size, normalize_embeddings=True, show_progress_bar=True))
        took = time.perf_counter() - start
        timings[what] = {"texts": len(texts), "seconds": round(took, 2), "texts_per_s": round(len(texts) / took, 1)}
        print(what, timings[what], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    name = Path(args.model).name
    np.savez(args.out / "spec0.npz", vectors=np.concatenate(parts).astype(np.float32), spec=f"{name} (trained encoder)")
    meta = {
        "specs": [name], "timings": timings, "batch_size": args.batch_size, "max_length": model.max_seq_length,
        "device": args.device, "dtype": "float32", "torch": torch.__version__, "threads": torch.get_num_threads(),
        "note": "a sentence-transformers encoder: no instruction, texts cut at its own max_seq_length", "trained": True,
    }  # fmt: skip
    (args.out / "embed.json").write_text(json.dumps(meta, indent=1) + "\n")


def score(args: argparse.Namespace) -> None:
    """nDCG@10 of each spec's embeddings: over all test queries, and the reporting half with its interval."""
    from nosink.evals import stats

    task = _task(args.task)
    queries = list(dict.fromkeys(t for _, t in [*task.choose, *task.report]))
    texts = [*queries, *(t for _, t in task.corpus)]
    rows = []
    for file in sorted(args.vectors.glob("spec*.npz")):
        data = np.load(file)
        lookup = dict(zip(texts, data["vectors"], strict=True))

        def vectors(batch, lookup=lookup):
            return np.stack([lookup[t] for t in batch])

        every = task.per_query([*task.choose, *task.report], vectors)
        report = stats.bootstrap_ci(task.report_statistic(vectors), seed=0)
        rows.append({
            "spec": str(data["spec"]), "ndcg_at_10_all_queries": round(float(every.mean()), 4),
            "n_queries": len(every), "choose_half": round(task.choose_score(vectors), 4),
            "report_half": round(report.estimate, 4), "report_low": round(report.low, 4),
            "report_high": round(report.high, 4), "n_report": len(task.report),
        })  # fmt: skip
        print(rows[-1], flush=True)
    meta = json.loads((args.vectors / "embed.json").read_text())
    payload = {
        "task": task.name, "mode": "full", "mteb_comparable": True, "n_documents": len(task.corpus),
        "metric": "nDCG@10 by mteb's calculate_retrieval_scores (pytrec_eval), cosine top 100",
        "query_instruction": None if meta.get("trained") else task.query_instruction, "template": None,
        "embed": meta, "results": rows,
    }  # fmt: skip
    args.out.write_text(json.dumps(payload, indent=1) + "\n")


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
    m.add_argument("--device", default="cuda")
    m.add_argument("--batch-size", type=int, default=32)
    m.add_argument("--max-length", type=int, default=512)
    m.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("score")
    s.add_argument("task", type=Path)
    s.add_argument("vectors", type=Path)
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
