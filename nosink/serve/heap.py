"""The collector and a serving process's start-up heap: frozen, so that full collections skip it.

A process that imports torch and transformers holds about 385,000 objects the cyclic garbage collector
tracks (modules, functions, classes, the model's modules) before it serves a request. Serving allocates
fast, and objects that live a few milliseconds (a request's job, its rows) survive the young collections,
so every few thousand requests the collector runs a full collection over the whole heap: 2-4 in an 8 s run
of the engine probe on this project's CPU machine, about 200 ms each, during which the process serves
nothing (``benchmarks/results/serve-gpu-10``). Frozen, the start-up heap is left out of every collection (a
full one then took 0.2 ms there). vLLM's engine does the same after loading its model.
"""

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect once, then keep every object alive now out of later collections, until the block ends.

    Frozen objects are still freed when their last reference goes; only those that become garbage in a cycle
    wait for the block's end (which unfreezes them). Use it around the serving of a process that is ready to
    serve. It acts on the whole process and does not nest: an inner block's end unfreezes everything.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
