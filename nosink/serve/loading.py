"""Loading the model to serve, and checks of the server's own settings (device, API key)."""

from pathlib import Path
from typing import Any

import torch

from nosink.checks import printable


def check_device(device: torch.device | str | None) -> torch.device | None:
    """``device`` as a ``torch.device`` if this machine can run a model there (None stays None).

    Raises:
        ValueError: for a device name torch does not know, CUDA or MPS that this torch build or
            machine does not have, or a CUDA index past the machine's devices.
    """
    if device is None:
        return None
    try:
        where = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(
            f"unknown device {printable(repr(device))[:80]}: use cpu, cuda, cuda:1, mps, ... (the CPU: --device cpu)"
        ) from None
    if where.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "this machine has no usable GPU"
            raise ValueError(f"CUDA is not available ({why}, torch {torch.__version__}); use --device cpu")
        count = torch.cuda.device_count()
        if where.index is not None and where.index >= count:
            raise ValueError(
                f"there is no {where}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
            )
    if where.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError("MPS is not available in this torch build / on this machine; use --device cpu")
    return where


def check_api_key(api_key: str | None, name: str = "api_key") -> str | None:
    """``api_key`` if a client can send it: a non-empty string of printable ASCII, no spaces at its ends; or None.

    Raises:
        ValueError: naming ``name``, for an empty or blank key (never read as "no key") or one that no
            ``Authorization`` header can carry.
    """
    if api_key is None:
        return None
    if not isinstance(api_key, str) or not api_key.strip():
        raise ValueError(f"{name} must be a non-empty string, or None for no key")
    if api_key != api_key.strip() or not all(" " <= c <= "~" for c in api_key):
        raise ValueError(
            f"{name} has spaces at its ends or characters other than printable ASCII, which no Authorization "
            "header can carry: use letters, digits and punctuation, without spaces at the ends"
        )
    return api_key


def load_model(
    name_or_path: str | Path,
    *,
    chat: bool = True,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.nn.Module, Any]:
    """The model to serve and its tokenizer, loaded once: a causal LM (with its head) for chat, else the bare decoder.

    A fine-tuned encoder's folder (``nosink finetune``) loads its base model, with the folder's LoRA adapter
    wrapped around the base layers in place (one copy of the base weights): the engine switches the adapter off
    for chat steps (:func:`nosink.models.adapters.adapters_off`), so chat runs the base model and embeddings the
    fine-tuned encoder.

    Args:
        name_or_path: a hub id, a local transformers folder, or a fine-tuned encoder's folder.
        chat: load the LM head too (a causal LM); ``False`` loads the bare decoder.
        dtype: the weights' dtype (``torch.bfloat16``, ``"float32"``, ...); the checkpoint's by default.
        device: where to put the model.

    Raises:
        OSError: if there is no such model, or its weights do not fit its config.
        ValueError: for an unknown dtype name, or a device this machine does not have (:func:`check_device`).
    """
    from nosink.models.loading import load_config, load_model, load_tokenizer, local_folder
    from nosink.models.saved import base_of, is_adapted, read_saved

    device = check_device(device)  # before the weights are read
    folder = local_folder(name_or_path)
    saved = read_saved(folder) if folder is not None else None
    adapter = None
    if saved is not None and is_adapted(saved):
        adapter, name_or_path = folder / saved["adapter"], base_of(folder, saved)
    load_config(name_or_path)  # a missing folder fails here, with the library's message
    try:
        model = load_model(name_or_path, dtype=dtype, attn_implementation="sdpa", saved=False, head=chat)
    except OSError as err:
        if chat and "no LM head" in str(err):
            raise OSError(f"{err} (serve it with --no-chat, chat=False)") from None
        raise
    if adapter is not None:
        from nosink.models.adapters import load_adapter

        load_adapter(getattr(model, model.base_model_prefix, model), adapter)  # the bare decoder, as the encoder's
    tokenizer = load_tokenizer(name_or_path)
    if tokenizer is None:
        raise OSError(f"{name_or_path} has no tokenizer: the server needs one")
    model = model.eval()
    return (model.to(device) if device is not None else model), tokenizer
