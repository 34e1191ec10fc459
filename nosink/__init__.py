"""nosink: turn a pretrained decoder-only LLM into a text encoder without training.

The layer-spec language lives in :mod:`nosink.layerspec`, the encoder module in
:mod:`nosink.models`, the paper's evaluations in :mod:`nosink.evals`.
The names below are imported on first use (PEP 562), so that ``import nosink.checks`` or
``nosink --help`` does not load torch and transformers.
``nosink.to_sentence_transformer`` and ``nosink.load_sentence_transformer`` (from
:mod:`nosink.models.st`) need the ``st`` extra, so they stay out of ``__all__`` (``from nosink import *``
works without sentence-transformers).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers and the API reference read; at run time, __getattr__ below
    from nosink.corpus import encode_corpus, load_corpus_embeddings
    from nosink.layerspec import Spec, SpecError, parse_spec, presets
    from nosink.models import EncoderFromDecoder, UnsupportedModelError
    from nosink.models.loading import RemoteCodeError
    from nosink.models.st import load_sentence_transformer as load_sentence_transformer
    from nosink.models.st import to_sentence_transformer as to_sentence_transformer

__all__ = [
    "EncoderFromDecoder",
    "RemoteCodeError",
    "Spec",
    "SpecError",
    "UnsupportedModelError",
    "encode_corpus",
    "load_corpus_embeddings",
    "parse_spec",
    "presets",
]
__version__ = "0.1.0"

# Each public name -> the module it comes from (the same names as the TYPE_CHECKING imports above).
_LAZY = {
    "EncoderFromDecoder": "nosink.models",
    "UnsupportedModelError": "nosink.models",
    "RemoteCodeError": "nosink.models.loading",
    "Spec": "nosink.layerspec",
    "SpecError": "nosink.layerspec",
    "parse_spec": "nosink.layerspec",
    "presets": "nosink.layerspec",
    "encode_corpus": "nosink.corpus",
    "load_corpus_embeddings": "nosink.corpus",
    "to_sentence_transformer": "nosink.models.st",
    "load_sentence_transformer": "nosink.models.st",
}
_SUBPACKAGES = ("layerspec", "models", "evals")


def __getattr__(name: str) -> object:
    if name in _SUBPACKAGES:  # ``import nosink; nosink.models...`` as when the package imported them eagerly
        return importlib.import_module(f"nosink.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nosink' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
