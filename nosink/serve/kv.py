"""The running chats' KV cache: one transformers ``DynamicCache`` over the batch, left-padded.

Row ``i`` of every tensor is one chat. Its tokens fill the rightmost columns; the columns to their left are
padding, zero in ``mask`` (``(B, L)``, 1 on tokens) and never attended to. Columns are aligned on the right,
so the causal and sliding-window masks, which transformers builds from column indices, hold for every row;
each row's positions (``position_ids``) count its own tokens only.

Chats join with :func:`prefill` (their prompts, left-padded, in one forward) and :func:`join` (the
caches padded on the left to the longest one, layer by layer, and stacked); they leave with :func:`keep`
(the rows that stay, then the columns that are padding in every one of them cut away). :func:`step`
advances every row by one token in one forward.

A dynamic cache, not a static or paged one, because joining and leaving are then plain tensor operations
on the cache's own layers, with no fixed size to choose up front and nothing of transformers' to replace.
The price: a dynamic layer copies its tensors on every update (``torch.cat``), and a join or a leave
copies them once more, so each step moves the whole cache once; a static or paged cache would not, at
the cost of a maximum length reserved per row or of a paged attention kernel.

Layers: full attention (``keys``/``values`` of ``(B, heads, L, head_dim)``) and sliding window (only the
last ``min(L, window - 1)`` columns kept, ``cumulative_length`` = ``L``). Any other kind is refused.
"""

import copy
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer


@dataclass
class Batch:
    """The chats being decoded: their shared cache and which of its columns each one's tokens fill."""

    cache: Any  # a DynamicCache whose batch rows are the chats
    mask: torch.Tensor  # (B, L) long: 1 on a chat's tokens, 0 on its left padding

    def __len__(self) -> int:
        return self.mask.shape[0]


def prefill(lm: torch.nn.Module, prompts: list[list[int]]) -> tuple[torch.Tensor, Batch]:
    """Run ``prompts`` left-padded in one forward: the logits of each one's next token ``(n, V)``, and their batch."""
    device = next(lm.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)  # (n, P); the padding id is never attended to
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (n, P): each prompt counts from 0 at its first token
    out = lm(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    _check_layers(out.cache)
    return out.logits[:, -1], Batch(out.cache, mask)  # logits: (n, 1, V)


def step(lm: torch.nn.Module, batch: Batch, tokens: list[int]) -> torch.Tensor:
    """Feed each row its next token (one forward for the batch): the logits of the token after ``(B, V)``.

    On failure the batch is as it was before the call (the cache's layers are restored), so it can be retried.
    """
    device = batch.mask.device
    saved = _snapshot(batch.cache)
    ids = torch.tensor(tokens, dtype=torch.long, device=device)[:, None]  # (B, 1)
    positions = batch.mask.sum(-1, keepdim=True)  # (B, 1): the tokens each row already has
    mask = torch.cat([batch.mask, torch.ones_like(batch.mask[:, :1])], dim=1)  # (B, L + 1)
    try:
        out = lm(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=batch.cache,
            use_cache=True,
            logits_to_keep=1,
        )
    except BaseException:
        _restore(batch.cache, saved)
        raise
    batch.mask = mask
    return out.logits[:, -1]  # (B, V)


def join(batches: list[Batch]) -> Batch:
    """One batch of the rows of ``batches`` in order, padded on the left to the longest (inputs left as they were)."""
    width = max(b.mask.shape[1] for b in batches)
    cache = _copy(batches[0].cache)
    for i, layer in enumerate(cache.layers):
        parts = [b.cache.layers[i] for b in batches]
        if not all(p.is_initialized for p in parts):
            continue
        kept = width
        if isinstance(layer, DynamicSlidingWindowLayer):
            kept = min(width, layer.sliding_window - 1)
            layer.cumulative_length = width
        layer.keys = torch.cat([_pad_left(p.keys, kept) for p in parts], dim=0)
        layer.values = torch.cat([_pad_left(p.values, kept) for p in parts], dim=0)
    return Batch(cache, torch.cat([_pad_left(b.mask, width, dim=1) for b in batches], dim=0))


def keep(batch: Batch, rows: list[int]) -> Batch:
    """The batch of ``rows`` only (in that order), without the columns that are padding in all of them.

    ``batch`` stays as it was: the result's cache is a new one (sharing no tensor that a later step writes).
    """
    index = torch.tensor(rows, dtype=torch.long, device=batch.mask.device)
    mask = batch.mask.index_select(0, index)
    cut = int((mask.sum(0) == 0).long().cumprod(0).sum())  # leading columns with no token in any row
    width = mask.shape[1] - cut
    cache = _copy(batch.cache)
    for layer in cache.layers:
        if not layer.is_initialized:
            continue
        kept = width
        if isinstance(layer, DynamicSlidingWindowLayer):
            kept = min(width, layer.sliding_window - 1)
            layer.cumulative_length = width
        stored = layer.keys.shape[-2]
        kept = min(kept, stored)
        layer.keys = layer.keys.index_select(0, index)[:, :, stored - kept :]
        layer.values = layer.values.index_select(0, index)[:, :, stored - kept :]
    return Batch(cache, mask[:, cut:])


def _copy(cache: Any) -> Any:
    """A cache with its own layer objects: assigning a layer's tensors in the copy leaves the original alone."""
    twin = copy.copy(cache)
    twin.layers = [copy.copy(layer) for layer in cache.layers]
    return twin


def _pad_left(x: torch.Tensor, width: int, dim: int = -2) -> torch.Tensor:
    """``x`` with zeros prepended along ``dim`` up to ``width``."""
    missing = width - x.shape[dim]
    if missing == 0:
        return x
    shape = list(x.shape)
    shape[dim] = missing
    return torch.cat([x.new_zeros(shape), x], dim=dim)


def _check_layers(cache: Any) -> None:
    """Refuse a cache with a kind of layer whose columns :func:`join` and :func:`keep` do not know."""
    for layer in cache.layers:
        if type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer):
            kind = type(layer).__name__
            raise TypeError(f"batched chat decoding supports full and sliding-window attention caches, not {kind}")


def _snapshot(cache: Any) -> list[tuple]:
    """What :func:`_restore` needs to undo a forward (a layer's update replaces its tensors, never writes into them)."""
    return [(layer.keys, layer.values, getattr(layer, "cumulative_length", None)) for layer in cache.layers]


def _restore(cache: Any, saved: list[tuple]) -> None:
    for layer, (keys, values, length) in zip(cache.layers, saved, strict=True):
        layer.keys, layer.values = keys, values
        if length is not None:
            layer.cumulative_length = length
