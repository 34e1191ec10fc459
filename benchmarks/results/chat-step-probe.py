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


def steps_ms(rows, incoming, prompts: list[list[int]], tokens: int = 32) -> tuple:
    """(prefill ms, median decode step ms) of ``prompts`` decoded greedily side by side for ``tokens`` steps by
    the server's :class:`nosink.serve.kv.Rows` (``incoming`` prefills, ``rows`` decodes)."""
    with torch.inference_mode():
        torch.cuda.synchronize()
        start = time.perf_counter()
        logits = incoming.prefill(prompts)
        rows.join([incoming])
        incoming.clear()
        ids = logits.argmax(-1).tolist()
        prefill = 1000 * (time.perf_counter() - start)
        times = []
        for _ in range(tokens):
            start = time.perf_counter()
            ids = rows.step(ids).argmax(-1).tolist()
            times.append(1000 * (time.perf_counter() - start))
        rows.keep([])
    return prefill, statistics.median(times)


def chats_ms(lm, tok, prompts: list[list[int]], steps: int = 32) -> float:
    """Median ms of the engine's :meth:`Chats.step` (decode, sampling, incremental detokenizing; events dropped)
    with ``len(prompts)`` chats decoding greedily, after their prefill step."""
    from nosink.serve.generation import Chats
    from nosink.serve.jobs import ChatJob, Sampling

    chats = Chats(lm, tok, 16, {"chat_tokens": 0, "dropped": 0})
    for p in prompts:
        chats.add(ChatJob(p, Sampling(steps + 8, 0.0, 1.0, (), None), lambda event: None))
    times = []
    with torch.inference_mode():
        for _ in range(steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            chats.step()
            times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times[1:])


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
        from nosink.serve import kv

        table = []
        for graphs in (False, True):
            rows, incoming = kv.Rows(lm, graphs=graphs, rows=16), kv.Rows(lm, graphs=graphs, rows=16)
            for n in (1, 8, 16):
                steps_ms(rows, incoming, prompts[:n], 4)  # warm-up: the graphs of n rows are captured here
                table.append((graphs, n, *steps_ms(rows, incoming, prompts[:n], 32)))
        print("\n| forward | chats | prefill ms | ms a decode step |\n|---|---|---|---|")
        for graphs, n, pre, step in table:
            print(f"| {'CUDA graph' if graphs else 'as it is'} | {n} | {pre:.1f} | {step:.2f} |")
        print("\n| chats | ms an engine chat step (decode, sampling, detokenizing) |\n|---|---|")
        for n in (1, 8, 16):
            chats_ms(lm, tok, prompts[:n], 8)
            print(f"| {n} | {chats_ms(lm, tok, prompts[:n]):.2f} |")
        profile = cProfile.Profile()
        profile.enable()
        chats_ms(lm, tok, prompts[:16], 16)
        profile.disable()
        print("\nprofile of 16 engine chat steps of 16 chats (by own time):")
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
