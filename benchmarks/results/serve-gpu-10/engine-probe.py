"""The model's process's own cost per embedding request, the forward stubbed.

The real Engine and PipeInbox behind 8 pipes to one process standing in for 8 front-ends (64 one-text requests
of 8-40 random tokens in flight; each answered one sends another); the encoder's ``encode_batch`` replaced by a
tensor of ones (896 wide). Prints requests/s (on a 2-core machine the stand-in process is what limits them), the
engine thread's CPU per request, and the garbage collector's collections by generation (count, seconds).
From the checkout root:

    PROF=0 SECS=8 python benchmarks/results/serve-gpu-10/engine-probe.py            # as served
    FREEZE=1 PROF=0 SECS=8 python benchmarks/results/serve-gpu-10/engine-probe.py   # start-up heap frozen
    SECS=8 python benchmarks/results/serve-gpu-10/engine-probe.py                   # with cProfile's table
"""

import cProfile
import gc
import multiprocessing
import os
import pstats
import random
import sys
import threading
import time
from multiprocessing.connection import wait as wait_for

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests"))

WIDTH = 896
CLIENTS = 64


def _job(rnd):
    from nosink.models import texts
    from nosink.serve.jobs import EmbedJob

    ids = [rnd.randint(4, 95) for _ in range(rnd.randint(8, 40))]  # distinct texts: one row each in a batch
    return EmbedJob(texts.Tokenized(prefix_ids=[[1]], text_ids=[ids], suffix_ids=[[]]))


def driver(conns, seconds, out):
    """The front-ends' stand-in: CLIENTS requests in flight over ``conns``, one sent for each one answered."""
    rnd = random.Random(0)
    ident = 0
    for conn in conns:
        for _ in range(CLIENTS // len(conns)):
            conn.send(("job", ident, _job(rnd)))
            ident += 1
    done, start = 0, time.perf_counter()
    while time.perf_counter() < start + seconds:
        for conn in wait_for(conns, 0.1):
            while conn.poll():
                message = conn.recv()
                for kind, _, payload in message[2] if message[0] == "many" else [message]:
                    answered = 1 if kind == "vectors" else len(payload[0]) if kind == "stacked" else 0
                    for _ in range(answered):
                        done += 1
                        conn.send(("job", ident, _job(rnd)))
                        ident += 1
    out.put(done / (time.perf_counter() - start))


def main():
    from tiny import tiny_decoder, tiny_tokenizer

    from nosink.models import EncoderFromDecoder
    from nosink.serve.engine import Engine
    from nosink.serve.limits import Limits
    from nosink.serve.processes import PipeInbox

    torch.set_num_threads(1)
    encoder = EncoderFromDecoder.from_model(tiny_decoder("llama"), "F* | M0B*2")
    encoder.encode_batch = lambda inputs, rows, plans, *a, **k: (torch.ones(len(plans), len(rows), WIDTH), None)
    engine = Engine(encoder, None, tiny_tokenizer(), Limits(batch_size=128))
    inbox = PipeInbox(engine)
    engine.inbox = inbox
    context = multiprocessing.get_context("spawn")
    pairs = [context.Pipe() for _ in range(int(os.environ.get("FRONTS", 8)))]
    for mine, _ in pairs:
        inbox.attach(mine, lambda why: None)

    print("tracked objects", len(gc.get_objects()))
    if os.environ.get("FREEZE") == "1":
        gc.freeze()
    collections = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    began = {}

    def timed(phase, info):
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            count = collections[info["generation"]]
            count[0] += 1
            count[1] += time.perf_counter() - began[0]

    gc.callbacks.append(timed)
    profile, thread_cpu = cProfile.Profile(), []
    loop = engine._loop

    def profiled():
        if os.environ.get("PROF", "1") == "1":
            profile.enable()
        start = time.thread_time()
        try:
            loop()
        finally:
            profile.disable()
            thread_cpu.append(time.thread_time() - start)

    engine.thread = threading.Thread(target=profiled, daemon=True)
    engine.thread.start()
    out = context.Queue()
    stand_in = context.Process(
        target=driver, args=([theirs for _, theirs in pairs], float(os.environ.get("SECS", 8)), out)
    )
    cpu, wall = time.process_time(), time.perf_counter()
    stand_in.start()
    rate = out.get()
    stand_in.join()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    engine.stop()
    stats = engine.stats
    print(
        f"requests/s {rate:,.0f}; batches {stats['embedding_batches']}, texts {stats['embedded_texts']}, rows a batch "
        f"{stats['embedded_texts'] / max(1, stats['embedding_batches']):.1f}; model process CPU {cpu / wall:.2f} "
        f"cores; engine thread us CPU a request {thread_cpu[0] / stats['embedding_requests'] * 1e6:.0f}"
    )
    print("gc (count, seconds) by generation", {k: (v[0], round(v[1], 3)) for k, v in collections.items()})
    if os.environ.get("PROF", "1") == "1":
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
