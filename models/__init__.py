"""The encoder module built from a decoder and a layer spec."""
