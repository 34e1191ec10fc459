"""Checks on the real SmolLM2-135M-Instruct (skipped when its weights cannot be had)."""

import numpy as np
import pytest
import torch

from nosink import EncoderFromDecoder
from nosink.layerspec.masks import relative_positions

TEXTS = ["The cat sat on the mat.", "Paris is the capital of France, and London is the capital of England.", "Hi"]


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    return EncoderFromDecoder.from_pretrained(smollm2_path, spec="F*", dtype=torch.float32)


def _batch(encoder, side):
    tok = encoder.tokenizer
    rows = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tok.pad_token_id)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        sl = slice(0, len(r)) if side == "right" else slice(width - len(r), width)
        ids[i, sl], mask[i, sl] = torch.tensor(r), 1
    return ids, mask


@pytest.mark.parametrize("side", ["right", "left"])
def test_all_forward_equals_the_stock_model(smollm2, side):
    ids, mask = _batch(smollm2, side)
    pos = relative_positions(mask).clamp(min=0)
    with torch.no_grad():
        stock = smollm2.decoder(input_ids=ids, attention_mask=mask, position_ids=pos).last_hidden_state
        ours = smollm2(ids, mask).last_hidden_state
    diff = (stock - ours)[mask.bool()].abs().max().item()
    assert diff <= 1e-5, diff


def test_mask0_bidir_changes_the_output_and_stays_finite(smollm2):
    converted = EncoderFromDecoder.from_model(smollm2.decoder, "F* | M0B*10", smollm2.tokenizer)
    a = smollm2.encode(TEXTS)
    b = converted.encode(TEXTS)
    assert np.isfinite(b).all()
    assert np.abs(a - b).max() > 1e-3
    assert converted.decoder is smollm2.decoder  # one set of weights for both


def test_a_tight_max_length_counts_the_instruction_as_read_with_the_text(smollm2):
    # Issue 10: alone, "Query: \n" is 3 tokens; before "hello" it is 4 ("Query", ":", " ", "\n"). With the sink
    # token that fills max_length=5, and the text used to get no token at all (an all-zero vector, silently).
    needs = r"text 0 needs at least 6 tokens, one of its own after the 5 .* max_length=5 .* raise max_length"
    with pytest.raises(ValueError, match=needs):
        smollm2.encode(["hello world again"], instruction="Query: \n", max_length=5)
    with pytest.warns(UserWarning, match="1 of 1 texts was cut to max_length=6"):
        got = smollm2.encode(["hello world again"], instruction="Query: \n", max_length=6)
    tok = smollm2.tokenizer
    ids = [tok.bos_token_id, *tok("Query: \nhello", add_special_tokens=False)["input_ids"]]
    assert len(ids) == 6
    with torch.no_grad():
        hidden = smollm2(torch.tensor([ids])).last_hidden_state[0]
    np.testing.assert_allclose(got[0], hidden[-1].numpy(), atol=1e-5)  # the one text token that fits, pooled
