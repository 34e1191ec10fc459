"""A front-end alone: the routes and uvicorn of one front-end process over an engine that answers at once, driven
by bench_serve_gpu.py's load; CPU ms a request, and (``--profile``) cProfile's table of the front-end process.

    python benchmarks/results/serve-frontend/probe.py --tokenizer TOKENIZER_DIR [--profile]
"""

import argparse
import cProfile
import multiprocessing
import os
import pstats
import signal
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_serve import corpus
from bench_serve_gpu import cpu_seconds, drive


class Instant:
    """An engine that answers every embedding job at once with unit vectors (no model)."""

    def __init__(self, dims: int) -> None:
        self.vector = np.full(dims, dims**-0.5, dtype=np.float32)

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def cancel(self, job) -> None: ...
    def health(self) -> dict:
        return {}

    def submit(self, job) -> None:
        job.future.set_running_or_notify_cancel()
        job.future.set_result(np.tile(self.vector, (len(job), 1)))


def serve(tokenizer_dir: str, port_out, profile: str | None) -> None:
    import torch
    from transformers import AutoTokenizer

    from nosink.serve.http import _server, bind
    from nosink.serve.limits import Limits
    from nosink.serve.routes import build_app
    from nosink.serve.served import Embedding, Served

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    served = Served(
        name="model", tokenizer=tokenizer, embeddings={"model": Embedding("model", "F* | M0B*12", None, None, 896)},
        sink=[tokenizer.bos_token_id or 0], positions=32768, chat=False, prompts={}, api_key=None, limits=Limits(),
    )  # fmt: skip
    app = build_app(served, Instant(896))
    sockets = bind("127.0.0.1", 0)
    port_out.put(sockets[0].getsockname()[1])
    server = _server(app, "127.0.0.1", sockets, "warning", None)
    prof = cProfile.Profile() if profile else None
    if prof:
        prof.enable()
    try:
        server.serve_until_stopped()
    except KeyboardInterrupt:
        pass
    finally:
        if prof:
            prof.disable()
            stats = pstats.Stats(prof, stream=open(profile, "w"))
            stats.sort_stats("tottime").print_stats(30)
            stats.sort_stats("cumulative").print_stats(45)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=8)
    p.add_argument("--profile", default=None, help="write cProfile's tables here")
    args = p.parse_args()
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    server = context.Process(target=serve, args=(args.tokenizer, ports, args.profile))
    server.start()
    port = ports.get(timeout=120)
    time.sleep(1)
    texts = corpus(4096)
    drive(port, "model", texts, args.clients, 1, 0, 2.0, 1)  # warm-up
    before = cpu_seconds(server.pid)
    row = drive(port, "model", texts, args.clients, 1, 0, args.seconds, 1)
    spent = cpu_seconds(server.pid) - before
    done = row["requests_per_s"] * args.seconds
    print(f"{args.clients} clients x 1 text, {args.seconds:.0f} s: {row['requests_per_s']:,.0f} requests/s, "
          f"errors {row.get('errors')}, front-end CPU {1000 * spent / done:.3f} ms a request"
          f"{' (profiled)' if args.profile else ''}")  # fmt: skip
    os.kill(server.pid, signal.SIGINT)
    server.join(60)


if __name__ == "__main__":
    main()
