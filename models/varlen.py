"""The variable-length flash kernel over segments of a packed stream, and its exact per-sequence fallback.

A packed stream ``(N, h, d)`` holds sequences one after another; :class:`Segments` says where each segment
starts (``cu_seqlens``, on the device, and on the host when known). :func:`attend_segments` attends within
each segment over a window (full, causal, or reverse-causal: each query and every key after it), on the flash
kernel of ``torch.nn.attention.varlen`` where it applies (CUDA, fp16/bf16), else with one SDPA call per
segment (exact; needs the host's bounds). :func:`call` is the kernel call itself, also for queries whose
segments are not their keys' (one query a row over the row's keys), or whose keys overlap another segment's
(``used_keys``: each segment's keys start at its own bound and run that many tokens). Pure torch.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from functools import cache
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from einops import rearrange, repeat

__all__ = [
    "CAUSAL",
    "FULL",
    "LATER",
    "WINDOWS",
    "Segments",
    "attend_segments",
    "call",
    "kernel_applies",
    "takes_used_keys",
    "varlen_ready",
]

logger = logging.getLogger(__name__)


class Segments(NamedTuple):
    """Sequences of a packed stream that attend within themselves: bounds on the device and, off a graph, the host."""

    cu: torch.Tensor  # (S + 1,) int32 bounds; empty segments repeat a bound
    max_length: int  # bounds every segment's length
    bounds: list[int] | None  # the same bounds on the host, when known (the per-sequence loop needs them)


# Keys each query of a segment attends, as flash attention's (left, right) window: -1 reaches the segment's end.
FULL, CAUSAL, LATER = (-1, -1), (-1, 0), (0, -1)
WINDOWS = {"B": FULL, "F": CAUSAL, "R": LATER}  # R: each query and every key after it (reverse-causal)


def attend_segments(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    segments: Segments,
    window: tuple[int, int],
    scale: float | None,
) -> torch.Tensor:
    """Attention within each segment of ``q (N, h, d)``, ``k``/``v (N, hkv, d)`` over ``window``: ``(N, h, dv)``."""
    if kernel_applies(q):
        try:
            return call(q, k, v, segments, window, scale)
        except (RuntimeError, TypeError) as err:  # a torch build whose varlen kernel refuses these inputs
            if segments.bounds is None:
                raise
            logger.warning("variable-length attention failed (%s); using a per-sequence loop from now on", err)
            BROKEN.append(err)
    if segments.bounds is None:
        raise RuntimeError("a stream without host bounds needs the variable-length kernel (CUDA, 16-bit floats)")
    # Exact everywhere: one SDPA call per sequence (the CPU path, and float32 on CUDA).
    out = q.new_empty(q.shape[0], q.shape[1], v.shape[-1])
    groups = q.shape[1] // k.shape[1]
    for a, b in itertools.pairwise(segments.bounds):
        if b - a == 1:  # one token attends only itself: its own value
            out[a] = repeat(v[a], "hkv d -> (hkv g) d", g=groups)
        elif b > a:
            qs, ks, vs = (rearrange(x[a:b], "t h d -> 1 h t d") for x in (q, k, v))
            later = window == LATER
            if later:  # reverse-causal: causal over the reversed segment
                qs, ks, vs = qs.flip(2), ks.flip(2), vs.flip(2)
            res = F.scaled_dot_product_attention(
                qs, ks, vs, is_causal=window != FULL, scale=scale, enable_gqa=groups > 1
            )
            out[a:b] = rearrange(res.flip(2) if later else res, "1 h t d -> t h d")
    return out


def call(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    segments: Segments,
    window: tuple[int, int],
    scale: float | None,
    queries: Segments | None = None,
    used_keys: torch.Tensor | None = None,
) -> torch.Tensor:
    # `queries`: the queries' own segments (each of `segments`' key segments), when they are not the keys' own.
    # `used_keys (S,)` int32: segment i's keys are the `used_keys[i]` tokens from its bound `segments.cu[i]` on, so
    # that segments may share keys (see takes_used_keys(): inference only, the kernel has no backward for it).
    fn, params = function()  # type: ignore[misc]
    queries = segments if queries is None else queries
    kwargs: dict[str, Any] = {}
    if used_keys is not None:
        if "seqused_k" not in params:
            fn, params = _flash_forward, _FLASH_PARAMS
        kwargs["seqused_k"] = used_keys
    if window != FULL:
        if "window_size" in params:  # torch >= 2.11: causal is a window reaching no key to the right
            kwargs["window_size"] = window
        elif "is_causal" in params and window == CAUSAL:
            kwargs["is_causal"] = True
        else:
            raise TypeError(f"this torch's varlen_attn takes no window_size (needed for the window {window})")
    if scale is not None:
        if "scale" in params:
            kwargs["scale"] = scale
        else:
            q = q * (scale * q.shape[-1] ** 0.5)
    longest, most = max(segments.max_length, 1), max(queries.max_length, 1)
    heads = q.shape[1]
    if heads != k.shape[1]:
        if "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        elif NATIVE_GQA:
            # torch 2.11's varlen_attn has no enable_gqa, but its flash kernel takes fewer key/value heads
            # as they are (on an H100: the same output as repeated heads, to the bit); a build that refuses
            # them is asked with repeated heads from then on.
            try:
                return fn(q, k, v, queries.cu, segments.cu, most, longest, **kwargs)
            except RuntimeError:
                NATIVE_GQA.clear()
        if "enable_gqa" not in kwargs:
            k, v = (repeat(x, "n hkv d -> n (hkv g) d", g=heads // x.shape[1]) for x in (k, v))
    return fn(q, k, v, queries.cu, segments.cu, most, longest, **kwargs)


def takes_used_keys() -> bool:
    """Whether :func:`call` takes ``used_keys`` here: through ``varlen_attn``, or the flash op it calls."""
    found = function()
    if found is None:
        return False
    return "seqused_k" in found[1] or _flash_takes_used_keys()


@cache
def _flash_takes_used_keys() -> bool:
    op = getattr(torch.ops.aten, "_flash_attention_forward", None)
    return op is not None and any(arg.name == "seqused_k" for arg in op.default._schema.arguments)


_FLASH_PARAMS = frozenset({"scale", "seqused_k"})


def _flash_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_q: torch.Tensor,
    cu_k: torch.Tensor,
    max_q: int,
    max_k: int,
    *,
    scale: float | None = None,
    seqused_k: torch.Tensor | None = None,
) -> torch.Tensor:
    # The flash op behind varlen_attn, for a torch whose varlen_attn has no seqused_k (full window only; fewer key
    # and value heads than query heads are taken as they are).
    return torch.ops.aten._flash_attention_forward(
        q, k, v, cu_q, cu_k, max_q, max_k, 0.0, False, False, scale=scale, seqused_k=seqused_k
    )[0]


NATIVE_GQA = [True]  # emptied once a varlen kernel refuses fewer key/value heads than query heads


BROKEN: list[Exception] = []
DTYPES = (torch.float16, torch.bfloat16)  # the flash kernel behind varlen_attn takes these only


def varlen_ready(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether packed streams on ``device`` in ``dtype`` run on the variable-length flash kernel (none broke)."""
    return device.type == "cuda" and dtype in DTYPES and function() is not None


def kernel_applies(q: torch.Tensor) -> bool:
    # Whether the variable-length flash kernel takes these queries (CUDA, 16-bit floats, a torch that has it).
    return varlen_ready(q.device, q.dtype)


def function() -> tuple[Any, frozenset[str]] | None:
    return None if BROKEN else _varlen_function()


@cache
def _varlen_function() -> tuple[Any, frozenset[str]] | None:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn, frozenset(inspect.signature(varlen_attn).parameters)
