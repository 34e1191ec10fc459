"""``finetune()``: a decoder and a spec in, a fine-tuned encoder's folder out (the base's reference and an adapter)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nosink.checks import printable
from nosink.layerspec import Spec, as_spec
from nosink.models import EncoderFromDecoder
from nosink.models.adapters import add_lora, save_adapter
from nosink.models.families import family_of, make_serializable
from nosink.models.loading import load_config, load_model, load_tokenizer, local_folder
from nosink.models.saved import ADAPTED_FORMAT, SAVED_FILE, check_sink_token
from nosink.models.weights import resolve_model

from .data import read_data
from .loop import train
from .options import FinetuneOptions

__all__ = ["ADAPTER", "BASE_COPY", "FinetuneResult", "finetune"]

logger = logging.getLogger(__name__)

ADAPTER = "adapter"  # the adapter's folder inside the output folder
BASE_COPY = "base"  # where copy_base=True puts the base model inside the output folder


@dataclass(frozen=True)
class FinetuneResult:
    """What :func:`finetune` wrote and did."""

    folder: Path  # load it with EncoderFromDecoder.from_pretrained(folder)
    steps: int  # optimizer steps in all (a resumed run counts those before)
    seconds: float  # training seconds in all
    losses: list[float]  # the loss at each step


def finetune(
    model: str | os.PathLike[str],
    spec: str | Spec,
    data: str | os.PathLike[str],
    out: str | os.PathLike[str],
    options: FinetuneOptions | None = None,
    *,
    resume: bool = False,
    copy_base: bool = False,
    sink_token: str = "auto",
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
) -> FinetuneResult:
    """Train a LoRA adapter on the encoder ``spec`` makes of ``model``, through the encoder's own layer loop.

    The layers run with the masks of ``spec`` during training exactly as at inference. The adapter wraps every
    linear layer of the decoder layers the spec runs (all of them, or those below ``options.exit_layer``; with
    ``options.lora_layers="converted"`` only those the spec converts, so that the backward pass stops at the lowest
    of them); the base weights are frozen and never copied. The folder written holds ``nosink.json`` (format 2:
    the spec, the base model's reference, the options) and ``adapter/``; :meth:`EncoderFromDecoder.from_pretrained`
    loads it, and ``nosink serve`` serves chat from the base weights and embeddings through the adapter.

    Args:
        model: the base decoder: a hub id, a local transformers folder, or a short name (``"demo"``).
        spec: the layer spec, e.g. ``"F* | M0B*4"``.
        data: a UTF-8 file of texts, one per line (``mntp``, ``simcse``), or with ``mnrl`` of pairs
            (anchor, tab, positive).
        out: the output folder: new, empty, or (with ``resume``) one a run wrote before.
        options: how to train (:class:`FinetuneOptions`; its defaults otherwise).
        resume: continue the run whose checkpoint is in ``out`` (same options and data; a larger budget trains on).
        copy_base: also save the base model (weights, config, tokenizer) into ``out/base`` and refer to that, so
            the folder is self-contained; else the folder refers to ``model`` (a local folder by its absolute path).
        sink_token: as for :class:`EncoderFromDecoder`.
        dtype: the weights' dtype (the checkpoint's by default); float32 trains best on a CPU.
        device: where to train.

    Raises:
        FileNotFoundError: if ``data`` is missing, or ``resume`` finds no checkpoint.
        FileExistsError: if ``out`` is a file, or a non-empty folder and ``resume`` is not given.
        ValueError: for bad options, an empty data file, a contrastive objective with batches of one item, a
            malformed pairs file, a checkpoint of other options or data, or ``model`` being a saved encoder (give
            its decoder).
        SpecError: if the spec is malformed or does not fit the model (before any weights load).
        OSError: as :meth:`EncoderFromDecoder.from_pretrained` for the model.
        ImportError: without peft (``pip install "nosink[finetune]"``).
        FloatingPointError: if training diverges (a loss or an adapter weight not finite); no folder is written.
    """
    options = options or FinetuneOptions()
    check_sink_token(sink_token)
    spec = as_spec(spec)
    training = read_data(data, pairs="mnrl" in options.objectives)
    contrastive = [o for o in options.objectives if o in ("simcse", "mnrl")]
    if contrastive and min(options.batch_size, len(training)) < 2:  # a batch of one has no negative: loss 0
        raise ValueError(
            f"{contrastive[0]} learns from the other items of a batch as negatives, and a batch here would hold one "
            f"({len(training)} item(s) in {printable(training.source)}, batch size {options.batch_size}): give at "
            "least 2 items and a batch size of at least 2"
        )
    out = Path(os.path.abspath(os.path.expanduser(os.fspath(out))))
    _check_out(out, resume)
    source = resolve_model(model)
    folder = local_folder(source)
    if folder is not None and (folder / SAVED_FILE).is_file():
        raise ValueError(f"{printable(str(folder))} is a saved nosink encoder: give the decoder it was made from")
    config = load_config(source)
    family_of(config)
    plan = spec.resolve(config.num_hidden_layers, exit_layer=options.exit_layer)
    mntp = "mntp" in options.objectives
    decoder = load_model(source, dtype=dtype, attn_implementation="sdpa", saved=False, head=mntp)
    tokenizer = load_tokenizer(source)
    if tokenizer is None:
        raise OSError(f"{printable(str(source))} has no tokenizer: fine-tuning needs one")
    out.mkdir(parents=True, exist_ok=True)
    base = str(folder.resolve()) if folder is not None else str(source)
    if copy_base:
        make_serializable(decoder)
        decoder.save_pretrained(out / BASE_COPY, safe_serialization=True)
        tokenizer.save_pretrained(out / BASE_COPY)
        base = BASE_COPY
    if device is not None:
        decoder = decoder.to(device)
    encoder = EncoderFromDecoder.from_model(
        decoder, spec, tokenizer, sink_token=sink_token, exit_layer=options.exit_layer
    )
    torch.manual_seed(options.seed)  # the adapter's initial values
    layers = sorted({step.layer for step in plan.layer_steps if options.lora_layers == "all" or _converted(step)})
    if not layers:
        raise ValueError(f"{spec} converts no layer: use lora_layers='all' (--lora-layers all)")
    lora = add_lora(encoder.decoder, layers, rank=options.rank, alpha=options.alpha, dropout=options.lora_dropout)
    head = decoder.get_output_embeddings() if mntp else None
    result = train(encoder, head, lora, training, options, out, resume=resume)
    save_adapter(encoder.decoder, lora, out / ADAPTER)
    meta: dict[str, Any] = {
        "format": ADAPTED_FORMAT,
        "spec": str(spec),
        "sink_token": sink_token,
        "model_type": config.model_type,
        "num_hidden_layers": config.num_hidden_layers,
        "exit_layer": options.exit_layer,
        "base": base,
        "adapter": ADAPTER,
        "training": {
            "data": training.source, "data_sha256": training.digest, "steps": result.steps,
            "seconds": round(result.seconds, 1), "options": options.to_dict(),
        },
    }  # fmt: skip
    partial = out / f".{SAVED_FILE}.tmp"
    partial.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    partial.replace(out / SAVED_FILE)  # written last: a folder without it is not an encoder yet
    return FinetuneResult(out, result.steps, result.seconds, result.losses)


def _converted(step: Any) -> bool:
    # A layer step whose mask is not the stock causal one (bidirectional, backward or a sink mask).
    return step.kind.direction != "F" or step.kind.sink is not None


def _check_out(out: Path, resume: bool) -> None:
    where = printable(str(out))
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{where} is a file: give a folder for the fine-tuned encoder")
    if resume:
        return
    if out.is_dir() and any(out.iterdir()):
        raise FileExistsError(
            f"{where} is not empty: give a new folder, or resume the run it holds (resume=True, --resume)"
        )
