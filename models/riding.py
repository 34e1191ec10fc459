"""Decode tokens riding an encoder's forward: chats advance a token in the same pass as an embedding batch.

A server that chats and embeds with one model would otherwise take turns: a chat step (a token of every running
chat) and an embedding batch each run the whole model, and on a GPU a small model's pass costs about the same
for 8 tokens as for 500, so each side gets half the model at best. A :class:`Rider` puts the chats' next tokens
at the end of the embedding batch's packed stream, one token a chat: the projections, RoPE (at each chat's own
position), the norms and the MLP run them in the very kernels that run the batch, and only attention differs.
At every layer the stream's tokens attend among their rows as the layer's kind says (:mod:`.attention`), while
each riding token writes its key and value into its chat's row of that layer's KV cache (at ``column``) and
attends over the row's tokens so far, causally, as a decode step does. The final norm's output of the riding
tokens goes through the LM head (:attr:`Rider.head`): the logits of each chat's next token.

This holds only where the encoder's pass walks every layer once, in order, on one stream (:func:`rides`): a chat
token must see each layer exactly as the LM's own forward does. Early exits, repeated or extra layers, Token
Prepending and sliding windows (a chat's window cuts its own cache, which the rider does not model) take turns
as before.

Pure torch: the rider's buffers and its head come from the caller (``nosink.serve.kv.Rows``), which owns the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from nosink.layerspec import MAIN, LayerStep, Plan

__all__ = ["Rider", "rides"]


@dataclass(eq=False)
class Rider:
    """``R`` decode tokens at the end of a packed stream, token ``i`` the next one of row ``i`` of a KV cache.

    Rows past the chats (filler, so that one CUDA graph serves every count of chats) have ``real`` False: they
    attend only themselves, and whatever they write lands in a column no mask shows.

    Args:
        ids: ``(R,)`` long, each row's next token.
        real: ``(R,)`` bool, which rows are chats.
        keys: per layer, ``(rows >= R, heads_kv, W, head_dim)``: the cache's keys, row ``i`` chat ``i``'s.
        values: per layer, the same for values.
        mask: ``(rows >= R, W)`` bool: True on each row's tokens so far.
        column: ``(1,)`` long: where the new tokens' keys and values go (every row's tokens end left of it).
        head: the LM head, ``(R, D)`` final-normed states to ``(R, V)`` logits.
        key: what the buffers are (a CUDA graph captured with this rider is replayed only for a rider of the same
            key: the same tensors, the same ``R``).
    """

    ids: torch.Tensor
    real: torch.Tensor
    keys: Sequence[torch.Tensor]
    values: Sequence[torch.Tensor]
    mask: torch.Tensor
    column: torch.Tensor
    head: Callable[[torch.Tensor], torch.Tensor]
    key: Hashable
    logits: torch.Tensor | None = None  # (R, V), set by the pass that carried the rider
    _live: torch.Tensor | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return self.ids.shape[0]

    def positions(self) -> torch.Tensor:
        """``(R,)``: each token's position, its row's count of tokens so far (0 for filler rows)."""
        count = self.mask[: len(self)].sum(-1)
        return (count + self.real.long() - 1).clamp(min=0)

    def attend(
        self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float | None
    ) -> torch.Tensor:
        """Layer ``layer``'s attention of the riding tokens: ``query (R, H, D)`` after RoPE, ``key``/``value``
        ``(R, Hkv, D)`` written into the cache at ``column``, then each query over its row's tokens and itself.

        Returns:
            ``(R, H, Dv)``.
        """
        n = len(self)
        keys, values = self.keys[layer][:n], self.values[layer][:n]
        keys.index_copy_(2, self.column, key[:, :, None].to(keys.dtype))
        values.index_copy_(2, self.column, value[:, :, None].to(values.dtype))
        if self._live is None:  # the same for every layer: worked out once a pass, additive (SDPA takes it as it is)
            columns = torch.arange(self.mask.shape[1], device=self.mask.device)
            own = (columns == self.column)[None, :]  # (1, W): every query sees itself, so no row is all -inf
            live = (self.mask[:n] & self.real[:, None]) | own
            hidden = torch.zeros(live.shape, dtype=keys.dtype, device=live.device).masked_fill(~live, -torch.inf)
            self._live = hidden[:, None, None, :]  # (R, 1, 1, W)
        out = F.scaled_dot_product_attention(
            query[:, :, None].to(keys.dtype), keys, values, attn_mask=self._live, scale=scale,
            enable_gqa=query.shape[1] != keys.shape[1],
        )  # fmt: skip
        return out[:, :, 0]

    def reset(self) -> None:
        """Forget what one pass worked out (a CUDA graph's capture runs the pass twice)."""
        self._live = None


def rides(plans: Sequence[Plan], depth: int) -> bool:
    """Whether a batch under ``plans`` can carry a :class:`Rider`: one plan whose steps are layers ``0 .. depth-1``,
    each once and in order, on the main stream, with no sliding window and no Token Prepending."""
    if len(plans) != 1:
        return False
    plan = plans[0]
    if plan.prepend is not None or len(plan.steps) != depth:
        return False
    return all(
        isinstance(step, LayerStep) and step.layer == i and step.stream == MAIN and step.window is None
        for i, step in enumerate(plan.steps)
    )
