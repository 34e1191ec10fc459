"""A training checkpoint: the adapter, the optimizer and scheduler, the step, the time spent and torch's RNG state.

Written to ``OUT/checkpoint/`` whole or not at all (a sibling folder renamed in), so a run killed while it
writes keeps the previous checkpoint. Resuming from it continues the same run: the next batch, mask and dropout
are the ones the uninterrupted run would have drawn.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nosink.checks import printable
from nosink.models.adapters import save_adapter

__all__ = ["CHECKPOINT", "Checkpoint", "read_checkpoint", "write_checkpoint"]

CHECKPOINT = "checkpoint"  # the folder inside the output folder
_STATE = "training.pt"
_META = "training.json"


@dataclass
class Checkpoint:
    """Where a run stood: its step, seconds spent, losses so far and the options it ran with."""

    step: int
    seconds: float
    losses: list[float]
    options: dict[str, Any]
    data: str  # the training file's sha256
    run: dict[str, Any]  # what else the run trained: the spec and the base model (see loop.train)


def write_checkpoint(
    out: Path, decoder: nn.Module, lora: Any, optimizer: Any, scheduler: Any, state: Checkpoint
) -> None:
    """Write the checkpoint of ``out`` (replacing the previous one)."""
    target = out / CHECKPOINT
    partial = out / f".{CHECKPOINT}.tmp"
    shutil.rmtree(partial, ignore_errors=True)
    save_adapter(decoder, lora, partial)
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
        },
        partial / _STATE,
    )
    meta = {"step": state.step, "seconds": state.seconds, "losses": state.losses, "options": state.options,
            "data": state.data, "run": state.run}  # fmt: skip
    (partial / _META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    old = out / f".{CHECKPOINT}.old"
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    partial.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def read_checkpoint(
    out: Path, decoder: nn.Module, optimizer: Any, scheduler: Any, check: Callable[[Checkpoint], None]
) -> Checkpoint:
    """Load the checkpoint of ``out`` into the adapter of ``decoder``, the optimizer, the scheduler and the RNGs,
    once ``check`` has accepted what it says of its run (it raises to refuse it: nothing is loaded then).

    Raises:
        FileNotFoundError: if ``out`` holds no checkpoint.
        OSError: if it does not read.
    """
    import peft
    from safetensors.torch import load_file

    folder = out / CHECKPOINT
    if not (folder / _META).is_file():
        raise FileNotFoundError(f"{printable(str(out))} holds no checkpoint to resume from ({CHECKPOINT}/{_META})")
    try:
        meta = json.loads((folder / _META).read_text(encoding="utf-8"))
        blob = torch.load(folder / _STATE, weights_only=True)  # tensors and plain values only: no code runs
        adapter = load_file(str(folder / "adapter_model.safetensors"))
    except (OSError, ValueError, RuntimeError, KeyError) as err:
        raise OSError(f"the checkpoint in {printable(str(folder))} does not read: {printable(str(err))}") from None
    run = meta.get("run", {})  # {} in a checkpoint of an earlier nosink: no run resumes it
    state = Checkpoint(meta["step"], meta["seconds"], meta["losses"], meta["options"], meta["data"], run)
    check(state)  # before any tensor is loaded: another run's optimizer state would fail inside torch
    peft.set_peft_model_state_dict(decoder, adapter)
    optimizer.load_state_dict(blob["optimizer"])
    scheduler.load_state_dict(blob["scheduler"])
    torch.set_rng_state(blob["torch_rng"])
    return state
