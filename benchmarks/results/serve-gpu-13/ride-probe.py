"""What a chat step riding an embedding batch costs on a GPU: the engine's three units timed back to back.

python benchmarks/results/serve-gpu-13/ride-probe.py --tokenizer TOKENIZER_DIR --arch qwen2.5-0.5b --spec "F* | M0B*12"

Random bf16 weights at the architecture's shape, a real tokenizer. For a batch of ``--rows`` texts (one-text
requests, as 64 clients make) and ``--chats`` chats being decoded: the batch alone (``Batches.step`` + ``finish``),
a chat step alone (``Chats.step``), the two one after the other (taking turns), and one riding unit
(``Chats.rider`` + ``Batches.step`` + ``finish`` + ``Chats.ridden``). Each is the median of ``--repeats`` units
after a warm-up that captures every graph; every unit ends with the GPU idle (``torch.cuda.synchronize``).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_encoder import ARCHS
from bench_serve import corpus

from nosink.models import texts as T
from nosink.serve import Limits, create_app
from nosink.serve.jobs import ChatJob, EmbedJob, Sampling

p = argparse.ArgumentParser()
p.add_argument("--arch", default="qwen2.5-0.5b")
p.add_argument("--spec", default="F* | M0B*12")
p.add_argument("--tokenizer", required=True)
p.add_argument("--rows", type=int, nargs="+", default=[21, 64])
p.add_argument("--chats", type=int, nargs="+", default=[1, 8])
p.add_argument("--repeats", type=int, default=100)
args = p.parse_args()
tok = tf.AutoTokenizer.from_pretrained(args.tokenizer)
if not tok.chat_template:  # as bench_serve_gpu.py's build()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
config = ARCHS[args.arch]()
config.vocab_size = max(config.vocab_size, len(tok))
torch.manual_seed(0)
with torch.device("cuda"):
    lm = tf.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
app = create_app(lm, tok, args.spec, limits=Limits(batch_size=128, batch_texts=128, batch_wait_ms=0))
engine, encoder = app.state.engine, app.state.encoder
engine.encoder.warm_up()
texts = corpus(4096)
sink = encoder.sink_ids()
print(f"# {args.arch}, `{args.spec}`, {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)


def embed(n: int, at: int) -> list[EmbedJob]:
    jobs = [EmbedJob(T.tokenize(tok, [texts[(at + i) % len(texts)]], sink=sink)) for i in range(n)]
    for job in jobs:
        engine.batches.add(job)
    return jobs


def chats(n: int) -> None:
    """n chats that never end (max_tokens far away), prefilled."""
    for i in range(n):
        ids = tok(texts[i])["input_ids"][:24]
        engine.chats.add(ChatJob(ids, Sampling(100000, 0.0, 1.0, (), None), lambda event: None))
    engine.chats.step()


def timed(unit, count: int) -> float:
    took = []
    for i in range(count):
        torch.cuda.synchronize()
        start = time.perf_counter()
        unit(i)
        torch.cuda.synchronize()
        took.append(time.perf_counter() - start)
    return statistics.median(took) * 1000


def batch_alone(n: int):
    def unit(i: int) -> None:
        embed(n, i * n)
        engine.batches.step()
        engine.batches.finish()

    return unit


def chat_alone(i: int) -> None:
    engine.chats.step()


def turns(n: int):
    first = batch_alone(n)

    def unit(i: int) -> None:
        first(i)
        engine.chats.step()

    return unit


def riding(n: int):
    def unit(i: int) -> None:
        embed(n, i * n)
        rider = engine.chats.rider()
        engine.batches.step(rider)
        engine.batches.finish()
        engine.chats.ridden(rider)
        assert rider.logits is not None

    return unit


with torch.inference_mode():
    for c in args.chats:
        engine.chats = engine._new_work()[1]
        chats(c)
        for n in args.rows:
            units = {"batch alone": batch_alone(n), "chat step alone": chat_alone, "taking turns": turns(n),
                     "riding": riding(n)}  # fmt: skip
            for unit in units.values():
                timed(unit, 5)  # captures
            row = {name: timed(unit, args.repeats) for name, unit in units.items()}
            print(
                f"{n} rows, {c} chats: "
                + ", ".join(f"{name} {ms:.2f} ms" for name, ms in row.items())
                + f"; riding / batch alone {row['riding'] / row['batch alone']:.2f}, riding / taking turns "
                f"{row['riding'] / row['taking turns']:.2f}; graphs {encoder.graph_counts()}",
                flush=True,
            )
