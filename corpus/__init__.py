"""Corpus encoding: a corpus file into a folder of safetensors shards, on one process or many (``torchrun``),
resumable, and read back memory-mapped.

Modules: ``inputs`` (rows and bad rows), ``world`` (the processes), ``shards`` (the shard file), ``folder``
(lock, ``run.json``, done shards), ``run`` (:func:`encode_corpus`), ``summary`` (the manifest) and ``read``
(:func:`load_corpus_embeddings`).
"""

from .inputs import BadRowError, DuplicateIdError
from .read import CorpusEmbeddings, CorpusIds, ShardedMatrix, load_corpus_embeddings
from .run import encode_corpus
from .summary import CorpusSummary, RankSummary
from .world import local_device

__all__ = [
    "BadRowError",
    "CorpusEmbeddings",
    "CorpusIds",
    "CorpusSummary",
    "DuplicateIdError",
    "RankSummary",
    "ShardedMatrix",
    "encode_corpus",
    "load_corpus_embeddings",
    "local_device",
]
