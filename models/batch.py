"""One batch as the layer loop runs it: token ids on the device, positions, where the real tokens lie, masks.

:func:`prepare` checks a padded batch of token ids and brings it to the device with what every layer step of
it needs: each token's position (counted from its row's first real token), the fast path's :class:`Layout` of
the real tokens or, when the batch runs packed, its :class:`Packed` stream. The layer loop then asks
:func:`route_of` for each step's fast route, or :func:`dense_mask` for its mask, built once per batch, kind
and window. The encoder (``models/encoder.py``) decides the policy (fast path, packing, CUDA graphs); this
module only carries it out.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from nosink.layerspec import Kind, LayerStep, Plan, additive_mask, build_mask
from nosink.layerspec.masks import relative_positions

from .attention import Layout, Packed, Route, fast_route

if TYPE_CHECKING:
    from .families import DecoderParts
    from .riding import Rider

__all__ = [
    "PACK_MIN_PADDING",
    "PLACEHOLDER_POSITION",
    "Batch",
    "HostBatch",
    "board",
    "dense_mask",
    "packs",
    "prepare",
    "prepended",
    "prepends",
    "route_of",
]

# Token Prepending's placeholder is each row's token at this position: the one right after the sink token.
PLACEHOLDER_POSITION = 1
# The default pack_padding=None packs a batch on the fast path when at least this share of its tokens is padding.
PACK_MIN_PADDING = 0.05


@dataclass
class HostBatch:
    """What the host knows of a padded batch it built (encode's batches): the device never has to say it."""

    lengths: list[int]  # each row's real tokens
    front: bool  # every row's real tokens come first (right padding, or none)


@dataclass
class Batch:
    """One prepared batch: embeddings, positions, and the masks built for it so far."""

    hidden: torch.Tensor | None  # (B, T, D) embeddings; (1, N, D) when packed; None until embedded
    attention_mask: torch.Tensor | None  # (B, T); None for a graph's stream (it has no padded layout)
    position_ids: torch.Tensor  # (B, T), from each row's first real token; (1, N) when packed
    context: Any  # rotary cos/sin, per family
    eager: bool  # masks in eager attention's additive form (else boolean, for SDPA)
    masks: dict[tuple[Kind, int | None], torch.Tensor]  # by (kind, sliding window)
    layout: Layout | Packed | None = None  # where the real tokens lie; set only when the batch takes the fast path
    packed: Packed | None = None  # set when the layers run on the real tokens only (the layout then)
    input_ids: torch.Tensor | None = None  # (B, T), or (1, N) when packed: what the embedding reads
    prepend: bool = False  # Token Prepending: each row's second token is a placeholder (it enters as zeros)
    rows: tuple[torch.Tensor, torch.Tensor] | None = None  # (placeholder, last token) per row, once worked out
    rider: Rider | None = None  # decode tokens riding after the packed stream (see board)

    def unpack(self, hidden: torch.Tensor) -> torch.Tensor:
        """A stream back in the batch's ``(B, T, D)`` layout (zeros at padding when the batch ran packed)."""
        return hidden if self.packed is None else self.packed.unpack(hidden)


def prepare(
    parts: DecoderParts,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    eager: bool,
    fast: bool,
    packs: Callable[[Layout], bool],
    host: HostBatch | None = None,
) -> Batch:
    """Check a padded batch and bring it to the model's device, laid out for the layer loop (not yet embedded).

    Args:
        parts: the decoder's parts (its embedding's device and vocabulary, its position limits).
        input_ids: ``(B, T)`` token ids, padded on either side.
        attention_mask: ``(B, T)``, 1 for real tokens; all ones if ``None``.
        eager: masks in eager attention's additive form.
        fast: the batch takes the fast path (a :class:`Layout` of its real tokens is worked out).
        packs: whether a fast batch of this layout runs packed.
        host: the batch comes from ``encode()`` (host tensors, pinned on CUDA): they are copied without waiting,
            and what the layout needs is read from ``host``, so preparing the batch never waits for the device.

    Raises:
        ValueError: for shapes or masks that do not fit, an empty batch (no rows or no tokens), ids outside the
            vocabulary, or more tokens than a learned-position model (GPT-2) has positions.
    """
    if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2:
        shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(f"input_ids must be a (batch, seq) tensor, got {shape}")
    if input_ids.shape[0] == 0:
        raise ValueError("input_ids has no rows (batch size 0): there is nothing to encode")
    if input_ids.shape[1] == 0:
        raise ValueError("input_ids has no tokens (sequence length 0)")
    if input_ids.is_floating_point() or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    vocab = parts.embed_tokens.num_embeddings
    if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab):
        raise ValueError(
            f"input_ids hold ids from {int(input_ids.min())} to {int(input_ids.max())} but the model's "
            f"vocabulary has ids 0 to {vocab - 1}: is the tokenizer the model's own?"
        )
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask {tuple(attention_mask.shape)} does not match input_ids {tuple(input_ids.shape)}"
        )
    device = parts.embed_tokens.weight.device
    if host is None:
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    else:  # a boolean mask: relative_positions then has no values to check (a check would wait for the device)
        input_ids = input_ids.to(device, non_blocking=True)
        attention_mask = attention_mask.to(device, non_blocking=True).bool()
    position_ids = relative_positions(attention_mask).clamp(min=0)  # (B, T), counted from each row's first token
    limit = parts.max_positions
    if limit is not None and input_ids.shape[1] > limit:
        raise ValueError(f"{input_ids.shape[1]} tokens exceed this model's {limit} learned positions; truncate")
    trained = parts.trained_positions
    if trained is not None and input_ids.shape[1] > trained and _last_position(position_ids, host) >= trained:
        # One message per model (no token count in it), so Python's warning filter shows it once.
        warnings.warn(
            f"inputs run past this model's max_position_embeddings ({trained}): its rotary positions "
            "were not trained that far, so results may degrade; truncate (encode's max_length)",
            UserWarning,
            stacklevel=4,
        )
    layout = None
    if fast:
        layout = Layout(attention_mask) if host is None else Layout(attention_mask, host.lengths, host.front)
    packed = None
    if layout is not None and packs(layout):
        packed = Packed(attention_mask, layout.lengths_host)
    elif layout is not None:
        layout.front  # worked out here, so the layer loop never waits for the device  # noqa: B018
    if packed is not None:
        input_ids, position_ids = packed.pack(input_ids), packed.pack(position_ids)  # (1, N)
    return Batch(None, attention_mask, position_ids, None, eager, {}, packed or layout, packed, input_ids)


