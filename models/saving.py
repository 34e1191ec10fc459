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

__all__ = ["load_decoder", "save_encoder"]

logger = logging.getLogger(__name__)

SAVED_FILE = "nosink.json"
WEIGHTS_FILE = "model.safetensors"


def save_encoder(encoder: EncoderFromDecoder, directory: Path, meta: dict[str, Any]) -> None:
    """Write ``nosink.json``, the decoder's config and safetensors weights, and the tokenizer."""
    directory.mkdir(parents=True, exist_ok=True)
    decoder = encoder.decoder
    make_serializable(decoder)
    decoder.save_pretrained(directory, safe_serialization=True)
    if encoder.tokenizer is not None:
        encoder.tokenizer.save_pretrained(directory)
    meta = {**meta, "model_type": decoder.config.model_type, "num_hidden_layers": encoder.parts.depth}
    (directory / SAVED_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def _read_saved(path: Path) -> dict[str, Any] | None:
    file = path / SAVED_FILE
    if not file.is_file():
        return None
    try:
        meta = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise OSError(f"{file} is not valid JSON ({err}); re-save the encoder with save_pretrained()") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("spec"), str):
        raise OSError(f"{file} has no 'spec' string; re-save the encoder with save_pretrained()")
    return meta


def _check_weights(path: Path) -> None:
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


def load_decoder(
    name_or_path: str | Path, *, dtype: torch.dtype | str | None, attn_implementation: str, **hf_kwargs: Any
) -> tuple[torch.nn.Module, Any, dict[str, Any] | None]:
    """Load a bare decoder and its tokenizer; also the saved metadata when the folder is a saved encoder.

    Raises:
        OSError: for a saved folder whose files are missing, corrupted or mismatched.
    """
    from transformers import AutoModel, AutoTokenizer

    path = Path(name_or_path)
    saved = _read_saved(path) if path.is_dir() else None
    if saved is not None:
        _check_weights(path)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    model, info = AutoModel.from_pretrained(
        str(name_or_path), dtype=dtype, attn_implementation=attn_implementation, output_loading_info=True, **hf_kwargs
    )
    problems = {k: v for k, v in info.items() if k in ("missing_keys", "mismatched_keys") and v}
    if problems:
        # transformers would initialise these at random and carry on: for an encoder that is silently wrong.
        raise OSError(f"weights in {name_or_path} do not match the model's config: {problems}")
    if saved is not None:
        if saved.get("model_type") not in (None, model.config.model_type):
            raise OSError(
                f"{path / SAVED_FILE} says model_type {saved['model_type']!r} but config.json has "
                f"{model.config.model_type!r}"
            )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(name_or_path), **_tokenizer_kwargs(hf_kwargs))
    except (OSError, ValueError) as err:
        logger.warning("no tokenizer loaded from %s (%s); encode() will need one", name_or_path, err)
        tokenizer = None
    model.eval()
    return model, tokenizer, saved


def _tokenizer_kwargs(hf_kwargs: dict[str, Any]) -> dict[str, Any]:
    keep = ("revision", "gguf_file", "cache_dir", "token", "trust_remote_code", "local_files_only")
    return {k: v for k, v in hf_kwargs.items() if k in keep}
