"""Fine-tuning a converted encoder: LLM2Vec's recipe (MNTP, unsupervised SimCSE) or supervised pairs, with LoRA.

:func:`finetune` trains a LoRA adapter (``peft``) on the encoder a spec makes of a decoder, through the
encoder's own layer loop (the spec's masks hold during training as at inference), and writes a folder that
:meth:`EncoderFromDecoder.from_pretrained` loads: the base model's reference and the adapter. One job per module:
``options`` (the settings), ``data`` (the file and the batch order), ``losses``, ``dropout`` (SimCSE's), ``loop``,
``checkpoint`` (resume), ``api`` (the function). The adapter's own format is :mod:`nosink.models.adapters`.
"""

from .api import FinetuneResult, finetune
from .options import OBJECTIVES, FinetuneOptions

__all__ = ["OBJECTIVES", "FinetuneOptions", "FinetuneResult", "finetune"]
