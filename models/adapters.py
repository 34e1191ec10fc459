"""LoRA adapters on a decoder's layers (the ``peft`` library): add, save, load, and switch them off for a while.

A fine-tuned encoder (``nosink finetune``) is the base decoder's weights plus an adapter. The adapter's LoRA
layers wrap the decoder's own linear layers in place (``peft.inject_adapter_in_model``): the wrapped layer keeps
the base tensor itself, so the encoder's parameters are still the base model's (same ``data_ptr``), and the
encoder's layer loop runs the adapted layers without knowing. :func:`adapters_off` runs the base model without
the adapter (a server's chat steps), with no second copy of any weight.

``peft`` is needed only here; an encoder without an adapter never imports it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch import nn

from nosink.checks import printable

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "adapter_layers",
    "adapters_off",
    "add_lora",
    "linear_names",
    "load_adapter",
    "save_adapter",
]

ADAPTER_CONFIG = "adapter_config.json"  # peft's names, so peft's own tools read the folder too
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def _peft() -> Any:
    try:
        import peft
    except ImportError:
        raise ImportError(
            'LoRA adapters need the peft library: pip install "nosink[finetune]" (or pip install peft)'
        ) from None
    return peft


def linear_names(layers: Sequence[nn.Module]) -> list[str]:
    """The names (last part) of the linear layers inside ``layers``: what LoRA wraps (``q_proj``, ``c_attn``, ...).

    Conv1D (GPT-2's linear layer, which peft also wraps) counts as linear.
    """
    names: set[str] = set()
    for layer in layers:
        for name, module in layer.named_modules():
            if name and (isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"):
                names.add(name.rsplit(".", 1)[-1])
    return sorted(names)


def add_lora(decoder: nn.Module, layers: Sequence[int], *, rank: int, alpha: float, dropout: float) -> Any:
    """Wrap every linear layer of ``decoder``'s decoder layers ``layers`` in a fresh LoRA adapter, in place.

    Only the adapter's tensors are trainable afterwards; the base weights are frozen and stay the same
    tensors. Returns the ``peft.LoraConfig`` used (saved beside the weights by :func:`save_adapter`).

    Args:
        decoder: the bare decoder (``encoder.decoder``), whose layers list is named ``layers``, ``h`` or ``blocks``.
        layers: the indices of the decoder layers to adapt.
        rank: the LoRA rank ``r``.
        alpha: LoRA's scale numerator (the update is scaled by ``alpha / rank``).
        dropout: dropout on the adapter's input while training.

    Raises:
        ImportError: without peft.
        ValueError: for no layers, a rank below 1 or a dropout outside [0, 1).
    """
    peft = _peft()
    if not layers:
        raise ValueError("add_lora needs at least one layer to adapt")
    if not isinstance(rank, int) or rank < 1:
        raise ValueError(f"the LoRA rank must be an integer of at least 1, got {printable(repr(rank))}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"LoRA dropout must be in [0, 1), got {dropout}")
    stack = _layers_of(decoder)
    targets = linear_names([stack[i] for i in layers])
    config = peft.LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets,
        layers_to_transform=sorted(layers), layers_pattern=_stack_name(decoder), bias="none",
    )  # fmt: skip
    for p in decoder.parameters():
        p.requires_grad_(False)
    peft.inject_adapter_in_model(config, decoder)
    decoder.train(decoder.training)  # the new LoRA modules (their dropout) start in training mode: take the model's
    return config


def save_adapter(decoder: nn.Module, config: Any, folder: str | os.PathLike[str]) -> None:
    """Write the adapter of ``decoder`` (its LoRA tensors only) and its ``config`` into ``folder``.

    Raises:
        ValueError: if ``decoder`` has no adapter.
    """
    from safetensors.torch import save_file

    peft = _peft()
    state = peft.get_peft_model_state_dict(decoder)
    if not state:
        raise ValueError("the decoder has no LoRA adapter to save")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, str(folder / ADAPTER_WEIGHTS))
    config.save_pretrained(str(folder))


def load_adapter(decoder: nn.Module, folder: str | os.PathLike[str]) -> Any:
    """Wrap ``decoder``'s layers in the adapter saved in ``folder`` (by :func:`save_adapter`), in place, frozen.

    Returns the adapter's ``peft.LoraConfig``.

    Raises:
        ImportError: without peft.
        OSError: if the folder lacks the adapter's files, they do not read, or its tensors do not fit ``decoder``
            (missing, or of other shapes).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    peft = _peft()
    folder = Path(folder)
    where = printable(str(folder))
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        if not (folder / name).is_file():
            raise OSError(f"{where} holds no {name}: the adapter of this fine-tuned encoder is missing")
    try:
        config = peft.LoraConfig.from_pretrained(str(folder))
        state = load_file(str(folder / ADAPTER_WEIGHTS))
    except (SafetensorError, json.JSONDecodeError, TypeError, ValueError) as err:
        raise OSError(f"the adapter in {where} does not read ({printable(str(err))})") from None
    peft.inject_adapter_in_model(config, decoder)
    try:
        result = peft.set_peft_model_state_dict(decoder, state)
    except RuntimeError as err:  # shapes that do not fit
        raise OSError(f"the adapter in {where} does not fit the base model: {printable(str(err))}") from None
    missing = [k for k in result.missing_keys if "lora_" in k]
    unexpected = list(result.unexpected_keys)
    if missing or unexpected:
        raise OSError(
            f"the adapter in {where} does not fit the base model: missing {missing[:4]}, unexpected {unexpected[:4]}"
        )
    for p in decoder.parameters():
        p.requires_grad_(False)
    decoder.train(decoder.training)  # the new LoRA modules (their dropout) start in training mode: take the model's
    return config


def adapter_layers(model: nn.Module | None) -> list[nn.Module]:
    """The LoRA layers inside ``model`` (none for ``None`` or a model without an adapter)."""
    if not isinstance(model, nn.Module):
        return []
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:
        return []
    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]


@contextmanager
def adapters_off(layers: Sequence[nn.Module]) -> Iterator[None]:
    """Run the base weights alone inside the block: the LoRA ``layers`` (:func:`adapter_layers`) are switched off.

    Nothing is copied; the adapter's tensors stay where they are and are on again when the block ends. Not for
    two threads at once: whoever runs the model meanwhile also runs without the adapter.
    """
    # peft's enable_adapters(True) also makes the adapter trainable: keep each tensor's requires_grad as it was.
    grads = [(p, p.requires_grad) for layer in layers for p in layer.parameters()]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)
        for p, grad in grads:
            p.requires_grad_(grad)


def _stack_name(decoder: nn.Module) -> str:
    for name in ("layers", "h", "blocks"):
        if isinstance(getattr(decoder, name, None), nn.ModuleList):
            return name
    raise ValueError(f"{type(decoder).__name__} has no list of layers named layers, h or blocks")


def _layers_of(decoder: nn.Module) -> nn.ModuleList:
    return getattr(decoder, _stack_name(decoder))
