"""Load test of ``nosink serve`` on a GPU at real model shapes: served texts/s against offline ``encode()``.

    python benchmarks/bench_serve_gpu.py --arch qwen2.5-0.5b --spec "F* | M0B*12" --tokenizer TOKENIZER_DIR
    python benchmarks/bench_serve_gpu.py --arch llama-1b --spec "F* | M0B*8" --tokenizer TOKENIZER_DIR --workers 4 0

The model is random (bf16 weights at the architecture's real shape, its vocabulary grown to the
tokenizer's) with a real tokenizer, saved to a folder and served by ``nosink serve`` in its own process,
as a user starts it. The benchmark process first encodes the same texts offline with ``encode()`` (same
spec, same batch size: the baseline), then drives the server with load processes, each running many
keep-alive HTTP/1.1 connections on asyncio (a small raw client, so the load generator is not what
limits). Loads, each ``--seconds`` long after a warm-up:

- ``64x1``: 64 clients, one text per request (float JSON; and ``64x1 b64``: base64, as OpenAI's client asks);
- ``16x16``: 16 clients, 16 texts per request; ``256x1``: 256 clients, one text each;
- ``64x1 + 8 chats``: the 64 embedding clients while 8 clients stream chat answers of 32 tokens;
- ``1 chat`` alone on the idle server, and ``16 chats`` at once: tokens/s per stream and in all.

It prints one markdown table per ``--workers`` value (front-end processes; 0: one process) with texts/s,
the ratio to offline, p50/p99 latency and errors, and from the server's ``/health`` counters the rows a
batch, how busy the engine was, an embedding request's mean time in the model's process against its mean
latency (the rest is HTTP, JSON, tokenizing and the pipe), and the CUDA graphs captured with the share of
batches that replayed one; it writes the raw numbers as JSON (``--json``; with each load's chat steps and how many
of them rode an embedding batch, ``ridden_steps``). ``--riding-loads`` runs loads again on a server started with
``--chat-riding`` (chat steps riding embedding batches, experimental); ``--variant FLAGS LOAD ...`` (repeatable)
runs loads on a server started with the serve flags ``FLAGS`` (their names without the dashes), e.g. ``--variant
"chat-stream chat-compile" "64x1 + 8 chats" "1 chat"``; all against the same offline baseline. With
``--py-spy PATH`` it samples the model's process during each load and prints where it held the interpreter lock.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HOST = "127.0.0.1"


# ---------------------------------------------------------------------------------------------- the model


# torch, transformers and the other benchmarks are imported where used: the load processes (spawned, so
# they import this file) need none of them and start in a moment.


def build(arch: str, tokenizer_dir: str, folder: Path, dtype: str, device: str) -> int:
    """A random causal LM of ``arch``'s shape and ``tokenizer_dir``'s tokenizer saved to ``folder``; its size."""
    import torch
    import transformers as tf
    from bench_encoder import ARCHS

    tok = tf.AutoTokenizer.from_pretrained(tokenizer_dir)
    if not tok.chat_template:
        tok.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    config = ARCHS[arch]()
    config.vocab_size = max(config.vocab_size, len(tok))
    torch.manual_seed(0)
    with torch.device(device):
        model = tf.AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    count = sum(p.numel() for p in model.parameters())
    del model
    return count


def offline(folder: Path, spec: str, texts: list[str], batch: int, dtype: str, device: str, repeats: int) -> dict:
    """Texts/s of ``encode()`` on ``texts``: the median of ``repeats`` passes after two whole passes as warm-up.

    The warm-up is two passes over the whole of ``texts``, as ``bench_texts_gpu.py``'s: on a GPU the encoder
    captures a CUDA graph for a bucket of rows and length at its second batch. Up to serve-gpu-10's runs this
    warm-up was 4 batches, so 2 of the 3 timed passes still captured graphs, and their median (the second pass:
    6,900-11,800 texts/s where the third gave 10,300-16,900 on the Qwen2.5-0.5B shape) understated offline speed:
    every served / offline ratio since the graphs was too high (see ``results/serve-gpu-10/README.md``).
    """
    import torch

    from nosink import EncoderFromDecoder

    encoder = EncoderFromDecoder.from_pretrained(str(folder), spec=spec, dtype=dtype, device=device)
    for _ in range(2):
        encoder.encode(texts, batch_size=batch, normalize_embeddings=True, show_progress_bar=False)
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize() if device.startswith("cuda") else None
        start = time.perf_counter()
        encoder.encode(texts, batch_size=batch, normalize_embeddings=True, show_progress_bar=False)
        times.append(time.perf_counter() - start)
    tokens = sum(len(t) for t in encoder.tokenizer(texts, add_special_tokens=False)["input_ids"]) + len(texts)
    del encoder
    torch.cuda.empty_cache() if device.startswith("cuda") else None
    best = statistics.median(times)
    return {"texts_per_s": len(texts) / best, "tokens_per_text": tokens / len(texts), "passes_s": times}


# ---------------------------------------------------------------------------------------------- the client


async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    line = await reader.readline()
    if not line:
        raise ConnectionError("the server closed the connection")
    status = int(line.split()[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            return status, headers
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()


def _request(path: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _embed_client(port: int, bodies: list[tuple[bytes, int]], clock: dict, out: dict) -> None:
    await clock["go"]  # connected only now: an idle connection would meet the server's header timeout
    reader, writer = await asyncio.open_connection(HOST, port)
    k = 0
    stop = clock["stop"]
    while time.time() < stop:
        request, n = bodies[k % len(bodies)]
        k += 1
        sent = time.perf_counter()
        try:
            writer.write(request)
            status, headers = await _head(reader)
            await reader.readexactly(int(headers["content-length"]))
        except (OSError, asyncio.IncompleteReadError, ValueError, KeyError) as err:  # counted, then a new connection
            out["errors"] += 1
            out["error_kinds"][type(err).__name__] = out["error_kinds"].get(type(err).__name__, 0) + 1
            writer.close()
            reader, writer = await asyncio.open_connection(HOST, port)
            continue
        if time.time() <= stop:
            out["latency"].append(time.perf_counter() - sent)
            out["texts"] += n if status == 200 else 0
            out["requests"] += 1
            out["errors"] += status != 200
    writer.close()


async def _chat_client(port: int, request: bytes, clock: dict, out: dict) -> None:
    await clock["go"]
    reader, writer = await asyncio.open_connection(HOST, port)
    stop = clock["stop"]
    while time.time() < stop:
        sent = time.perf_counter()
        writer.write(request)
        status, _ = await _head(reader)
        tokens, first = 0, None
        while True:  # chunked transfer encoding of server-sent events
            size = int((await reader.readline()).strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                break
            data = await reader.readexactly(size + 2)
            for line in data.split(b"\n"):
                if line.startswith(b"data: {"):
                    event = json.loads(line[6:])
                    if event.get("usage"):
                        tokens = event["usage"]["completion_tokens"]
                    elif first is None and event["choices"] and event["choices"][0]["delta"].get("content"):
                        first = time.perf_counter() - sent
        took = time.perf_counter() - sent
        if time.time() <= stop:
            out["streams"].append({"tokens": tokens, "seconds": took, "first_s": first})
            out["errors"] += status != 200
    writer.close()


def _load_process(port: int, plan: dict, seconds: float, ready: Any, go: Any, when: Any, results: Any) -> None:
    """One load process: its clients connect, then all start at the time the parent sets."""
    out: dict = {"latency": [], "texts": 0, "requests": 0, "errors": 0, "streams": [], "error_kinds": {}}

    async def main() -> None:
        loop = asyncio.get_running_loop()
        clock = {"go": loop.create_future()}
        step = plan["embed"]
        clients = [_embed_client(port, plan["bodies"][c::step] or plan["bodies"], clock, out) for c in range(step)]
        clients += [_chat_client(port, plan["chat"], clock, out) for _ in range(plan["chats"])]
        running = [asyncio.ensure_future(c) for c in clients]
        await asyncio.sleep(0.1)
        ready.put(1)
        await loop.run_in_executor(None, go.wait)
        clock["stop"] = when.value + seconds
        await asyncio.sleep(max(0.0, when.value - time.time()))
        clock["go"].set_result(None)
        await asyncio.gather(*running)

    asyncio.run(main())
    results.put(out)


def drive(
    port: int,
    model: str,
    texts: list[str],
    embed: int,
    per: int,
    chats: int,
    seconds: float,
    procs: int,
    fmt: str = "float",
    chat_tokens: int = 32,
) -> dict:
    """Run ``embed`` embedding clients (``per`` texts a request) and ``chats`` chat clients for ``seconds``."""
    bodies = []
    for i in range(0, len(texts) - per + 1, per):
        body = json.dumps({"model": model, "input": texts[i : i + per], "encoding_format": fmt}).encode()
        bodies.append((_request("/v1/embeddings", body), per))
    chat = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": texts[0]}],
            "stream": True,
            "max_tokens": chat_tokens,
            "temperature": 0,
            "stream_options": {"include_usage": True},
        }
    )
    context = multiprocessing.get_context("spawn")
    results, ready, go, when = context.Queue(), context.Queue(), context.Event(), context.Value("d", 0.0)
    n = max(1, min(procs, embed + chats))
    workers = []
    for p in range(n):
        plan = {
            "embed": len(range(p, embed, n)),
            "chats": len(range(p, chats, n)),
            "chat": _request("/v1/chat/completions", chat.encode()),
        }
        plan["bodies"] = bodies[p::n]
        workers.append(context.Process(target=_load_process, args=(port, plan, seconds, ready, go, when, results)))
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=300)
    when.value = time.time() + 0.2
    go.set()
    outs = [results.get(timeout=seconds + 120) for _ in workers]
    for w in workers:
        w.join()
    latency = sorted(x for o in outs for x in o["latency"])
    streams = [s for o in outs for s in o["streams"]]
    kinds: dict[str, int] = {}
    for o in outs:
        for kind, n in o["error_kinds"].items():
            kinds[kind] = kinds.get(kind, 0) + n
    row = {
        "error_kinds": kinds,
        "texts_per_s": sum(o["texts"] for o in outs) / seconds,
        "requests_per_s": sum(o["requests"] for o in outs) / seconds,
        "errors": sum(o["errors"] for o in outs),
        "p50_ms": 1000 * latency[len(latency) // 2] if latency else None,
        "p99_ms": 1000 * latency[min(len(latency) - 1, int(len(latency) * 0.99))] if latency else None,
        "mean_ms": 1000 * statistics.fmean(latency) if latency else None,
    }
    if streams:
        row["chat_completions"] = len(streams)
        row["chat_tokens_per_s_per_stream"] = statistics.median(s["tokens"] / s["seconds"] for s in streams)
        row["chat_tokens_per_s_total"] = sum(s["tokens"] for s in streams) / seconds
        row["chat_first_token_ms"] = 1000 * statistics.median(s["first_s"] for s in streams if s["first_s"])
    return row


# ---------------------------------------------------------------------------------------------- the server


def start_server(
    folder: Path, args: argparse.Namespace, workers: int, log: Path, flags: tuple[str, ...] = ()
) -> tuple[subprocess.Popen, int]:
    from bench_serve import free_port

    port = free_port()
    command = [sys.executable, "-m", "nosink", "serve", str(folder), "--spec", args.spec, "--port", str(port)]
    command += ["--device", args.device, "--dtype", args.dtype, "--batch-size", str(args.batch)]
    command += ["--workers", str(workers), "--log-level", "warning", "--chat-share", str(args.chat_share)]
    command += list(flags)  # --chat-riding or --chat-stream (experimental ways of running chat steps)
    command += ["--max-connections-per-client", "2048", "--max-connections", "4096"]
    handle = log.open("w")
    server = subprocess.Popen(command, stderr=handle, stdout=handle, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 600
    while "serving " not in log.read_text():
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the server did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    return server, port


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) that process ``pid`` has used so far, all its threads; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a server's front-ends)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass
    return found


def cpu_now(server: int) -> dict[str, float]:
    """CPU seconds so far of the server's model process, of its front-ends, and of this process's reaped children
    (the load processes, once a load has joined them)."""
    import resource

    load = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "engine": cpu_seconds(server),
        "front_ends": sum(cpu_seconds(pid) for pid in children(server)),
        "clients": load.ru_utime + load.ru_stime,
    }


def gpu_memory(pid: int) -> int | None:
    """MiB of GPU memory that process ``pid`` holds (nvidia-smi), or None."""
    try:
        lines = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    for line in lines:
        got, _, mib = line.partition(",")
        if got.strip() == str(pid):
            return int(mib)
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="qwen2.5-0.5b", help="a shape of benchmarks/bench_encoder.py's ARCHS")
    p.add_argument("--spec", default="F* | M0B*12")
    p.add_argument("--tokenizer", required=True, help="a tokenizer folder (e.g. Qwen2.5's)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--texts", type=int, default=8192)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--workers", type=int, nargs="+", default=[4], help="front-end processes per run (0: one)")
    p.add_argument("--load-procs", type=int, default=4, help="processes generating the load")
    p.add_argument("--chat-share", type=float, default=0.5, help="the server's --chat-share (mixed loads)")
    p.add_argument(
        "--loads",
        nargs="*",
        default=["64x1", "64x1 b64", "16x16", "256x1", "64x1 + 8 chats", "1 chat", "16 chats"],
        help="the loads, on a server taking turns; none (--loads with nothing after it): only --riding-loads and "
        "--variant run",
    )
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--compare-loads", nargs="+", default=["64x1", "16x16"], help="loads for the other --workers")
    p.add_argument(
        "--warm-each",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="run each load this long, unmeasured, before measuring it (default 0: only the server's first warm-up, "
        "5 s of 64x1)",
    )
    p.add_argument(
        "--riding-loads",
        nargs="*",
        default=[],
        help="loads also run on a server started with --chat-riding (chat steps riding embedding batches), with the "
        "first --workers",
    )
    p.add_argument(
        "--variant",
        nargs="+",
        action="append",
        default=[],
        metavar=("FLAGS", "LOAD"),
        help="serve flags without their dashes (one argument, e.g. 'chat-stream chat-compile'), then loads to run on "
        "a server started with them, with the first --workers; may be given several times",
    )
    p.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        help="a py-spy executable: sample the model's process during each load (where its CPU goes)",
    )
    p.add_argument("--profile-dir", type=Path, default=Path("."), help="where --py-spy's raw samples are written")
    args = p.parse_args()
    sys.path.insert(0, str(HERE))
    import torch
    import transformers as tf
    from bench_encoder import ARCHS
    from bench_serve import corpus, health

    texts = corpus(args.texts)
    report: dict = {
        "arch": args.arch,
        "spec": args.spec,
        "batch": args.batch,
        "chat_share": args.chat_share,
        "seconds": args.seconds,
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "transformers": tf.__version__,
        "runs": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        if args.arch not in ARCHS:
            raise SystemExit(f"--arch must be one of {sorted(ARCHS)}")
        report["parameters"] = build(args.arch, args.tokenizer, folder, args.dtype, args.device)
        report["offline"] = offline(folder, args.spec, texts, args.batch, args.dtype, args.device, repeats=3)
        base = report["offline"]["texts_per_s"]
        print(
            f"# {args.arch} ({report['parameters'] / 1e6:.0f}M parameters, random {args.dtype}), spec "
            f"`{args.spec}`, {report['device']}, batch {args.batch}\n",
            flush=True,
        )
        passes = ", ".join(f"{len(texts) / t:,.0f}" for t in report["offline"]["passes_s"])
        print(
            f"offline encode(): {base:,.0f} texts/s ({report['offline']['tokens_per_text']:.1f} tokens a text; "
            f"the median of passes at {passes} texts/s, after two whole passes as warm-up)\n"
        )
        runs = [(workers, "", args.loads if i == 0 else args.compare_loads) for i, workers in enumerate(args.workers)]
        runs.append((args.workers[0], "chat-riding", args.riding_loads))
        runs += [(args.workers[0], flags, loads) for flags, *loads in args.variant]
        for k, (workers, flags, loads) in enumerate([run for run in runs if run[2]]):
            name = f"{workers} {flags.replace('-', ' ')}".strip()  # "8", "8 chat riding", "8 chat stream chat compile"
            log = Path(tmp) / f"server-{k}.log"
            server, port = start_server(folder, args, workers, log, tuple(f"--{flag}" for flag in flags.split()))
            try:
                drive(port, "model", texts, 64, 1, 0, min(5.0, args.seconds), args.load_procs)  # warm-up
                rows = {}
                for load in loads:
                    embed, per, chats = _load(load)
                    if args.warm_each:  # this load's own shapes (batch buckets, chat caches) captured before it counts
                        drive(port, "model", texts, embed, per, chats, args.warm_each, args.load_procs)
                    spy = None
                    if args.py_spy is not None:
                        raw = args.profile_dir / f"py-spy-{name.replace(' ', '-')}-{slug(load)}.txt"
                        spy = sample(args.py_spy, server.pid, args.seconds, raw)
                    before, started, cpu = health(port), time.perf_counter(), cpu_now(server.pid)
                    rows[load] = drive(
                        port,
                        "model",
                        texts,
                        embed,
                        per,
                        chats,
                        args.seconds,
                        args.load_procs,
                        fmt="base64" if "b64" in load else "float",
                    )
                    rows[load]["ratio"] = rows[load]["texts_per_s"] / base
                    after, took, spent = health(port), time.perf_counter() - started, cpu_now(server.pid)
                    # where the time goes: CPU of each side, and the engine's time per unit of work
                    done = rows[load]["requests_per_s"] * args.seconds
                    rows[load]["engine_cpu"] = (spent["engine"] - cpu["engine"]) / took  # cores busy
                    for side in ("front_ends", "clients"):
                        rows[load][f"{side}_cpu_ms_per_request"] = 1000 * (spent[side] - cpu[side]) / max(1.0, done)
                    steps = after["chat_steps"] - before["chat_steps"]
                    rows[load]["chat_ms_per_step"] = (after["chat_ms"] - before["chat_ms"]) / steps if steps else None
                    rows[load]["ridden_steps"] = after.get("ridden_steps", 0) - before.get("ridden_steps", 0)
                    rows[load]["chat_steps"] = steps
                    batches = after["embedding_batches"] - before["embedding_batches"]
                    rows[load]["rows_per_batch"] = (after["embedded_texts"] - before["embedded_texts"]) / max(
                        1, batches
                    )
                    rows[load]["engine_busy"] = (after["busy_ms"] - before["busy_ms"]) / 1000 / took
                    # an embedding request's mean time in the model's process (gathering and batch): the rest of
                    # its mean latency is the front-end's and the client's (HTTP, JSON, tokenizing, the pipe)
                    answered = after["embedding_requests"] - before["embedding_requests"]
                    in_engine = after["embedding_request_ms"] - before["embedding_request_ms"]
                    rows[load]["engine_ms_per_request"] = in_engine / answered if answered else None
                    rows[load]["ms_per_batch"] = (
                        (after["embedding_ms"] - before["embedding_ms"]) / batches if batches else None
                    )
                    rows[load]["graphs"] = after["graphs"]
                    rows[load]["graph_replays_per_batch"] = (after["graph_replays"] - before["graph_replays"]) / max(
                        1, batches
                    )
                    print(f"  workers={name} {load}: {json.dumps(rows[load])}", flush=True)
                    report["runs"][name] = rows
                    if args.json:  # after every load: a run cut short (a time limit) keeps the loads it finished
                        args.json.write_text(json.dumps(report, indent=1))
                    if spy is not None:
                        try:  # a profile that cannot be read costs its summary, never the loads after it
                            print(spy_summary(spy, raw, load, args.seconds), flush=True)
                        except Exception as err:
                            print(f"py-spy ({load}): its samples could not be read ({err!r})", flush=True)
                rows["gpu_memory_mib"] = gpu_memory(server.pid)
            except BaseException:
                print(f"server log tail:\n{log.read_text()[-3000:]}", flush=True)
                raise
            finally:
                server.terminate()
                server.wait(timeout=60)
            report["runs"][name] = rows
            print(table(rows, name, base, loads))
            text = log.read_text()
            print(f"torch recompilations the server logged (with TORCH_LOGS=recompiles): {text.count('Recompiling')}")
            print(f"server log tail:\n{text[-600:]}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


SPY_RATE = 250  # py-spy samples a second


def sample(py_spy: Path, pid: int, seconds: float, raw: Path) -> subprocess.Popen:
    """Start py-spy sampling process ``pid`` while it holds the interpreter lock (the model's process: where its
    CPU goes), for ``seconds``, into ``raw`` (py-spy's raw format: one stack a line and its count)."""
    command = [str(py_spy), "record", "-p", str(pid), "-d", str(max(1, round(seconds))), "-r", str(SPY_RATE)]
    command += ["--gil", "--threads", "--nonblocking", "-f", "raw", "-o", str(raw)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def spy_summary(spy: subprocess.Popen, raw: Path, load: str, seconds: float, top: int = 25) -> str:
    """Where the model's process spent its time holding the interpreter lock, from py-spy's samples: the share
    of the sampled time per thread, then per function (its own time, and with what it calls)."""
    try:
        _, err = spy.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        spy.kill()
        return f"py-spy ({load}): did not finish"
    if spy.returncode != 0 or not raw.exists():
        return f"py-spy ({load}): failed ({spy.returncode}): {err.strip()[:300]}"
    return samples_summary(raw, load, seconds, top)


def samples_summary(raw: Path, load: str, seconds: float, top: int = 25) -> str:
    """:func:`spy_summary` of a py-spy raw file already written (``seconds`` long, at ``SPY_RATE``)."""
    stacks = []
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():  # not a stack and its count (py-spy writes a frame it cannot name so, for one)
            continue
        stacks.append((stack.split(";"), int(count)))
    total = sum(n for _, n in stacks)
    if not total:
        return f"py-spy ({load}): no samples"
    threads: dict[str, int] = {}
    own: dict[str, int] = {}
    within: dict[str, int] = {}
    for frames, n in stacks:
        threads[frames[0]] = threads.get(frames[0], 0) + n
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in set(frames[1:]):
            within[frame] = within.get(frame, 0) + n
    held = total / (SPY_RATE * max(1, round(seconds)))
    lines = [f"\npy-spy ({load}): {total} samples, the interpreter lock held {held:.0%} of the time; by thread:"]
    lines += [f"  {n / total:6.1%}  {name}" for name, n in sorted(threads.items(), key=lambda x: -x[1])]
    lines.append("by function, own time:")
    lines += [f"  {n / total:6.1%}  {name}" for name, n in sorted(own.items(), key=lambda x: -x[1])[:top]]
    lines.append("by function, with what it calls (nosink's and torch's):")
    ours = [(name, n) for name, n in within.items() if "nosink" in name or "torch" in name]
    lines += [f"  {n / total:6.1%}  {name}" for name, n in sorted(ours, key=lambda x: -x[1])[:top]]
    return "\n".join(lines)


def slug(load: str) -> str:
    """A load's name as a file name's part: ``64x1 + 8 chats`` -> ``64x1-and-8chats``."""
    return load.replace(" + ", "-and-").replace(" ", "")


def _load(name: str) -> tuple[int, int, int]:
    """``(embedding clients, texts per request, chat clients)`` of a load's name."""
    if name.endswith("chat") or name.endswith("chats"):
        if "+" in name:
            left, right = name.split("+")
            embed, per = (int(x) for x in left.split()[0].split("x"))
            return embed, per, int(right.split()[0])
        return 0, 1, int(name.split()[0])
    embed, per = (int(x) for x in name.split()[0].split("x"))
    return embed, per, 0


def table(rows: dict, workers: int | str, base: float, loads: list[str]) -> str:
    lines = [
        f"\nfront-end processes: {workers}\n",
        "| load | texts/s | / offline | p50 / p99 ms | errors | chat tokens/s a stream (all) | first token ms "
        "| rows a batch | engine busy | mean ms: in the engine / in all | graphs (replayed batches) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for load in loads:
        r = rows[load]
        chat = (
            f"{r['chat_tokens_per_s_per_stream']:.0f} ({r['chat_tokens_per_s_total']:.0f})"
            if "chat_tokens_per_s_total" in r
            else ""
        )
        first = f"{r['chat_first_token_ms']:.0f}" if "chat_first_token_ms" in r else ""
        lat = f"{r['p50_ms']:.0f} / {r['p99_ms']:.0f}" if r["p50_ms"] is not None else ""
        texts = f"{r['texts_per_s']:,.0f}" if r["texts_per_s"] else ""
        ratio = f"{r['ratio']:.2f}" if r["texts_per_s"] else ""
        busy = f"{r['rows_per_batch']:.0f} | {r['engine_busy']:.0%}" if "engine_busy" in r else " | "
        split = ""
        if r.get("engine_ms_per_request") is not None and r.get("mean_ms") is not None:
            split = f"{r['engine_ms_per_request']:.1f} / {r['mean_ms']:.1f}"
        graphs = f"{r['graphs']} ({r['graph_replays_per_batch']:.0%})" if "graphs" in r else ""
        lines.append(
            f"| {load} | {texts} | {ratio} | {lat} | {r['errors']} | {chat} | {first} | {busy} | {split} | {graphs} |"
        )
    lines += [
        "\nWhere the time goes (CPU of the model's process in cores; CPU ms a request of the front-ends and of the load"
        " processes; the engine's ms a batch and a chat step):\n",
        "| load | model process CPU | front-end CPU ms a request | client CPU ms a request | ms a batch "
        "| ms a chat step |",
        "|---|---|---|---|---|---|",
    ]
    for load in loads:
        r = rows[load]
        if "engine_cpu" not in r:
            continue
        cells = [f"{r['engine_cpu']:.2f}"]
        cells += [
            f"{r[k]:.2f}" if r["requests_per_s"] else ""
            for k in ("front_ends_cpu_ms_per_request", "clients_cpu_ms_per_request")
        ]
        cells += [f"{r[k]:.1f}" if r.get(k) is not None else "" for k in ("ms_per_batch", "chat_ms_per_step")]
        lines.append(f"| {load} | {' | '.join(cells)} |")
    lines.append(f"\nGPU memory of the server process: {rows.get('gpu_memory_mib')} MiB")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
