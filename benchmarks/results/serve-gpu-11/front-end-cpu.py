"""A front-end process's CPU per one-text embedding request: a server with 2 front-ends over the test suite's tiny
random model (its forward costs next to nothing), loaded by ``bench_serve_gpu.py``'s raw clients (64 x 1) for
``SECONDS``; the front-ends' CPU time (user + system, from /proc) over the load, divided by the requests answered.
Whatever ``nosink`` the interpreter imports is measured: to compare two commits, lay each one's package out and
put it first on ``PYTHONPATH`` (``git archive`` of the commit, its ``layerspec``, ``models``, ``corpus`` and ``evals``
folders moved into its ``nosink`` one, as ``benchmarks/results/device-setup.sh`` lays packages out). From the
checkout root, with the project's venv active:

    python benchmarks/results/serve-gpu-11/front-end-cpu.py
"""

import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parents[2] / "tests")]

SECONDS = 8


def main():
    from bench_serve import corpus
    from bench_serve_gpu import children, cpu_seconds, drive
    from tiny import tiny_chat_model

    import nosink
    from nosink.serve import Limits, ServerThread, create_app

    lm, tok = tiny_chat_model()
    app = create_app(lm, tok, "F* | M0B*2", name="tiny", limits=Limits(max_tokens_per_text=64))
    texts = [" ".join(t.split()[:8]) for t in corpus(2048)]  # the tiny tokenizer's words: unknown ones are <unk>
    with ServerThread(app, workers=2) as server:
        port = int(server.url.rsplit(":", 1)[1])
        drive(port, "tiny", texts, 64, 1, 0, 2.0, 2)  # warm-up
        front = [pid for pid in children(os.getpid()) if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        time.sleep(0.5)
        before = sum(cpu_seconds(pid) for pid in front)
        row = drive(port, "tiny", texts, 64, 1, 0, SECONDS, 2)
        used = sum(cpu_seconds(pid) for pid in front) - before
    requests = row["requests_per_s"] * SECONDS
    print(
        f"{Path(nosink.__file__).parent.parent}: {row['requests_per_s']:,.0f} requests/s, p50 / p99 "
        f"{row['p50_ms']:.1f} / {row['p99_ms']:.1f} ms, errors {row['errors']}, front-ends' CPU "
        f"{used * 1000 / requests:.3f} ms a request ({used:.2f} s over {requests:,.0f} requests)"
    )


if __name__ == "__main__":
    main()
