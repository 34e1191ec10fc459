"""nosink: turn a pretrained decoder-only LLM into a text encoder without training.

The layer-spec language lives in :mod:`nosink.layerspec`, the encoder module in
:mod:`nosink.models`, the paper's evaluations in :mod:`nosink.evals`.
``nosink.to_sentence_transformer`` and ``nosink.load_sentence_transformer`` (from
:mod:`nosink.models.st`) need the ``st`` extra and are imported on first use, so they stay out of
``__all__`` (``from nosink import *`` works without sentence-transformers).
"""

from nosink.corpus import encode_corpus, load_corpus_embeddings
from nosink.layerspec import Spec, SpecError, parse_spec, presets
from nosink.models import EncoderFromDecoder, UnsupportedModelError
from nosink.models.loading import RemoteCodeError

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

# sentence-transformers is an optional extra (``st``): its bridge is imported on first use only.
_ST_NAMES = ("to_sentence_transformer", "load_sentence_transformer")


def __getattr__(name: str) -> object:
    if name in _ST_NAMES:
        from nosink.models import st

        return getattr(st, name)
    raise AttributeError(f"module 'nosink' has no attribute {name!r}")
