"""The training loop: batches in their seeded order, the objectives' losses, AdamW on the adapter, checkpoints."""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm

from nosink.models import EncoderFromDecoder

from .checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from .data import TrainingData
from .dropout import attention_dropout
from .losses import mask_token_id, mnrl_loss, mntp_loss, simcse_loss
from .options import FinetuneOptions

__all__ = ["TrainResult", "train"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainResult:
    """What a run did: its steps and seconds in all (resumed runs included) and its loss at each step."""

    steps: int
    seconds: float
    losses: list[float]


def train(
    encoder: EncoderFromDecoder,
    head: nn.Module | None,
    lora: object,
    data: TrainingData,
    options: FinetuneOptions,
    out: Path,
    *,
    resume: bool = False,
) -> TrainResult:
    """Train the adapter of ``encoder`` (already added) on ``data`` until the budget ends; checkpoint into ``out``.

    Args:
        encoder: the encoder whose decoder holds the adapter (:func:`nosink.models.adapters.add_lora`).
        head: the decoder's LM head (MNTP), or ``None`` without MNTP.
        lora: the adapter's ``peft.LoraConfig`` (saved with each checkpoint).
        data: texts, or pairs for ``mnrl``.
        options: the run's settings.
        out: the output folder; checkpoints go to ``out/checkpoint``.
        resume: continue from ``out/checkpoint`` (its step, optimizer, RNG and time spent).

    Raises:
        ValueError: if the checkpoint was written with other options or data.
        FileNotFoundError: with ``resume`` and no checkpoint.
        FloatingPointError: when a step's loss, or the adapter's weights after it, are not finite (nothing of that
            step is written).
    """
    params = [p for p in encoder.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=options.learning_rate, weight_decay=0.0)
    warmup = options.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / (warmup + 1)))
    name = encoder.name_or_path  # the base: a folder by its absolute path, a hub id as it is
    run = {"spec": str(encoder.spec), "model": os.path.abspath(name) if os.path.isdir(name) else name}
    state = Checkpoint(0, 0.0, [], options.resumable(), data.digest, run)
    if resume:

        def check(saved: Checkpoint) -> None:
            if saved.run != run:
                raise ValueError(
                    f"the checkpoint in {out} was written by a run of {saved.run or 'an earlier nosink (unrecorded)'}; "
                    f"this one is of {run}: resume with the same model and spec, or train into a new folder"
                )
            if saved.options != options.resumable() or saved.data != data.digest:
                raise ValueError(
                    f"the checkpoint in {out} was written with other options or data; resume with the same ones "
                    f"(it has {saved.options})"
                )

        state = read_checkpoint(out, encoder.decoder, optimizer, scheduler, check)
        state.options = options.resumable()
    else:
        torch.manual_seed(options.seed)
    mask_id = mask_token_id(encoder.tokenizer) if "mntp" in options.objectives else 0
    embedding = {"instruction": options.instruction, "pooling": options.pooling, "max_length": options.max_length}
    steps = math.inf if options.steps is None else options.steps
    seconds = math.inf if options.minutes is None else options.minutes * 60
    mixed = _autocast(encoder, options.autocast)
    was_training = encoder.training
    encoder.train()
    total = None if options.steps is None else options.steps
    bar = tqdm(total=total, initial=state.step, desc="finetune", unit="step", disable=not options.show_progress_bar)
    try:
        with attention_dropout(encoder.decoder, options.attention_dropout), bar:
            while state.step < steps and state.seconds < seconds:
                start = time.perf_counter()
                items = data.batch(state.step, options.batch_size, options.seed)
                loss = torch.zeros(())
                with mixed:
                    for objective in options.objectives:
                        if objective == "simcse":
                            loss = loss + simcse_loss(encoder, items, options.temperature, **embedding)
                        elif objective == "mnrl":
                            loss = loss + mnrl_loss(encoder, items, options.temperature, **embedding)
                        else:
                            assert head is not None  # finetune() loads the LM head for mntp
                            loss = loss + mntp_loss(
                                encoder, head, items, mask_id=mask_id, probability=options.mask_probability,
                                instruction=options.instruction, max_length=options.max_length,
                            )  # fmt: skip
                if not torch.isfinite(loss):
                    raise _diverged(out, state, f"its loss is {loss.item()}", options)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, options.max_grad_norm)
                optimizer.step()
                scheduler.step()
                if not all(bool(torch.isfinite(p).all()) for p in params):  # the adapter only: a few small tensors
                    raise _diverged(out, state, "it made the adapter's weights non-finite", options)
                state.step += 1
                state.seconds += time.perf_counter() - start
                state.losses.append(loss.item())
                bar.update(1)
                bar.set_postfix(loss=f"{state.losses[-1]:.4f}")
                if state.step % options.checkpoint_every == 0:
                    write_checkpoint(out, encoder.decoder, lora, optimizer, scheduler, state)
            write_checkpoint(out, encoder.decoder, lora, optimizer, scheduler, state)
    finally:
        encoder.train(was_training)
    logger.info("trained %d steps in %.0f s", state.step, state.seconds)
    return TrainResult(state.step, state.seconds, list(state.losses))


def _diverged(out: Path, state: Checkpoint, what: str, options: FinetuneOptions) -> FloatingPointError:
    """The error of a step that diverged; nothing of it is written (the checkpoint in ``out`` is the last good one)."""
    written = state.step - state.step % options.checkpoint_every  # the last checkpoint's step (every N steps)
    kept = f"the checkpoint in {out} holds step {written}" if written else "no checkpoint was written"
    return FloatingPointError(
        f"training diverged at step {state.step + 1}: {what}; {kept}. Train again with a smaller --lr "
        f"(this run's: {options.learning_rate:g})"
    )


def _autocast(encoder: EncoderFromDecoder, dtype: str | None) -> torch.autocast:
    """The mixed-precision context of the forward passes (a disabled one without ``dtype``), on the encoder's device."""
    device = encoder.parts.embed_tokens.weight.device.type
    if dtype is None:
        return torch.autocast(device, enabled=False)
    return torch.autocast(device, dtype=getattr(torch, dtype))
