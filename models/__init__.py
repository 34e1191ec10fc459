"""The encoder module built from a decoder and a layer spec."""

from .encoder import EncoderFromDecoder, EncoderOutput
from .families import FAMILIES, UnsupportedModelError
from .pooling import pool

__all__ = ["FAMILIES", "EncoderFromDecoder", "EncoderOutput", "UnsupportedModelError", "pool"]
