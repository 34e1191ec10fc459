"""Sentence embeddings of the study's candidates, each text encoded once per candidate, every candidate in one pass."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import numpy as np

from nosink.models import EncoderFromDecoder

from .candidates import NO_TEMPLATE, Candidate

__all__ = ["EmbeddingCache"]

logger = logging.getLogger(__name__)


class EmbeddingCache:
    """Sentence embeddings of one encoder under one template and instruction, per candidate and text.

    :meth:`vectors` encodes only the texts a candidate has not seen yet, with every candidate that
    lacks any of them in one :meth:`~EncoderFromDecoder.encode_specs` pass (shared layers run once).
    Embeddings are kept unnormalised; :attr:`seconds` and :attr:`texts_encoded` add up the work done;
    ``show_progress_bar`` shows a bar for each pass of more than 8 batches.
    ``instruction`` is one instruction for every text, or a function giving each text its own (retrieval:
    queries get the task's, documents none); a template takes none. ``pooling`` overrides the template's (or
    mean pooling without one).
    """

    def __init__(
        self,
        encoder: EncoderFromDecoder,
        template: str | None = None,
        instruction: str | Callable[[str], str | None] | None = None,
        batch_size: int = 32,
        max_length: int = 512,
        show_progress_bar: bool = False,
        pooling: str | None = None,
    ) -> None:
        self.encoder, self.template, self.instruction, self.pooling = encoder, template, instruction, pooling
        self.batch_size, self.max_length, self.show_progress_bar = batch_size, max_length, show_progress_bar
        self._store: dict[str, dict[str, np.ndarray]] = {}
        self.seconds = 0.0
        self.texts_encoded = 0

    def vectors(self, candidates: Sequence[Candidate], texts: Sequence[str]) -> dict[str, np.ndarray]:
        """``{candidate name: (len(texts), D) array}`` in the order of ``texts``."""
        unique = list(dict.fromkeys(texts))
        missing = {c.name: [t for t in unique if t not in self._store.get(c.name, {})] for c in candidates}
        todo = [c for c in candidates if missing[c.name]]
        if todo:
            union = list(dict.fromkeys(t for c in todo for t in missing[c.name]))
            groups: dict[str | None, list[str]] = {}
            for t in union:
                groups.setdefault(self._instruction(t), []).append(t)
            start = time.perf_counter()
            plans = [c.plan(self.encoder) for c in todo]  # named as the encoder names them (its prepend included)
            for instruction, group in groups.items():  # one pass per instruction (retrieval: queries, documents)
                part = self.encoder.encode_specs(
                    plans,
                    group,
                    instruction,
                    template=self.template,
                    batch_size=self.batch_size,
                    max_length=self.max_length,
                    show_progress_bar=None if self.show_progress_bar else False,
                    **({} if self.pooling is None else {"pooling": self.pooling}),
                )
                for c, plan in zip(todo, plans, strict=True):
                    self._store.setdefault(c.name, {}).update(zip(group, part[plan.name], strict=True))
            took = time.perf_counter() - start
            self.seconds += took
            self.texts_encoded += len(union)
            logger.info(
                "%s: %d texts x %d specs in %.1f s (%.1f texts/s)",
                self.template or NO_TEMPLATE, len(union), len(todo), took, len(union) / max(took, 1e-9),
            )  # fmt: skip
        return {c.name: np.stack([self._store[c.name][t] for t in texts]) for c in candidates}

    def _instruction(self, text: str) -> str | None:
        if self.template is not None:
            return None
        return self.instruction(text) if callable(self.instruction) else self.instruction
