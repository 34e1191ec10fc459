"""Kept for imports written before :mod:`nosink.models.loading`, which now holds all of this."""

from .loading import FORMAT, check_saved, load_config, load_model, load_tokenizer, read_saved, save_encoder

__all__ = ["FORMAT", "check_saved", "load_config", "load_model", "load_tokenizer", "read_saved", "save_encoder"]
