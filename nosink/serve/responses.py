"""Writing answers: embedding bodies (floats or base64, cut to ``dimensions``) and JSON encoded fast.

``orjson`` (in the ``serve`` extra) writes float32 arrays straight to JSON, without a Python float per
number; without it the standard library's encoder is used.
"""

import base64
import json
from typing import Any

import numpy as np

try:
    import orjson
except ImportError:  # pragma: no cover - the serve extra installs it
    orjson = None


def dumps(body: Any) -> bytes:
    """``body`` as compact JSON bytes (numpy arrays as lists of numbers)."""
    if orjson is not None:
        return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
    return json.dumps(body, separators=(",", ":"), default=_plain).encode()


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def embedding_body(vectors: np.ndarray, dims: int, fmt: str, model: str, tokens: int) -> bytes:
    """OpenAI's embeddings body, as JSON: ``vectors`` (unit length) cut to ``dims`` and re-normalised.

    ``fmt`` ``"float"`` gives each vector as numbers, ``"base64"`` as the base64 of its little-endian
    float32 bytes (what OpenAI's client asks for by default).
    """
    if dims < vectors.shape[1]:
        vectors = vectors[:, :dims]
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    vectors = np.ascontiguousarray(vectors, dtype="<f4")  # base64 carries little-endian float32, as OpenAI's
    rows: list[Any]
    if fmt == "base64":
        rows = [base64.b64encode(v.tobytes()).decode("ascii") for v in vectors]
    else:
        rows = list(vectors)  # (dims,) float32 arrays, written as numbers by dumps()
    return dumps(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)],
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )
