"""The serving decode step (nosink.serve.kv.Rows) timed as it is and replayed as a CUDA graph, on the causal LM
whose layers the server's encoder shares (after embedding batches), for 1, 8 and 16 chats, with a profile of the
replayed steps. A diagnostic of issue 29 on a lent GPU, not part of the benchmark suite:

    python3 -P benchmarks/results/chat-step-probe.py --arch qwen2.5-0.5b --tokenizer .gpu/tok
"""

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def steps_ms(lm: torch.nn.Module, prompts: list[list[int]], tokens: int = 32, graphs: bool = True) -> tuple:
    """(prefill ms, median decode step ms) of ``prompts`` decoded greedily side by side for ``tokens`` steps, the
    steps replayed as CUDA graphs or not (``graphs``), as the server's :class:`nosink.serve.kv.Rows` runs them."""
    from nosink.serve import kv

    with torch.inference_mode():
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        logits, batch = kv.prefill(lm, prompts)
        rows = kv.Rows(lm, graphs=graphs)
        rows.join([batch])
        ids = logits.float().argmax(-1).cpu().tolist()
        prefill = 1000 * (time.perf_counter() - start)
        times = []
        for _ in range(tokens):
            start = time.perf_counter()
            ids = rows.step(ids).argmax(-1).cpu().tolist()
            times.append(1000 * (time.perf_counter() - start))
    return prefill, statistics.median(times[2:])  # the first steps of a row count capture their graph


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--arch", default="qwen2.5-0.5b")
    p.add_argument("--spec", default="F* | M0B*12")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args()
    import transformers as tf
    from bench_serve import corpus
    from bench_serve_gpu import build

    from nosink.serve import create_app

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        build(args.arch, args.tokenizer, folder, args.dtype, args.device)
        tok = tf.AutoTokenizer.from_pretrained(folder)
        lm = tf.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, args.dtype)).to(args.device).eval()
        texts = corpus(512)
        prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts[:16]]
        where = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
        print(f"# {args.arch}: {where}, attention {lm.config._attn_implementation}")
        app = create_app(lm, spec=args.spec, tokenizer=tok, name="m")
        encoder = app.state.encoder
        for _ in range(3):
            encoder.encode(texts, batch_size=128, show_progress_bar=False)
        print(f"encoder graphs: {encoder.graph_counts()}, attention now {lm.config._attn_implementation}")
        rows = []
        for n in (1, 8, 16):
            for graphs in (False, True):
                steps_ms(lm, prompts[:n], 4, graphs)  # warm-up
                rows.append((graphs, n, *steps_ms(lm, prompts[:n], 32, graphs)))
        print("\n| decode step | chats | prefill ms | ms a decode step |\n|---|---|---|---|")
        for graphs, n, pre, step in rows:
            print(f"| {'CUDA graph' if graphs else 'as it is'} | {n} | {pre:.1f} | {step:.2f} |")
        profile = cProfile.Profile()
        profile.enable()
        steps_ms(lm, prompts[:8], 16)
        profile.disable()
        print("\nprofile of 16 graph-replayed steps of 8 chats (by own time):")
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
