"""Checks of a model's config.json and the JSON files beside it, before transformers builds anything from them.

transformers accepts some config values and then fails deep inside a model's constructor, or builds a model
that is silently wrong (a NaN norm epsilon); these checks refuse them with an error naming the file and the key.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from nosink.checks import printable

__all__ = ["REPAIR", "check_config", "check_config_json", "check_dtype", "read_json"]

REPAIR = "re-download the model or re-save the encoder"
"""What the errors about a model's files tell the user to do."""


def read_json(file: Path, fix: str) -> Any:
    """The JSON value in ``file``, a file of a model folder; ``fix`` ends the error message (what to do).

    Raises:
        OSError: naming the file, if it cannot be read, is not UTF-8, is not JSON or is nested too deeply to read.
    """
    where = printable(str(file))
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise OSError(f"{where} is not UTF-8 text ({err.reason} at byte {err.start}); {fix}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise OSError(f"{where} is not valid JSON ({printable(str(err))}); {fix}") from None
    except RecursionError:
        raise OSError(f"{where} is nested too deeply to read as JSON; {fix}") from None


def check_dtype(dtype: torch.dtype | str | None) -> torch.dtype | str | None:
    """``dtype`` as transformers takes it: a ``torch.dtype``, ``"auto"`` or ``None``.

    Raises:
        ValueError: for an unknown dtype name.
    """
    if isinstance(dtype, str) and dtype != "auto":
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ValueError(
                f"unknown dtype {printable(repr(dtype))}; use e.g. 'float32', 'bfloat16', 'float16' or 'auto'"
            )
        return getattr(torch, dtype)
    return dtype


def check_config_json(folder: Path) -> None:
    """Check ``folder``'s ``config.json`` as JSON, for what transformers would fail on before any check of its own.

    Raises:
        OSError: naming the file: it is missing, not a JSON object, or has a ``dtype`` that is not a torch dtype.
    """
    file = printable(str(folder / "config.json"))
    if not (folder / "config.json").is_file():
        raise OSError(f"no config.json in {printable(str(folder))}: not a model folder")
    raw = read_json(folder / "config.json", REPAIR)
    if not isinstance(raw, dict):
        raise OSError(f"{file} is not a JSON object; {REPAIR}")
    for key in ("dtype", "torch_dtype"):  # transformers would fail on getattr(torch, value)
        value = raw.get(key)
        if value is not None and not isinstance(getattr(torch, str(value), None), torch.dtype):
            raise OSError(f"{file}: {key} {printable(repr(value))} is not a torch dtype; {REPAIR}")


def check_config(config: Any, file: str) -> None:
    """Refuse config values that transformers accepts and then fails on deep inside the model's constructor.

    Args:
        config: a transformers config.
        file: how the config's file is named in messages.

    Raises:
        OSError: naming the file, the field and its value: an activation or a rope type transformers does not
            know, a sliding window that is not a positive integer, a norm epsilon that is not a positive finite
            number (a NaN one would load and give NaN vectors).
    """
    from transformers.activations import ACT2FN
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for name in ("hidden_act", "hidden_activation"):
        act = getattr(config, name, None)
        if isinstance(act, str) and act not in ACT2FN:
            raise OSError(
                f"{file}: {name} {printable(repr(act))} is not an activation transformers knows "
                f"(e.g. 'silu', 'gelu_pytorch_tanh'); {REPAIR}"
            )
    for name in _EPS_KEYS:
        eps = getattr(config, name, None)
        if eps is not None and not _positive_finite(eps):
            raise OSError(f"{file}: {name} {printable(repr(eps))} is not a positive finite number; {REPAIR}")
    window = getattr(config, "sliding_window", None)
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise OSError(f"{file}: sliding_window {printable(repr(window))} is not a positive integer or null; {REPAIR}")
    rope = getattr(config, "rope_parameters", None)
    # One dict, or one per layer type (Gemma3: full_attention and sliding_attention).
    ropes = [rope] if isinstance(rope, dict) and "rope_type" in rope else list((rope or {}).values())
    for params in ropes:
        kind = params.get("rope_type", "default") if isinstance(params, dict) else None
        if kind != "default" and kind not in ROPE_INIT_FUNCTIONS:
            raise OSError(
                f"{file}: rope_parameters has rope_type {printable(repr(kind))}, which transformers does not know "
                f"({', '.join(['default', *sorted(ROPE_INIT_FUNCTIONS)])}); {REPAIR}"
            )


# The names transformers' configs give a norm's epsilon.
_EPS_KEYS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps")


def _positive_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