def _last_position(position_ids: torch.Tensor, host: HostBatch | None) -> int:
    # The largest position in the batch: the longest row's last token (read on the host when it knows).
    return int(position_ids.max()) if host is None else max(host.lengths, default=1) - 1


def packs(layout: Layout, plans: Sequence[Plan], pack_padding: bool | None, graphs: bool = False) -> bool:
    """Whether a fast batch of ``layout`` runs packed under ``plans`` (see ``pack_padding`` of the encoder).

    Packing drops the padding before the first layer; it needs every layer step on a fast route, so a sliding
    window shorter than the longest row (which needs the dense mask) keeps the padded layout. Where CUDA graphs
    apply (``graphs``) every batch packs, padded or not: a graph replays packed streams only.
    """
    if pack_padding is False or not (layout.padded or graphs) or not plans:
        return False
    for plan in plans:
        for step in plan.layer_steps:
            if step.window is not None and step.window < layout.max_length:
                return False
    if pack_padding is True or graphs:
        return True
    # Below this share the saving is a few percent at most, against a gather, a scatter and the index
    # bookkeeping per batch (a judgement: not yet measured).
    return layout.total <= (1 - PACK_MIN_PADDING) * layout.real.numel()


def prepends(plans: Sequence[Plan]) -> bool:
    """Whether a batch under ``plans`` holds Token Prepending's placeholder (all of them must agree).

    Raises:
        ValueError: if some plans prepend and others do not: the placeholder is a token of the input, so they
            cannot share a batch.
    """
    flags = {plan.prepend is not None for plan in plans}
    if len(flags) > 1:
        names = ", ".join(repr(plan.name) for plan in plans)
        raise ValueError(
            f"plans that prepend a placeholder and plans that do not cannot share a batch ({names}): the "
            "placeholder is a token of the input; run them in separate calls (an encoder with prepend= for one, "
            "without for the other: EncoderFromDecoder.from_model shares the weights)"
        )
    return flags == {True}


