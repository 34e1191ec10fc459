"""Load test of ``nosink serve``: N concurrent clients for a fixed time, against offline ``encode()``.

    python benchmarks/bench_serve.py                      # SmolLM2-135M-Instruct (the cached demo copy), CPU
    python benchmarks/bench_serve.py --clients 16 --seconds 30 --chat-clients 2

The server runs as its own process (``nosink serve``, as a user starts it), so its peak memory
(``VmHWM``) is the serving process's alone. The benchmark process encodes the same texts offline with
``EncoderFromDecoder.encode()`` (same spec, same thread settings) as the baseline, and runs

1. ``--clients`` threads, each sending embedding requests of ``--texts`` texts back to back with the
   official ``openai`` client, for ``--seconds`` in all, in ``--rounds`` rounds that alternate with
   offline measurements (the machine's load drifts; the ratio compares totals);
2. the same embedding clients plus ``--chat-clients`` threads asking for ``--max-tokens`` greedy tokens.

It reports requests/s, texts/s, p50/p99 latency and errors (must be 0) per run, the ratio of served to
offline texts/s, and the server's peak memory beside the model's parameter bytes. Numbers depend on
what else the machine runs: read them as indicative.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

SPEC = "F* | M0B*10"
WORDS = (
    "the a model server request batch token vector query document answer question river bank money city "
    "capital france paris london learns reads writes finds returns quickly slowly today often never small "
    "large first last every some many people data search retrieval chat memory weights layer attention"
).split()


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences of 6 to 40 words (seeded), so batches mix lengths as real traffic does."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 40))).capitalize() + "." for _ in range(n)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(pid: int, key: str) -> int:
    """A ``/proc/PID/status`` memory line in bytes (``VmHWM``: peak resident memory, ``VmRSS``: now)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def load(base_url: str, model: str, seconds: float, clients: int, texts: list[str], per_request: int,
         chat_clients: int = 0, max_tokens: int = 16) -> dict:  # fmt: skip
    """Run the clients for ``seconds``; latencies and errors per kind of request."""
    from openai import OpenAI

    stop_at = time.perf_counter() + seconds
    results: dict[str, list] = {"embed": [], "chat": [], "errors": []}
    lock = threading.Lock()

    def embed_client(k: int) -> None:
        client = OpenAI(base_url=base_url, api_key="-", max_retries=0, timeout=600)
        i = k * 7919
        while time.perf_counter() < stop_at:
            batch = [texts[(i + j) % len(texts)] for j in range(per_request)]
            i += per_request * clients
            start = time.perf_counter()
            try:
                got = client.embeddings.create(model=model, input=batch)
                assert len(got.data) == per_request
                with lock:
                    results["embed"].append(time.perf_counter() - start)
            except Exception as err:
                with lock:
                    results["errors"].append(repr(err))

    def chat_client(k: int) -> None:
        client = OpenAI(base_url=base_url, api_key="-", max_retries=0, timeout=600)
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            try:
                got = client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": texts[k]}], max_tokens=max_tokens, temperature=0
                )
                assert got.choices[0].message.content is not None
                with lock:
                    results["chat"].append(time.perf_counter() - start)
            except Exception as err:
                with lock:
                    results["errors"].append(repr(err))

    began = time.perf_counter()
    threads = [threading.Thread(target=embed_client, args=(k,)) for k in range(clients)]
    threads += [threading.Thread(target=chat_client, args=(k,)) for k in range(chat_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results["elapsed"] = time.perf_counter() - began  # requests in flight at the deadline finish and count
    return results


def row(name: str, latencies: list[float], elapsed: float, per_request: int, offline: float | None) -> str:
    if not latencies:
        return f"{name:<28} no request completed"
    rps = len(latencies) / elapsed
    texts = f"{rps * per_request:8.1f}" if per_request else f"{'':>8}"
    ratio = f"{rps * per_request / offline:6.2f}x" if offline else f"{'':>7}"
    return (f"{name:<28} {len(latencies):>6} {rps:7.2f} {texts} {ratio} "
            f"{1000 * statistics.median(latencies):8.0f} {1000 * percentile(latencies, 0.99):8.0f}")  # fmt: skip


def health(port: int) -> dict:
    """The server's ``/health`` counters (batches, texts, the engine's milliseconds in chat steps and batches)."""
    import json
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=60) as answer:
        return json.loads(answer.read())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="demo", help="hub id, folder, or 'demo' (the cached SmolLM2 copy)")
    p.add_argument("--spec", default=SPEC)
    p.add_argument("--clients", type=int, default=8, help="concurrent embedding clients")
    p.add_argument("--texts", type=int, default=1, help="texts per embedding request")
    p.add_argument("--chat-clients", type=int, default=2, help="chat clients in the mixed run")
    p.add_argument("--max-tokens", type=int, default=16, help="greedy tokens per chat request")
    p.add_argument("--seconds", type=float, default=30.0, help="length of each run")
    p.add_argument("--offline-texts", type=int, default=64, help="texts per offline measurement")
    p.add_argument("--rounds", type=int, default=3, help="offline and served rounds alternate this many times")
    p.add_argument("--chat-share", type=float, default=0.5, help="the server's --chat-share (the mixed run)")
    args = p.parse_args()

    from nosink.cli.inputs import model_path
    from nosink.serve import load_model

    path = model_path(args.model)
    texts = corpus(max(args.offline_texts, 512))
    threads = torch.get_num_threads()
    load_before = os.getloadavg()[0]

    # Offline baseline: the same model, spec and texts through encode(), in this process.
    from nosink import EncoderFromDecoder

    model, tokenizer = load_model(path)
    params = sum(p.numel() * p.element_size() for p in {p.data_ptr(): p for p in model.parameters()}.values())
    encoder = EncoderFromDecoder.from_model(model, args.spec, tokenizer)
    encoder.encode(texts[:32], normalize_embeddings=True)  # warm-up

    offline_runs: list[tuple[int, float]] = []  # (texts, seconds) of each offline measurement

    def offline_rate() -> float:
        start = time.perf_counter()
        encoder.encode(texts[: args.offline_texts], normalize_embeddings=True, batch_size=32)
        offline_runs.append((args.offline_texts, time.perf_counter() - start))
        return args.offline_texts / offline_runs[-1][1]

    # What the Python runtime and the web stack take without any model: the server's floor.
    imports = (
        "import torch, transformers, fastapi, uvicorn, openai, nosink.serve; print(open('/proc/self/status').read())"
    )
    bare = subprocess.run([sys.executable, "-c", imports], capture_output=True, text=True, check=True).stdout
    runtime = next(int(line.split()[1]) * 1024 for line in bare.splitlines() if line.startswith("VmHWM:"))

    port = free_port()
    cmd = [sys.executable, "-m", "nosink.cli", "serve", path, "--spec", args.spec, "--port", str(port), "--name", "m"]
    cmd += ["--chat-share", str(args.chat_share)]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        import urllib.request

        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the server did not start:\n{server.stderr.read()}") from None
                time.sleep(0.5)
        loaded, loaded_peak = status(server.pid, "VmRSS"), status(server.pid, "VmHWM")
        load(base_url, "m", 3, 2, texts, args.texts)  # warm-up
        # The machine's load drifts (other users): offline and served embeddings alternate, round by round,
        # and the ratio compares their totals.
        rounds = []
        for _ in range(args.rounds):
            offline_rate()
            rounds.append(load(base_url, "m", args.seconds / args.rounds, args.clients, texts, args.texts))
        offline_rate()
        embed = {"embed": [x for r in rounds for x in r["embed"]], "errors": [x for r in rounds for x in r["errors"]],
                 "elapsed": sum(r["elapsed"] for r in rounds)}  # fmt: skip
        before = health(port)
        mixed = load(base_url, "m", args.seconds, args.clients, texts, args.texts, args.chat_clients, args.max_tokens)
        after = health(port)
        engine_ms = {k: after[k] - before[k] for k in ("chat_ms", "embedding_ms")}
        offline_rate()
        peak = status(server.pid, "VmHWM")
        anon, mapped = status(server.pid, "RssAnon"), status(server.pid, "RssFile")
    finally:
        server.terminate()
        server.wait(timeout=60)
    offline = sum(n for n, _ in offline_runs) / sum(t for _, t in offline_runs)
    rates = ", ".join(f"{n / t:.2f}" for n, t in offline_runs)

    import transformers

    print(f"nosink serve load test: {Path(path).name}, spec {args.spec!r}, CPU float32, {args.seconds:g} s per run")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, torch threads {threads} "
          f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}), {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; load average {load_before:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after")  # fmt: skip
    print(f"{args.clients} embedding clients x {args.texts} text(s) per request; mixed run adds "
          f"{args.chat_clients} chat clients x {args.max_tokens} greedy tokens; "
          f"--chat-share {args.chat_share:g}\n")  # fmt: skip
    print(f"offline encode(): {offline:.2f} texts/s overall ({args.offline_texts} texts per measurement, "
          f"batch_size 32; before, between and after the served rounds: {rates})")  # fmt: skip
    print(f"'embeddings only' alternates {args.rounds} rounds with those measurements; 'mixed' is one run\n")
    print(f"{'run':<28} {'done':>6} {'req/s':>7} {'texts/s':>8} {'vs off':>7} {'p50 ms':>8} {'p99 ms':>8}")
    print("-" * 78)
    print(row("embeddings only", embed["embed"], embed["elapsed"], args.texts, offline))
    print(row("mixed: embeddings", mixed["embed"], mixed["elapsed"], args.texts, offline))
    print(row("mixed: chat", mixed["chat"], mixed["elapsed"], 0, None))
    if mixed["chat"]:
        print(f"{'':<28} chat: {len(mixed['chat']) * args.max_tokens / mixed['elapsed']:.1f} generated tokens/s")
    busy = engine_ms["chat_ms"] + engine_ms["embedding_ms"]
    print(f"engine in the mixed run: {engine_ms['chat_ms']} ms of chat steps, {engine_ms['embedding_ms']} ms of "
          f"embedding batches: chats {engine_ms['chat_ms'] / max(busy, 1):.2f} of its busy time "
          f"(--chat-share {args.chat_share:g}; the share holds while both kinds wait)")  # fmt: skip
    errors = embed["errors"] + mixed["errors"]
    print(f"\nerrors: {len(errors)}" + (f" (first: {errors[0]})" if errors else ""))
    print(f"\nmodel parameters: {params / 2**20:.1f} MiB (unique tensors; the LM head is tied to the embeddings)")
    print(f"python + torch + transformers + fastapi + uvicorn, no model: {runtime / 2**20:.1f} MiB peak")
    print(f"server process: {loaded / 2**20:.1f} MiB resident after loading (peak {loaded_peak / 2**20:.1f} MiB "
          f"while loading), peak {peak / 2**20:.1f} MiB after the runs; "
          f"peak minus the bare runtime: {(peak - runtime) / 2**20:.1f} MiB = {(peak - runtime) / params:.2f}x "
          "the parameters")  # fmt: skip
    print(
        f"server process at the end: {anon / 2**20:.1f} MiB anonymous memory (runtime, activations, caches) "
        f"+ {mapped / 2**20:.1f} MiB file-backed (the safetensors weights, mapped, and the libraries)"
    )
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
