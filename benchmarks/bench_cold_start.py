"""What a user meets first: a fresh process's time to its first vectors, and its first and second calls of encode().

A model of a real architecture's shape with random bfloat16 weights (speed does not depend on their values) is
saved once to a folder with a real tokenizer; then, for every row, a fresh Python process loads that folder and
calls ``encode()`` twice on the same texts (6-40 words, as ``bench_texts_gpu.py``'s), as a notebook, a script or
``nosink encode`` would:

- nosink, the default: ``EncoderFromDecoder.from_pretrained(folder, spec=..., dtype=torch.bfloat16, device="cuda")``;
- nosink with ``cuda_graphs=False``;
- sentence-transformers on the same folder (``SentenceTransformer(folder)``: a plain transformers folder gets mean
  pooling), in bfloat16.

Each row gives the time from the process's start (the parent's clock just before it starts the process) to the
first call's vectors, the load, each call, and the second call against the first. Rows run interleaved, run by
run, so that a slow spell of the machine hits each alike.

    python benchmarks/bench_cold_start.py --arch qwen2.5-0.5b --tokenizer PATH/TO/Qwen2.5-tokenizer \\
        --texts 1000 10000 --runs 2 --json cold.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOLS = {
    "nosink": "nosink (default)",
    "nosink-no-graphs": "nosink, cuda_graphs=False",
    "st": "sentence-transformers",
}
DEFAULT_SPECS = {"qwen2.5-0.5b": "F* | M0B*12", "llama-1b": "F* | M0B*8"}


def child(tool: str, folder: str, n: int, spec: str, batch: int, started: float) -> None:
    """One row in this fresh process: print one JSON line of wall-clock times since ``started``."""
    import torch

    sys.path.insert(0, str(HERE))
    from bench_texts_gpu import texts_of

    texts = texts_of(n)
    times = {"imported": time.time() - started}
    if tool == "st":
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(folder, device="cuda", model_kwargs={"dtype": torch.bfloat16})

        def run() -> object:
            return model.encode(texts, batch_size=batch, show_progress_bar=False)
    else:
        from nosink import EncoderFromDecoder

        options = {"cuda_graphs": False} if tool == "nosink-no-graphs" else {}
        encoder = EncoderFromDecoder.from_pretrained(folder, spec=spec, dtype=torch.bfloat16, device="cuda", **options)

        def run() -> object:
            return encoder.encode(texts, batch_size=batch, show_progress_bar=False)

    times["loaded"] = time.time() - started
    run()
    times["first"] = time.time() - started
    run()
    times["second"] = time.time() - started
    extra = {} if tool == "st" else encoder.graph_counts()
    print(json.dumps({"times": times, **extra, "max_memory": torch.cuda.max_memory_allocated()}), flush=True)


def make_folder(arch: str, tokenizer_path: str) -> str:
    """The random-weight model of ``arch`` and the tokenizer saved to a new folder."""
    import torch
    from transformers import AutoTokenizer

    sys.path.insert(0, str(HERE))
    from bench_encoder import _model

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    model = _model(arch, "cuda", torch.bfloat16, vocab=len(tokenizer))
    folder = tempfile.mkdtemp(prefix=f"cold-{arch}-")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="qwen2.5-0.5b", choices=sorted(DEFAULT_SPECS))
    p.add_argument("--tokenizer", required=True, help="a tokenizer folder (Qwen2.5's in the committed runs)")
    p.add_argument("--spec", default=None, help="nosink's spec; default: the arch's MASK0-BIDIR of the GPU runs")
    p.add_argument("--texts", type=int, nargs="+", default=[1000, 10000])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--tools", nargs="+", default=list(TOOLS), choices=list(TOOLS))
    p.add_argument("--json", default=None, help="also write the rows here")
    p.add_argument("--child", nargs=5, metavar=("TOOL", "FOLDER", "N", "SPEC", "STARTED"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        tool, folder, n, spec, started = args.child
        child(tool, folder, int(n), spec, args.batch, float(started))
        return
    spec = args.spec or DEFAULT_SPECS[args.arch]
    folder = make_folder(args.arch, args.tokenizer)
    rows = []
    for run in range(args.runs):
        for n in args.texts:
            for tool in args.tools:
                started = time.time()
                out = subprocess.run(
                    [sys.executable, __file__, "--batch", str(args.batch), "--tokenizer", args.tokenizer,
                     "--child", tool, folder, str(n), spec, repr(started)],
                    capture_output=True, text=True, env=os.environ | {"TOKENIZERS_PARALLELISM": "true"},
                )  # fmt: skip
                if out.returncode != 0:
                    sys.exit(f"{tool} with {n} texts failed:\n{out.stderr[-3000:]}")
                result = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append({"run": run, "texts": n, "tool": tool, **result})
                t = result["times"]
                print(f"run {run + 1}, {n:,} texts, {TOOLS[tool]}: to first vectors {t['first']:.1f} s "
                      f"(first call {t['first'] - t['loaded']:.2f} s, second {t['second'] - t['first']:.2f} s)",
                      flush=True)  # fmt: skip
    import torch
    import transformers

    print(f"\n{args.arch} shape, `{spec}`, random bf16 weights, on {torch.cuda.get_device_name()} (torch "
          f"{torch.__version__}, transformers {transformers.__version__}); batch {args.batch}; a fresh process "
          f"per row, {args.runs} run(s) each, [min - max] over runs\n")  # fmt: skip
    print("| texts | tool | process start to first vectors | load (from start) | first call | second call "
          "| second / first | graphs |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")

    def span(values: list[float], digits: int = 2) -> str:
        lo, hi = min(values), max(values)
        return f"{lo:.{digits}f}" if round(lo, digits) == round(hi, digits) else f"{lo:.{digits}f} - {hi:.{digits}f}"

    for n in args.texts:
        for tool in args.tools:
            mine = [r for r in rows if r["texts"] == n and r["tool"] == tool]
            first = [r["times"]["first"] - r["times"]["loaded"] for r in mine]
            second = [r["times"]["second"] - r["times"]["first"] for r in mine]
            graphs = {r.get("graphs", "-") for r in mine}
            print(f"| {n:,} | {TOOLS[tool]} | {span([r['times']['first'] for r in mine], 1)} s "
                  f"| {span([r['times']['loaded'] for r in mine], 1)} s | {span(first)} s | {span(second)} s "
                  f"| {span([s / f for s, f in zip(second, first, strict=True)])}x "
                  f"| {', '.join(map(str, sorted(graphs, key=str)))} |")  # fmt: skip
    if args.json:
        meta = {"arch": args.arch, "spec": spec, "card": torch.cuda.get_device_name(), "batch": args.batch}
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
