"""The served mixed load's shape on the engine alone, on a CPU: 64 one-text embedding clients and 8 chat clients
(32 tokens each), with chat steps riding embedding batches or taking turns.

    python benchmarks/results/serve-gpu-13/ride-cpu.py ride 15
    python benchmarks/results/serve-gpu-13/ride-cpu.py turns 15

A tiny random Llama (the tests' ``tiny_lm``, 4 layers of 32) and the tests' tokenizer, one CPU thread, the
encoder on the fast path (``fast_attention=True``: on a CPU riding needs it). Threads stand for the clients: each
sends its next request when the last is answered. Prints texts/s, chat tokens/s and the engine's counters.
"""

import random
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from test_serve_chat import prompt, tiny_lm

from nosink.models import EncoderFromDecoder
from nosink.models import texts as T
from nosink.serve.engine import Engine
from nosink.serve.jobs import ChatJob, EmbedJob, Sampling
from nosink.serve.limits import Limits

torch.set_num_threads(1)
riding, seconds = sys.argv[1] == "ride", float(sys.argv[2])
lm, tok = tiny_lm("llama", 0)
encoder = EncoderFromDecoder.from_model(lm, "F* | M0B*2", tok, fast_attention=True)
engine = Engine(encoder, lm, tok, Limits(batch_size=128, batch_texts=128), chat_riding=riding)
engine.start()
stop = time.monotonic() + seconds
words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran"]
answered = [0]


def embed_client(i: int) -> None:
    rng = random.Random(i)
    while time.monotonic() < stop:
        text = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        job = EmbedJob(T.tokenize(tok, [text], sink=encoder.sink_ids()))
        engine.submit(job)
        job.future.result()
        answered[0] += 1


def chat_client(i: int) -> None:
    n = 0
    while time.monotonic() < stop:
        done = threading.Event()

        def emit(event: tuple, done: threading.Event = done) -> None:
            if event[0] in ("done", "error"):
                done.set()

        engine.submit(ChatJob(prompt(10 + i, 100 * i + n), Sampling(32, 0.0, 1.0, (), None), emit))
        done.wait()
        n += 1


threads = [threading.Thread(target=embed_client, args=(i,)) for i in range(64)]
threads += [threading.Thread(target=chat_client, args=(i,)) for i in range(8)]
start = time.monotonic()
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
took = time.monotonic() - start
s = engine.stats
batches, steps, ridden = max(1, s["embedding_batches"]), s["chat_steps"], s["ridden_steps"]
print(
    f"{sys.argv[1]}: {answered[0] / took:.0f} texts/s, {s['chat_tokens'] / took:.0f} chat tokens/s; {batches} "
    f"batches of {s['embedded_texts'] / batches:.1f} rows, {s['embedding_ms'] / batches:.1f} ms a batch; {steps} "
    f"chat steps, {ridden} of them riding; {s['chat_ms'] / max(1, steps - ridden):.1f} ms a chat step alone"
)
engine.stop()
