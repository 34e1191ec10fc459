"""Where a front-end process's CPU goes on one-text embedding requests: a server with 2 front-ends over the test
suite's tiny random model (its forward costs next to nothing), loaded by ``bench_serve_gpu.py``'s raw clients
(64 x 1), one front-end sampled by py-spy while it holds the interpreter lock. From the checkout root, with the
project's venv active and py-spy on the PATH:

    python benchmarks/results/serve-gpu-10/front-end-probe.py > benchmarks/results/serve-gpu-10/front-end-probe.txt
"""

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parents[2] / "tests")]

SECONDS = 8


def main():
    from bench_serve import corpus
    from bench_serve_gpu import children, drive, sample, spy_summary
    from tiny import tiny_chat_model

    from nosink.serve import Limits, ServerThread, create_app

    lm, tok = tiny_chat_model()
    app = create_app(lm, tok, "F* | M0B*2", name="tiny", limits=Limits(max_tokens_per_text=64))
    texts = [" ".join(t.split()[:8]) for t in corpus(2048)]  # the tiny tokenizer's words: unknown ones are <unk>
    with ServerThread(app, workers=2) as server:
        port = int(server.url.rsplit(":", 1)[1])
        drive(port, "tiny", texts, 64, 1, 0, 2.0, 2)  # warm-up
        front = [pid for pid in children(os.getpid()) if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        raw = Path("/tmp/front-end-spy.txt")
        spy = sample(Path("py-spy"), front[0], SECONDS, raw)
        time.sleep(0.5)
        row = drive(port, "tiny", texts, 64, 1, 0, SECONDS, 2)
        cpu = subprocess.run(["ps", "-o", "pid,cputime,args", "-p", ",".join(map(str, front))], capture_output=True)
    print(f"64 x 1 over the tiny model, 2 front-ends, 2 load processes, {SECONDS} s, {os.cpu_count()} cores")
    print(f"requests/s {row['requests_per_s']:,.0f}, p50 / p99 {row['p50_ms']:.1f} / {row['p99_ms']:.1f} ms")
    print(f"errors {row['errors']}")
    print(cpu.stdout.decode())
    print(spy_summary(spy, raw, "one front-end", SECONDS, top=30))


if __name__ == "__main__":
    main()
