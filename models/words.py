"""Words of a pre-split sentence (a CoNLL line of tokens) and the tokens that start them.

Word-level readers (the NER probe) join a sentence's words into one text for :func:`nosink.models.texts.tokenize`
and read, for each word, the state of its first token: :func:`join_words` gives each word's characters in the
joined text, :func:`first_tokens` the token that starts there (from the tokenizer's offsets).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["first_tokens", "join_words"]


def join_words(words: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """Words joined by single spaces, and each word's ``(start, end)`` characters in the result.

    >>> join_words(["EU", "rejects"])
    ('EU rejects', [(0, 2), (3, 10)])
    """
    spans, pos = [], 0
    for word in words:
        spans.append((pos, pos + len(word)))
        pos += len(word) + 1
    return " ".join(words), spans


def first_tokens(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[int | None]:
    """For each character span (a word), the index of the first token overlapping it.

    ``None`` for a span that no token reaches (its tokens were cut by truncation). ``offsets`` are
    the tokens' character spans, in order (``Tokenized.offsets``).

    >>> first_tokens([(0, 2), (2, 6), (6, 10)], [(0, 2), (3, 10)])  # [EU][ rej][ects]
    [0, 1]
    """
    first: list[int | None] = []
    t = 0
    for start, end in spans:
        while t < len(offsets) and offsets[t][1] <= start:
            t += 1
        first.append(t if t < len(offsets) and offsets[t][0] < end else None)
    return first
