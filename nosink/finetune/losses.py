"""The training objectives, each a loss over one batch run through the encoder's own layer loop.

Every loss tokenizes as :meth:`EncoderFromDecoder.encode` does (sink token, instruction, text; the same
truncation), pads with the same function, runs :meth:`EncoderFromDecoder.forward` (so every layer has the mask
its spec gives it, as at inference) and pools the text tokens as ``encode()`` does. In training mode the forward
takes the dense-mask route (the fast kernels run only in eval mode), which keeps autograd.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from nosink.models import EncoderFromDecoder
from nosink.models import batching as _batching
from nosink.models import texts as _texts
from nosink.models.pooling import pool

__all__ = ["embed", "info_nce", "mask_token_id", "mnrl_loss", "mntp_loss", "simcse_loss"]


def _inputs(encoder: EncoderFromDecoder, texts: Sequence[str], instruction: str | None, max_length: int) -> Any:
    # (ids, attention mask, text mask), (B, T) each, on the encoder's device: encode()'s tokens and padding.
    tokenizer = encoder.tokenizer
    tokens = _texts.tokenize(tokenizer, list(texts), instruction, sink=encoder.sink_ids(), max_length=max_length)
    padded = _batching.pad(tokens, range(len(texts)), _batching.pad_id(encoder.tokenizer))
    device = encoder.parts.embed_tokens.weight.device
    return tuple(t.to(device) for t in padded)


def embed(
    encoder: EncoderFromDecoder,
    texts: Sequence[str],
    *,
    instruction: str | None = None,
    pooling: str = "mean",
    max_length: int = 512,
) -> torch.Tensor:
    """``(B, D)`` pooled vectors of ``texts``, with autograd: what ``encode()`` gives, in the encoder's mode.

    In eval mode and float32 they equal ``encoder.encode(texts, instruction, pooling=...)`` (to rounding);
    in training mode dropout applies.
    """
    ids, attention, text = _inputs(encoder, texts, instruction, max_length)
    hidden = encoder(ids, attention).last_hidden_state  # (B, T, D)
    return pool(hidden, text, pooling)  # type: ignore[arg-type]


def info_nce(anchors: torch.Tensor, positives: torch.Tensor, temperature: float) -> torch.Tensor:
    """Cross-entropy of each anchor's cosine similarities, positive ``i`` the right answer for anchor ``i``.

    The other rows' positives are the negatives (in-batch negatives): SimCSE's loss, and sentence-transformers'
    ``MultipleNegativesRankingLoss`` with ``scale = 1 / temperature``.
    """
    scores = F.normalize(anchors.float(), dim=-1) @ F.normalize(positives.float(), dim=-1).T  # (B, B)
    return F.cross_entropy(scores / temperature, torch.arange(len(anchors), device=scores.device))


def simcse_loss(
    encoder: EncoderFromDecoder, texts: Sequence[str], temperature: float, **embedding: Any
) -> torch.Tensor:
    """Unsupervised SimCSE: each text against itself under another dropout mask, the other texts as negatives.

    Dropout is the only augmentation: run it in training mode with some dropout on (see
    :func:`nosink.finetune.dropout.attention_dropout`), else both views are the same.
    """
    return info_nce(embed(encoder, texts, **embedding), embed(encoder, texts, **embedding), temperature)


def mnrl_loss(
    encoder: EncoderFromDecoder, pairs: Sequence[tuple[str, str]], temperature: float, **embedding: Any
) -> torch.Tensor:
    """Supervised contrastive loss on ``(anchor, positive)`` pairs, with the batch's other positives as negatives."""
    anchors = embed(encoder, [a for a, _ in pairs], **embedding)
    positives = embed(encoder, [p for _, p in pairs], **embedding)
    return info_nce(anchors, positives, temperature)


def mask_token_id(tokenizer: Any) -> int:
    """The id MNTP puts in place of a masked token: the tokenizer's mask token, else ``_`` (LLM2Vec's choice for
    decoders without one) when it is one token, else the unknown or the padding token.

    Raises:
        ValueError: if the tokenizer has none of these.
    """
    if tokenizer.mask_token_id is not None:
        return int(tokenizer.mask_token_id)
    blank = tokenizer.convert_tokens_to_ids("_")
    if isinstance(blank, int) and blank != tokenizer.unk_token_id and blank >= 0:
        return blank
    for candidate in (tokenizer.unk_token_id, tokenizer.pad_token_id):
        if candidate is not None:
            return int(candidate)
    raise ValueError("the tokenizer has no mask, '_', unknown or padding token for MNTP to mask with")


def mntp_loss(
    encoder: EncoderFromDecoder,
    head: nn.Module,
    texts: Sequence[str],
    *,
    mask_id: int,
    probability: float,
    instruction: str | None = None,
    max_length: int = 512,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """LLM2Vec's masked next-token prediction: mask text tokens, predict each from the state of the token before it.

    A share ``probability`` of the text tokens (never the sink token or the instruction) is replaced by
    ``mask_id`` (at least one per batch); the final-normed state at the position before each masked token goes
    through the decoder's own LM head ``head``, and the loss is the cross-entropy with the original token.
    (LLM2Vec's collator also leaves 10% of the chosen tokens as they are and swaps 10% for random ones; here
    all are masked.)
    """
    ids, attention, text = _inputs(encoder, texts, instruction, max_length)
    chosen = text & (torch.rand(ids.shape, generator=generator).to(ids.device) < probability)  # (B, T)
    if not chosen.any():
        first = text.flatten().nonzero()[0]  # a batch with text always has a token to mask
        chosen.view(-1)[first] = True
    masked = torch.where(chosen, torch.as_tensor(mask_id, device=ids.device), ids)
    hidden = encoder(masked, attention).last_hidden_state  # (B, T, D)
    rows, cols = chosen.nonzero(as_tuple=True)  # cols >= 1: a text token always follows the sink token
    logits = head(hidden[rows, cols - 1])  # (N, V)
    return F.cross_entropy(logits.float(), ids[rows, cols])
