"""One process of a corpus-encoding run, for tests/test_corpus.py (started by torchrun or alone).

    python tests/corpus_worker.py '{"model": ..., "input": ..., "out": ..., "kwargs": {...}}'

``CORPUS_KILL_RANK=r`` and ``CORPUS_KILL_AFTER=k`` make rank r die (``os._exit``, no cleanup) when it
starts to seal its (k+1)-th shard: that shard's file is left complete but under its temporary name, as
a kill mid-write would leave it.
Rank 0 writes the summary to ``<out>.summary.json``.
"""

import json
import os
import sys
from pathlib import Path

from nosink import EncoderFromDecoder
from nosink.corpus import encode_corpus, shards


def _inject_kill() -> None:
    rank, after = os.environ.get("CORPUS_KILL_RANK"), os.environ.get("CORPUS_KILL_AFTER")
    if rank is None or int(os.environ.get("RANK", "0")) != int(rank):
        return
    seal, done = shards.ShardFile.seal, []

    def dying_seal(shard):
        if len(done) == int(after):
            os._exit(9)
        done.append(shard.k)
        return seal(shard)

    shards.ShardFile.seal = dying_seal


def main() -> None:
    job = json.loads(sys.argv[1])
    _inject_kill()
    encoder = EncoderFromDecoder.from_pretrained(job["model"])
    summary = encode_corpus(encoder, job["input"], job["out"], **{"show_progress": False, **job["kwargs"]})
    if int(os.environ.get("RANK", "0")) == 0:
        Path(job["out"] + ".summary.json").write_text(json.dumps(summary.as_dict()))


if __name__ == "__main__":
    main()
