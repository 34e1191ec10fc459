"""nosink: turn a pretrained decoder-only LLM into a text encoder without training.

The layer-spec language lives in :mod:`nosink.layerspec`, the encoder module in
:mod:`nosink.models`, the paper's evaluations in :mod:`nosink.evals`.
"""

from nosink.layerspec import Spec, SpecError, parse_spec, presets
from nosink.models import EncoderFromDecoder, UnsupportedModelError
from nosink.models.corpus import encode_corpus, load_corpus_embeddings

__all__ = [
    "EncoderFromDecoder",
    "Spec",
    "SpecError",
    "UnsupportedModelError",
    "encode_corpus",
    "load_corpus_embeddings",
    "parse_spec",
    "presets",
]
__version__ = "0.1.0"
