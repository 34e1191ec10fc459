"""Token ids and character offsets read straight off a fast tokenizer's Rust backend.

Reading them off the backend's output costs a fraction of what transformers' conversion of it does;
:func:`encode_fast` gives exactly what ``tokenizer(strings, add_special_tokens=False,
return_offsets_mapping=True)`` gives, and calls the tokenizer wherever the two could differ.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Encoded", "encode_fast", "read_encodings", "rust_backend"]

Encoded = tuple[list[list[int]], list[list[tuple[int, int]]]]
"""A fast tokenizer's output for a list of strings: each one's token ids and their ``(start, end)`` characters."""

# An empty row of offsets, shared by the rows that have none (never changed in place).
_NO_SPANS: list[tuple[int, int]] = []


def encode_fast(tokenizer: Any, strings: list[str], lead: bool = False) -> Encoded:
    """Each string's ids and character offsets, no special tokens added. With ``lead``, see :func:`read_encodings`."""
    backend = rust_backend(tokenizer)
    if backend is None:
        enc = tokenizer(strings, add_special_tokens=False, return_offsets_mapping=True)
        return enc["input_ids"], enc["offset_mapping"]
    return read_encodings(backend.encode_batch(strings, add_special_tokens=False), lead)


def read_encodings(encodings: list[Any], lead: bool = False) -> Encoded:
    """The ids and offsets of the backend's ``Encoding`` objects, as Python lists.

    With ``lead``, each row's offsets stop at its first token with a non-empty span: the ``(0, 0)`` spans
    before it are all that splitting off the prefix of an input without an instruction reads, and a million
    offset tuples cost host time and garbage-collector work. (Offsets never decrease along a row, so no
    ``(0, 0)`` span comes after a non-empty one.)
    """
    ids = [e.ids for e in encodings]
    if not lead:
        return ids, [e.offsets for e in encodings]
    empty = (0, 0)
    spans = []
    for e, row in zip(encodings, ids, strict=True):
        k = 0
        while k < len(row) and e.token_to_chars(k) == empty:
            k += 1
        spans.append([empty] * k if k else _NO_SPANS)
    return ids, spans


def rust_backend(tokenizer: Any) -> Any:
    """The ``tokenizers`` object under a transformers fast tokenizer whose call goes straight to it, else ``None``.

    That is: its class keeps transformers' own ``__call__`` and ``_encode_plus``, and the backend is set as that
    call would set it (no truncation, no padding, special tokens split or not as the tokenizer says).
    """
    try:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:  # pragma: no cover - a transformers without that module
        return None
    if not isinstance(tokenizer, TokenizersBackend):
        return None
    cls = type(tokenizer)
    if any(getattr(cls, name) is not getattr(TokenizersBackend, name) for name in ("__call__", "_encode_plus")):
        return None
    backend = tokenizer.backend_tokenizer
    split = bool(getattr(tokenizer, "split_special_tokens", False))
    if backend.truncation is not None or backend.padding is not None or backend.encode_special_tokens != split:
        return None
    return backend
