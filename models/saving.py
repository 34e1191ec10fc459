"""Loading decoders and saved encoders; writing encoders as safetensors folders."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .families import make_serializable

if TYPE_CHECKING:
    from .encoder import EncoderFromDecoder

__all__ = ["FORMAT", "check_saved", "load_config", "load_model", "load_tokenizer", "read_saved", "save_encoder"]

logger = logging.getLogger(__name__)

SAVED_FILE = "nosink.json"
FORMAT = 1  # version of the nosink.json layout


def save_encoder(encoder: EncoderFromDecoder, directory: Path, meta: dict[str, Any]) -> None:
    """Write ``nosink.json``, the decoder's config and safetensors weights, and the tokenizer."""
    directory.mkdir(parents=True, exist_ok=True)
    decoder = encoder.decoder
    make_serializable(decoder)
    decoder.save_pretrained(directory, safe_serialization=True)
    if encoder.tokenizer is not None:
        encoder.tokenizer.save_pretrained(directory)
    meta = {"format": FORMAT, **meta, "model_type": decoder.config.model_type, "num_hidden_layers": encoder.parts.depth}
    (directory / SAVED_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def read_saved(name_or_path: str | Path) -> dict[str, Any] | None:
    """The ``nosink.json`` of a folder written by ``save_pretrained``, or ``None`` for anything else.

    Raises:
        OSError: if the file is not valid JSON, lacks the spec, or has a newer format than this version reads.
    """
    path = Path(name_or_path)
    file = path / SAVED_FILE
    if not file.is_file():
        return None
    try:
        meta = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise OSError(f"{file} is not valid JSON ({err}); re-save the encoder with save_pretrained()") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("spec"), str):
        raise OSError(f"{file} has no 'spec' string; re-save the encoder with save_pretrained()")
    if meta.get("format") != FORMAT:
        raise OSError(
            f"{file} has format {meta.get('format')!r}; this version of nosink reads format {FORMAT}: "
            "upgrade nosink or re-save the encoder"
        )
    return meta


def load_config(name_or_path: str | Path, **hf_kwargs: Any) -> Any:
    """The model's transformers config (cheap: no weights).

    Raises:
        OSError: if there is no such local folder or hub model.
    """
    from transformers import AutoConfig

    text = str(name_or_path)
    looks_local = text.startswith((".", "/", "~")) or Path(text).exists()
    if looks_local and not Path(text).expanduser().is_dir():
        raise OSError(f"no model folder at {text}")
    return AutoConfig.from_pretrained(text, **_keep(hf_kwargs, _CONFIG_KWARGS))


def check_saved(path: Path, saved: dict[str, Any], config: Any) -> None:
    """Check a saved folder's metadata against its config, and its weight files' integrity.

    Raises:
        OSError: for a depth or model type that differs from config.json, or damaged weight files.
    """
    for key, have in (("model_type", config.model_type), ("num_hidden_layers", config.num_hidden_layers)):
        if saved.get(key) not in (None, have):
            raise OSError(f"{path / SAVED_FILE} says {key} {saved[key]!r} but config.json has {have!r}")
    from safetensors import SafetensorError, safe_open

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise OSError(f"{path} holds no *.safetensors weights; re-save the encoder with save_pretrained()")
    for file in files:
        try:
            with safe_open(file, framework="pt") as f:
                for key in f.keys():  # reading each tensor catches truncation, not just a bad header
                    f.get_slice(key)
        except (SafetensorError, OSError, ValueError) as err:
            raise OSError(f"{file} is corrupted or truncated ({err}); re-save or re-download it") from None


# Keys a bare decoder does not use when loaded from a checkpoint with a head.
_HEAD_KEYS = ("lm_head.", "score.", "classifier.")


def load_model(
    name_or_path: str | Path, *, dtype: Any, attn_implementation: str, saved: bool, **hf_kwargs: Any
) -> torch.nn.Module:
    """The bare decoder, refusing weights that do not match its config (transformers would only warn).

    Raises:
        OSError: for missing, unexpected or mis-shaped weights.
        ValueError: for an unknown dtype name.
    """
    from transformers import AutoModel

    if isinstance(dtype, str) and dtype != "auto":
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ValueError(f"unknown dtype {dtype!r}; use e.g. 'float32', 'bfloat16', 'float16' or 'auto'")
        dtype = getattr(torch, dtype)
    try:
        model, info = AutoModel.from_pretrained(
            str(name_or_path), dtype=dtype, attn_implementation=attn_implementation, output_loading_info=True,
            **hf_kwargs,
        )  # fmt: skip
    except RuntimeError as err:  # transformers' size-mismatch error
        raise OSError(f"weights in {name_or_path} do not match the model's config: {err}") from None
    unexpected = [k for k in info.get("unexpected_keys", ()) if saved or not k.startswith(_HEAD_KEYS)]
    problems = {"missing_keys": info.get("missing_keys"), "mismatched_keys": info.get("mismatched_keys")}
    problems = {k: v for k, v in problems.items() if v}
    if unexpected:
        problems["unexpected_keys"] = unexpected
    if problems:
        # transformers would initialise or drop these and carry on: for an encoder that is silently wrong.
        raise OSError(f"weights in {name_or_path} do not match the model's config: {problems}")
    return model.eval()


def load_tokenizer(name_or_path: str | Path, **hf_kwargs: Any) -> Any:
    """The tokenizer saved with the model, or ``None`` (logged) when there is none."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(name_or_path), **_keep(hf_kwargs, _CONFIG_KWARGS))
    except (OSError, ValueError) as err:
        logger.warning("no tokenizer loaded from %s (%s); encode() will need one", name_or_path, err)
        return None


_CONFIG_KWARGS = ("revision", "gguf_file", "cache_dir", "token", "trust_remote_code", "local_files_only", "subfolder")


def _keep(kwargs: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if k in names}