def prepended(hidden: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Token Prepending's step: each row's placeholder (its second token) takes the state of the row's last token.

    A new tensor (the loop's streams are shared by forks, never written in place). The places are worked out on
    the device once per batch, from the packed stream's row bounds or the padded batch's positions, so a
    CUDA graph captures them with the rest; a row of one token is left as it is.
    """
    if batch.rows is None:
        batch.rows = _placeholder_and_last(batch)
    slot, last = batch.rows
    flat = hidden.reshape(-1, hidden.shape[-1])
    return flat.index_copy(0, slot, flat.index_select(0, last)).view_as(hidden)


def _placeholder_and_last(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    # Flat indices into the stream's (rows * T) or (N) tokens. Rows of one token (or none: a graph's filler
    # rows) map both to one place, so the copy leaves them as they are.
    if batch.packed is not None:
        cu = batch.packed.cu.long()
        last = (cu[1:] - 1).clamp(min=0)
        return torch.minimum(cu[:-1] + PLACEHOLDER_POSITION, last), last
    positions = batch.position_ids  # (B, T): padding at 0, each row's largest position at its last real token
    starts = torch.arange(positions.shape[0], device=positions.device) * positions.shape[1]
    last = starts + positions.argmax(-1)
    slot = starts + (positions == PLACEHOLDER_POSITION).int().argmax(-1)  # 0 where the row has no second token
    return torch.where(positions.amax(-1) >= PLACEHOLDER_POSITION, slot, last), last


def dense_mask(step: LayerStep, batch: Batch) -> torch.Tensor:
    """The dense mask of a layer step, built once per batch, kind and window, on first use."""
    if batch.packed is not None or batch.attention_mask is None:
        raise RuntimeError(f"layer {step.layer} needs a dense mask, which a packed batch has none of")
    key = (step.kind, step.window)
    if key not in batch.masks:
        mask = build_mask(step.kind, batch.attention_mask, sliding_window=step.window)  # (B, 1, T, T) bool
        dtype = batch.hidden.dtype if batch.hidden is not None else torch.float32
        batch.masks[key] = additive_mask(mask, dtype) if batch.eager else mask
    return batch.masks[key]


def route_of(step: LayerStep, batch: Batch) -> Route | None:
    """The fast route of a layer step where it is exact; ``None`` sends the layer to the dense mask."""
    route = None if batch.layout is None else fast_route(step.kind, step.window, batch.layout)
    if route is not None and batch.rider is not None:
        route.tail = (batch.rider, step.layer)
    return route


def board(batch: Batch, rider: Rider) -> None:
    """Put ``rider``'s tokens at the end of a packed batch not yet embedded: its ids, its positions (each chat's
    own), and the rider itself for the layers' routes (see :mod:`nosink.models.riding`)."""
    if batch.packed is None or batch.hidden is not None or batch.input_ids is None:
        raise ValueError("decode tokens ride only a packed batch, before its embedding")
    rider.reset()
    batch.input_ids = torch.cat([batch.input_ids, rider.ids[None].to(batch.input_ids.dtype)], dim=1)
    batch.position_ids = torch.cat([batch.position_ids, rider.positions()[None].to(batch.position_ids.dtype)], dim=1)
    batch.rider = rider
