"""How long the host takes to launch one served embedding batch, and the GPU to run it, by rows: the server's own
batch step (``Batches._queue``: ``encode_batch`` + normalise + the copy to the host queued) on the Qwen2.5-0.5B
shape (random bf16 weights), texts from ``bench_serve.corpus``, after the CUDA graphs are captured. Then torch's
profiler over 20 launches of 21 rows: the host's operations by their own CPU time. On a GPU machine, from the
checkout root (the tokenizer folder as the argument):

    python benchmarks/results/serve-gpu-11/launch-probe.py .gpu/tok
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1])]


def main():
    import torch
    from bench_serve import corpus
    from bench_serve_gpu import build

    from nosink import EncoderFromDecoder
    from nosink.models import texts as _texts
    from nosink.models.encoding import ToHost

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        build("qwen2.5-0.5b", sys.argv[1], folder, "bfloat16", "cuda")
        encoder = EncoderFromDecoder.from_pretrained(str(folder), spec="F* | M0B*12", dtype="bfloat16", device="cuda")
    encoder.warm_up()
    texts = corpus(2048)
    tokens = _texts.tokenize(encoder.tokenizer, texts, sink=encoder.sink_ids(), max_length=512)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    plans = [encoder.plan]

    def launch(rows):
        out, _ = encoder.encode_batch(tokens, rows, plans, "mean", "right", False)
        return ToHost(torch.nn.functional.normalize(out, dim=-1))

    for n in (8, 21, 32, 64, 128):
        batches = [list(range(i, i + n)) for i in range(0, 2048 - n, n)][:60]
        for _ in range(2):  # every bucket's graph captured (at its second batch) before anything is timed
            for rows in batches:
                launch(rows).wait()
        host, gpu, alone = [], [], []
        for rows in batches[6:]:
            torch.cuda.synchronize()
            begun, ended = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begun.record()
            t0 = time.perf_counter()
            sent = launch(rows)
            host.append(time.perf_counter() - t0)
            ended.record()
            sent.wait()
            alone.append(time.perf_counter() - t0)
            gpu.append(begun.elapsed_time(ended))
        # back to back: the next launched while the one before runs (as the engine does under load)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        previous = None
        for rows in batches[6:]:
            sent = launch(rows)
            if previous is not None:
                previous.wait()
            previous = sent
        previous.wait()
        piped = (time.perf_counter() - t0) / len(batches[6:])
        print(
            f"{n:>4} rows: host launch {1000 * statistics.median(host):.2f} ms, launch to result "
            f"{1000 * statistics.median(alone):.2f} ms, GPU span {statistics.median(gpu):.2f} ms, back to back "
            f"{1000 * piped:.2f} ms a batch ({n / piped:,.0f} texts/s)"
        )
    rows = list(range(21))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for i in range(20):
            launch([r + 21 * i for r in rows]).wait()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))


if __name__ == "__main__":
    main()
