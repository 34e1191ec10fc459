"""What a run did: per rank, in all, and in the ``manifest.json`` that rank 0 writes last."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .folder import MANIFEST, SHARD_KEYS
from .shards import write_json
from .world import World

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RankSummary:
    """What one process did in one run.

    Attributes:
        rank: the process's rank.
        texts: rows it encoded in this run.
        tokens: tokens it ran through the model (sink token and instruction included).
        skipped: bad rows it skipped in this run.
        reused: rows of shards it found complete and verified (not encoded again).
        shards_written: shards it wrote.
        shards_reused: shards it found complete and verified.
        seconds: its time from reading the input to its last shard.
    """

    rank: int
    texts: int = 0
    tokens: int = 0
    skipped: int = 0
    reused: int = 0
    shards_written: int = 0
    shards_reused: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class CorpusSummary:
    """The outcome of :func:`encode_corpus`, the same on every rank.

    Attributes:
        folder: the corpus folder.
        rows: rows in the input.
        encoded: rows with a vector in the folder (this run's and reused ones).
        skipped: bad rows skipped, in all runs.
        texts: rows encoded in this run.
        tokens: tokens run through the model in this run.
        seconds: wall time on rank 0 from the moment all processes have joined (models loaded) to the manifest.
        ranks: what each process did.
    """

    folder: Path
    rows: int
    encoded: int
    skipped: int
    texts: int
    tokens: int
    seconds: float
    ranks: list[RankSummary] = field(default_factory=list)

    @property
    def texts_per_second(self) -> float:
        """Rows encoded in this run per second of wall time."""
        return self.texts / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (as stored in the manifest)."""
        out = asdict(self)
        out["folder"] = str(self.folder)
        out["texts_per_second"] = round(self.texts_per_second, 2)
        out["seconds"] = round(self.seconds, 3)
        for r in out["ranks"]:
            r["seconds"] = round(r["seconds"], 3)
        return out


def summarize(out: Path, config: dict[str, Any], gathered: list[Any], world: World, started: float) -> CorpusSummary:
    """Put the ranks' reports together; on rank 0 also write the manifest and remove stray temporary files."""
    ranks = [g[0] for g in gathered]
    records = sorted((r for g in gathered for r in g[1]), key=lambda r: r["shard"])
    truncated = sum(g[2] for g in gathered)
    n_rows = config["input"]["rows"]
    skipped = [s for r in records for s in r["skipped"]]
    summary = CorpusSummary(
        folder=out,
        rows=n_rows,
        encoded=sum(r["rows"] for r in records),
        skipped=len(skipped),
        texts=sum(r.texts for r in ranks),
        tokens=sum(r.tokens for r in ranks),
        seconds=time.perf_counter() - started,
        ranks=ranks,
    )
    if world.rank == 0:
        for stale in out.glob(".shard-*.tmp"):
            stale.unlink(missing_ok=True)
        manifest = {
            **config,
            "rows": n_rows,
            "encoded": summary.encoded,
            "skipped": summary.skipped,
            "skipped_rows": skipped,
            "truncated": sum(r.get("truncated", 0) for r in records),
            "shards": [{k: r[k] for k in SHARD_KEYS} for r in records],
            "world_size": world.size,
            "summary": summary.as_dict(),
        }
        write_json(out / MANIFEST, manifest)
        per_rank = "; ".join(f"rank {r.rank}: {r.texts} texts, {r.tokens} tokens, {r.seconds:.1f} s" for r in ranks)
        logger.info(
            "encoded %d texts (%d tokens) in %.1f s, %.1f texts/s, into %s (%d reused, %d skipped); %s",
            summary.texts, summary.tokens, summary.seconds, summary.texts_per_second, out,
            sum(r.reused for r in ranks), summary.skipped, per_rank,
        )  # fmt: skip
        if truncated:
            logger.warning("%d texts were cut to max_length=%d tokens in this run", truncated, config["max_length"])
    return summary
