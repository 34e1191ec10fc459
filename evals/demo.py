"""The demo: paraphrase pairs encoded with a converted model, and whether each pair ranks closest.

``nosink demo`` prints what :func:`run_demo` returns: the cosine similarities of every sentence with
every other, and for each pair whether its two sentences are closer to each other than to any
sentence of another pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nosink.models import EncoderFromDecoder

__all__ = ["DEMO_INSTRUCTION", "DEMO_PAIRS", "DEMO_SPEC", "DemoResult", "PairCheck", "pair_ranking", "run_demo"]

DEMO_SPEC = "F* | M0B*10"  # MASK0-BIDIR, k=10 (the paper's best k for 22-layer TinyLlama; not tuned here)
DEMO_INSTRUCTION = "Instruct: Retrieve semantically similar text.\nQuery: "  # the paper's STS prompt, E5 style
DEMO_PAIRS: tuple[tuple[str, str], ...] = (
    ("A man is playing a guitar.", "Someone is strumming a guitar."),
    ("The stock market fell sharply today.", "Share prices dropped steeply this afternoon."),
    ("How do I reset my password?", "I forgot my password and need to change it."),
    ("The cat is sleeping on the sofa.", "A kitten naps on the couch."),
)


@dataclass(frozen=True)
class PairCheck:
    """One paraphrase pair: its similarity, and the highest similarity of either sentence to another pair's."""

    a: int  # row of the first sentence
    b: int  # row of the second sentence
    similarity: float
    closest_unrelated: float

    @property
    def closer(self) -> bool:
        """Whether the pair is closer to each other than either sentence is to any unrelated one."""
        return self.similarity > self.closest_unrelated


@dataclass(frozen=True)
class DemoResult:
    """The demo's texts (pairs flattened: rows 2p and 2p+1 are pair p), similarities and pair checks."""

    texts: list[str]
    similarities: np.ndarray  # (N, N) cosine similarities
    pairs: list[PairCheck]

    @property
    def held(self) -> int:
        """How many pairs are closer to each other than to any unrelated sentence."""
        return sum(p.closer for p in self.pairs)


def pair_ranking(similarities: np.ndarray) -> list[PairCheck]:
    """Check each pair of rows (2p, 2p+1) of a similarity matrix against every other row.

    Raises:
        ValueError: if the matrix is not square with an even number (at least 4) of rows.
    """
    n = similarities.shape[0]
    if similarities.ndim != 2 or similarities.shape[1] != n or n % 2 or n < 4:
        raise ValueError(f"need a square similarity matrix of at least two pairs, got shape {similarities.shape}")
    out = []
    for a in range(0, n, 2):
        b = a + 1
        others = [j for j in range(n) if j not in (a, b)]
        unrelated = max(similarities[a, others].max(), similarities[b, others].max())
        out.append(PairCheck(a, b, float(similarities[a, b]), float(unrelated)))
    return out


def run_demo(
    encoder: EncoderFromDecoder,
    pairs: Sequence[tuple[str, str]] = DEMO_PAIRS,
    instruction: str | None = DEMO_INSTRUCTION,
) -> DemoResult:
    """Encode the pairs (normalised, with the instruction) and rank each pair against the others.

    Raises:
        ValueError: for fewer than two pairs.
    """
    texts = [t for pair in pairs for t in pair]
    if len(pairs) < 2:
        raise ValueError(f"the demo needs at least two pairs, got {len(pairs)}")
    vectors = encoder.encode(texts, instruction=instruction, normalize_embeddings=True)
    sims = vectors @ vectors.T
    return DemoResult(texts, sims, pair_ranking(sims))
