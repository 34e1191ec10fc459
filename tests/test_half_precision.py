"""Half precision against float32: the same weights in float16/bfloat16 give nearly the same states.

Only "no NaN" would pass a half-precision path that returns garbage of the right dtype; here every real
token's state must point the same way as in float32 (cosine), on every family and both backends.
"""

import copy

import numpy as np
import pytest
import torch
from tiny import CONFIGS, tiny_decoder

from nosink import EncoderFromDecoder

IDS = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0], [0, 0, 14, 15, 16, 17], [0, 0, 0, 0, 0, 0]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]])
REAL = MASK.bool()
SPECS = ["F*", "R* | M0B", "F*2 | M0F*2", "F* | INTER(R*2) | EXTEND(B)", "EXTRA(M3B) | B*"]


def cosines(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_half_precision_follows_float32(family, attn, dtype):
    full = tiny_decoder(family, attn)
    half = copy.deepcopy(full).to(dtype)
    for spec in SPECS:
        with torch.no_grad():
            want = EncoderFromDecoder(full, spec)(IDS, MASK).last_hidden_state
            got = EncoderFromDecoder(half, spec)(IDS, MASK).last_hidden_state
        assert got.dtype == dtype
        assert torch.isfinite(got).all(), (spec, "not finite")  # padding rows included
        cos = cosines(got[REAL], want[REAL])
        assert cos.min() >= 0.99, (spec, float(cos.min()))


def test_real_model_in_bfloat16_follows_float32(smollm2_path):
    texts = ["The cat sat on the mat.", "Paris is the capital of France.", "Hi"]
    spec = "F* | M0B*10"
    full = EncoderFromDecoder.from_pretrained(smollm2_path, spec=spec, dtype=torch.float32)
    half = EncoderFromDecoder.from_pretrained(smollm2_path, spec=spec, dtype=torch.bfloat16)
    want, got = full.encode(texts, normalize_embeddings=True), half.encode(texts, normalize_embeddings=True)
    assert np.isfinite(got).all()
    assert (got * want).sum(-1).min() >= 0.99
