"""The model's process's own cost per embedding request, the forward stubbed: the real Engine and PipeInbox,
8 pipes to one process standing in for 8 front-ends (64 requests of 8-40 tokens in flight, each answered one
sends another), the encoder's encode_batch replaced by a tensor of ones (896 wide). Prints requests/s (the
stand-in process is what limits them on a 2-core machine), the engine thread's CPU per request, and the
collector's collections by generation (count, seconds). From the checkout root:

    PROF=0 SECS=8 python benchmarks/results/serve-gpu-10/engine-probe.py            # as served
    FREEZE=1 PROF=0 SECS=8 python benchmarks/results/serve-gpu-10/engine-probe.py   # start-up heap frozen
    SECS=8 python benchmarks/results/serve-gpu-10/engine-probe.py                   # with cProfile's table
"""
import cProfile, multiprocessing, os, pstats, sys, time, threading
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests"))
import torch
from multiprocessing.connection import wait as wait_for

def driver(conns, clients, seconds, out):
    # front-end stand-ins: closed loop, `clients` jobs outstanding spread over conns
    from nosink.serve.jobs import EmbedJob
    from nosink.models import texts as T
    import random
    rnd = random.Random(0)
    def job():
        n = rnd.randint(8, 40)
        return EmbedJob(T.Tokenized(prefix_ids=[[1]], text_ids=[list(range(4, 4 + n))], suffix_ids=[[]]))
    ident = 0
    per = clients // len(conns)
    for c in conns:
        for _ in range(per):
            c.send(("job", ident, job())); ident += 1
    done = 0; t0 = time.perf_counter(); end = t0 + seconds
    while time.perf_counter() < end:
        for c in wait_for(conns, 0.1):
            while c.poll():
                msg = c.recv()
                msgs = msg[2] if msg[0] == "many" else [msg]
                for m in msgs:
                    k = 1 if m[0] == "vectors" else len(m[2][0]) if m[0] == "stacked" else 0
                    for _ in range(k):
                        done += 1
                        c.send(("job", ident, job())); ident += 1
    out.put(done / (time.perf_counter() - t0))

TT=[]
def main():
    from nosink.serve.engine import Engine
    from nosink.serve.limits import Limits
    from nosink.serve.processes import PipeInbox
    from nosink.models import EncoderFromDecoder
    from tiny import tiny_decoder
    torch.set_num_threads(1)
    enc = EncoderFromDecoder.from_model(tiny_decoder("llama"), "F* | M0B*2")
    D = int(os.environ.get("DIM", 896))
    def stub(inputs, idx, plans, *a, **k):
        return torch.zeros(len(plans), len(idx), D) + 1.0, None
    enc.encode_batch = stub
    from tiny import tiny_tokenizer
    engine = Engine(enc, None, tiny_tokenizer(), Limits(batch_size=128))
    inbox = PipeInbox(engine); engine.inbox = inbox
    ctx = multiprocessing.get_context("spawn")
    workers = int(os.environ.get("FRONTS", 8))
    pairs = [ctx.Pipe() for _ in range(workers)]
    for mine, _ in pairs:
        inbox.attach(mine, lambda why: None)
    import gc
    print("tracked objects", len(gc.get_objects()))
    if os.environ.get("FREEZE") == "1":
        gc.freeze()
    GC = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    start = {}
    def cb(phase, info):
        if phase == "start": start[0] = time.perf_counter()
        else:
            g = GC[info["generation"]]; g[0] += 1; g[1] += time.perf_counter() - start[0]
    gc.callbacks.append(cb)
    prof = cProfile.Profile()
    orig = engine._loop
    def loop():
        if os.environ.get('PROF','1')=='1': prof.enable()
        t=time.thread_time()
        try: orig()
        finally:
            prof.disable(); TT.append(time.thread_time()-t)
    engine._loop = loop
    engine.thread = threading.Thread(target=loop, daemon=True)
    engine.thread.start()
    q = ctx.Queue()
    p = ctx.Process(target=driver, args=([t for _, t in pairs], 64, float(os.environ.get("SECS", 8)), q))
    c0 = time.process_time(); t0 = time.perf_counter()
    p.start(); rate = q.get(); p.join()
    cpu = time.process_time() - c0; wall = time.perf_counter() - t0
    engine.stop()
    print(f"requests/s {rate:,.0f}; batches {engine.stats['embedding_batches']}, texts {engine.stats['embedded_texts']}, "
          f"rows a batch {engine.stats['embedded_texts']/max(1,engine.stats['embedding_batches']):.1f}; "
          f"model process CPU {cpu/wall:.2f} cores; engine thread us CPU a request {TT[0]/engine.stats['embedded_texts']*1e6:.0f}")
    print('gc (count, seconds) by generation', {k: (v[0], round(v[1], 3)) for k, v in GC.items()})
    if os.environ.get('PROF','1')!='1': return
    st = pstats.Stats(prof); st.sort_stats("tottime").print_stats(25)

if __name__ == "__main__":
    main()
