"""The settings of a fine-tuning run, checked in one place."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from nosink.checks import positive_int, printable
from nosink.models.pooling import POOLINGS

__all__ = ["AUTOCASTS", "OBJECTIVES", "FinetuneOptions"]

# mntp: LLM2Vec's masked next-token prediction with the decoder's own LM head; simcse: unsupervised SimCSE (a text
# and itself under another dropout mask are the positive pair); mnrl: supervised contrastive loss on (anchor,
# positive) pairs with in-batch negatives (sentence-transformers' MultipleNegativesRankingLoss).
OBJECTIVES = ("mntp", "simcse", "mnrl")
# Mixed precision: the forward and backward run their matrix products in this dtype (torch.autocast) while the
# adapter and the optimizer's state stay in the weights' dtype. bfloat16 only: float16 would need loss scaling.
AUTOCASTS = ("bfloat16",)


@dataclass(frozen=True)
class FinetuneOptions:
    """How :func:`nosink.finetune.finetune` trains; every field has a default.

    The budget is ``steps`` optimizer steps or ``minutes`` of training, whichever ends first (at least one is
    needed). Time is checked between steps: a run may pass ``minutes`` by the length of its last step. Several
    objectives are added up at every step (LLM2Vec runs MNTP and SimCSE as two stages instead).
    """

    objectives: tuple[str, ...] = ("simcse",)  # one or more of OBJECTIVES; mnrl reads pairs and goes alone
    steps: int | None = 1000  # optimizer steps in all (a resumed run counts the steps before); None: no limit
    minutes: float | None = None  # minutes of training in all (resumed runs count theirs); None: no limit
    batch_size: int = 32  # texts (or pairs) per step; SimCSE's in-batch negatives are the others
    learning_rate: float = 1e-4  # AdamW, constant after a linear warm-up
    warmup_steps: int = 10
    seed: int = 0  # data order, masks, dropout and the adapter's initial values
    rank: int = 16  # LoRA rank
    alpha: float = 32.0  # LoRA scale numerator (update scaled by alpha / rank)
    lora_dropout: float = 0.05  # dropout on the adapter's input while training
    lora_layers: str = "all"  # "all": every layer the plan runs; "converted": only those whose mask is not causal
    attention_dropout: float = 0.1  # set on the attention layers while training: SimCSE's augmentation
    temperature: float = 0.05  # of the contrastive losses (sentence-transformers' scale 20 = 1 / 0.05)
    mask_probability: float = 0.2  # MNTP: share of text tokens masked (LLM2Vec's 0.2)
    max_length: int = 128  # tokens per input, sink token and instruction included; longer texts are cut
    pooling: str = "mean"  # as encode()'s
    instruction: str | None = None  # put before every text, as encode(instruction=) will at inference
    exit_layer: int | None = None  # an early exit (see EncoderFromDecoder); recorded in the folder
    checkpoint_every: int = 100  # steps between checkpoints (one is always written at the end)
    max_grad_norm: float = 1.0
    autocast: str | None = None  # "bfloat16": mixed precision (about 1.35x faster on a CPU with AMX); None: off
    show_progress_bar: bool = True

    def __post_init__(self) -> None:
        objectives = tuple(self.objectives)
        object.__setattr__(self, "objectives", objectives)
        if not objectives or any(o not in OBJECTIVES for o in objectives) or len(set(objectives)) != len(objectives):
            raise ValueError(
                f"objectives must be one or more of {', '.join(OBJECTIVES)} (each once), "
                f"got {printable(repr(objectives))}"
            )
        if "mnrl" in objectives and len(objectives) > 1:
            raise ValueError("mnrl trains on pairs and goes alone; mntp and simcse train on plain texts")
        if self.steps is None and self.minutes is None:
            raise ValueError("give a budget: steps, minutes or both")
        if self.steps is not None:
            positive_int(self.steps, "steps")
        if self.minutes is not None and not (isinstance(self.minutes, (int, float)) and 0 < self.minutes < math.inf):
            raise ValueError(f"minutes must be a positive number, got {printable(repr(self.minutes))}")
        for name in ("batch_size", "rank", "max_length", "checkpoint_every"):
            positive_int(getattr(self, name), name)
        positive_int(self.warmup_steps, "warmup_steps", minimum=0)
        if "simcse" in objectives or "mnrl" in objectives:
            positive_int(self.batch_size, "batch_size", minimum=2)  # one text has no in-batch negative
        for name in ("learning_rate", "alpha", "temperature", "max_grad_norm"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{name} must be a positive number, got {printable(repr(value))}")
        for name in ("lora_dropout", "attention_dropout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f"{name} must be in [0, 1), got {printable(repr(value))}")
        if not 0 < self.mask_probability < 1:
            raise ValueError(f"mask_probability must be in (0, 1), got {printable(repr(self.mask_probability))}")
        if self.lora_layers not in ("all", "converted"):
            raise ValueError(f"lora_layers must be 'all' or 'converted', got {printable(repr(self.lora_layers))}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {printable(repr(self.pooling))}; expected one of {', '.join(POOLINGS)}")
        if self.exit_layer is not None:
            positive_int(self.exit_layer, "exit_layer")
        if self.autocast is not None and self.autocast not in AUTOCASTS:
            raise ValueError(
                f"autocast must be None or one of {', '.join(AUTOCASTS)}, got {printable(repr(self.autocast))}"
            )

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON values (what a checkpoint and the folder's ``nosink.json`` record)."""
        out = asdict(self)
        out["objectives"] = list(self.objectives)
        return out

    # What must match for a resumed run to continue the same training (the budget and the bar may change).
    def resumable(self) -> dict[str, Any]:
        """The options a checkpoint must share with the run that resumes it."""
        out = self.to_dict()
        for key in ("steps", "minutes", "checkpoint_every", "show_progress_bar"):
            out.pop(key)
        return out
