"""encode() values against forward() on hand-built token ids: truncation, token embeddings, padding.

The expected values come from ``forward()`` on one unpadded row built here from the tokenizer
(``[sink] + instruction + text``), never from another ``encode()`` path.
"""

import numpy as np
import pytest
import torch
from tiny import WORDS, tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder, parse_spec

SPEC = "F*2 | INTER(B) | M0B"  # converted layers, so every token's state depends on the whole text
TEXTS = ["the cat sat on the mat", "a dog ran", "paris is the capital of france and london", "i"]
LONG = " ".join(WORDS[:14])
INSTRUCTION = "what is "


def make(family: str, spec: str = SPEC, attn: str = "sdpa") -> EncoderFromDecoder:
    return EncoderFromDecoder(tiny_decoder(family, attn), spec, tiny_tokenizer(bos=True))


def row_ids(encoder: EncoderFromDecoder, text: str, instruction: str | None) -> tuple[list[int], list[int]]:
    """The sink token and instruction ids, and the text ids, from the tokenizer directly."""
    tok = encoder.tokenizer
    prefix = [tok.bos_token_id] + (tok(instruction, add_special_tokens=False)["input_ids"] if instruction else [])
    return prefix, tok(text, add_special_tokens=False)["input_ids"]


def states(encoder: EncoderFromDecoder, ids: list[int]) -> torch.Tensor:
    """``forward()`` on one unpadded row: ``(T, D)``."""
    with torch.no_grad():
        return encoder(torch.tensor([ids])).last_hidden_state[0]


@pytest.mark.parametrize("instruction", [None, INSTRUCTION])
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_truncated_text_equals_the_encoding_of_its_first_tokens(family, instruction):
    encoder = make(family)
    prefix, _ = row_ids(encoder, LONG, instruction)
    for k in (3, 6):
        first = " ".join(LONG.split()[:k])
        got = encoder.encode(LONG, instruction, max_length=len(prefix) + k)
        np.testing.assert_allclose(got, encoder.encode(first, instruction), atol=1e-5)
        # and against forward() on the hand-built first tokens
        _, text = row_ids(encoder, first, instruction)
        np.testing.assert_allclose(got, states(encoder, prefix + text)[len(prefix) :].mean(0).numpy(), atol=1e-5)
    # the truncation made a difference, so the equality is not vacuous
    assert np.abs(encoder.encode(LONG, instruction) - got).max() > 1e-4


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("family", ["qwen2", "gpt2"])
def test_truncated_token_embeddings_are_the_first_tokens_states(family, side):
    # Another route: token embeddings of a batch, some rows truncated, through encode_specs.
    encoder = make(family)
    texts = [LONG, "a dog ran", LONG + " cat"]
    max_length = 6
    got = encoder.encode_specs(
        [SPEC, "F*"], texts, max_length=max_length, padding_side=side, output_value="token_embeddings"
    )
    for spec, rows in got.items():
        other = EncoderFromDecoder(encoder.decoder, spec, encoder.tokenizer)
        for text, row in zip(texts, rows, strict=True):
            prefix, ids = row_ids(encoder, text, None)
            ids = ids[: max_length - len(prefix)]
            assert row.shape == (len(ids), 32)
            np.testing.assert_allclose(row, states(other, prefix + ids)[len(prefix) :].numpy(), atol=1e-5)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("instruction", [None, INSTRUCTION])
@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma3_text"])
def test_token_embeddings_equal_forward_states_at_the_text_positions(family, instruction, side):
    encoder = make(family)
    rows = encoder.encode(TEXTS, instruction, output_value="token_embeddings", padding_side=side, batch_size=4)
    means = encoder.encode(TEXTS, instruction, padding_side=side, batch_size=4)
    for text, row, mean in zip(TEXTS, rows, means, strict=True):
        prefix, ids = row_ids(encoder, text, instruction)
        hidden = states(encoder, prefix + ids)
        assert row.shape == (len(ids), hidden.shape[1])
        np.testing.assert_allclose(row, hidden[len(prefix) :].numpy(), atol=1e-5)
        np.testing.assert_allclose(mean, hidden[len(prefix) :].mean(0).numpy(), atol=1e-5)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_left_padded_gpt2_equals_unpadded(attn):
    # GPT-2 has learned positions: a row's positions must count from its first real token, so padding
    # on the left must not move them. Rotary families are blind to a shift of all positions; GPT-2 is not.
    encoder = make("gpt2", "F* | B*2", attn)
    rows = [[1, 5, 6, 7, 8, 9, 10], [1, 11, 12], [1, 13, 14, 15, 16]]
    width = max(map(len, rows))
    for side in ("left", "right"):
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for r, row in enumerate(rows):
            start = width - len(row) if side == "left" else 0
            ids[r, start : start + len(row)] = torch.tensor(row)
            mask[r, start : start + len(row)] = 1
        with torch.no_grad():
            out = encoder(ids, mask).last_hidden_state
        for r, row in enumerate(rows):
            alone = states(encoder, row)
            np.testing.assert_allclose(out[r][mask[r].bool()].numpy(), alone.numpy(), atol=1e-5)
    # and positions matter on GPT-2: the same row with shifted position ids gives other states
    shifted = encoder.decoder(input_ids=torch.tensor([rows[1]]), position_ids=torch.tensor([[4, 5, 6]]))
    assert (
        shifted.last_hidden_state[0] - encoder.decoder(input_ids=torch.tensor([rows[1]])).last_hidden_state[0]
    ).abs().max() > 1e-3


def test_left_padded_gpt2_encodings_equal_one_text_at_a_time():
    encoder = make("gpt2")
    batched = encoder.encode(TEXTS, padding_side="left", batch_size=4)
    alone = np.stack([encoder.encode(t, batch_size=1) for t in TEXTS])
    np.testing.assert_allclose(batched, alone, atol=1e-5)


@pytest.mark.parametrize("spec", ["F* | EXTRA(B*2)", "F*2 | INTER(R*2)", "INTER(M0B) | F* | EXTRA(R) | EXTRA(B)"])
@pytest.mark.parametrize("family", ["olmo2", "phi3", "gpt2"])
def test_hidden_states_after_a_merge_are_the_summed_stream(family, spec):
    encoder = make(family, spec)
    ids = torch.tensor([[1, 5, 6, 7, 8], [1, 9, 10, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    with torch.no_grad():
        out = encoder(ids, mask, output_hidden_states=True)
        norm = encoder.decoder.norm if hasattr(encoder.decoder, "norm") else encoder.decoder.ln_f
        # the last entry is what the final norm receives
        np.testing.assert_allclose(norm(out.hidden_states[-1]).numpy(), out.last_hidden_state.numpy(), atol=1e-6)
    plan = parse_spec(spec).resolve(4)
    main_steps = [s for s in plan.steps if getattr(s, "stream", None) == "main" or getattr(s, "target", None) == "main"]
    assert len(out.hidden_states) == 1 + len(main_steps)
    real = mask.bool()
    for i, step in enumerate(main_steps, start=1):
        if hasattr(step, "source"):  # a merge: the stream before it plus a branch, never zeros nor unchanged
            before, after = out.hidden_states[i - 1][real], out.hidden_states[i][real]
            assert after.abs().max() > 1e-3
            assert (after - before).abs().max() > 1e-4


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_encode_tokens_pools_each_row_like_forward_on_its_own(family, side):
    # The batch step that encode() and the server share: each row's vector is the mean of forward()'s
    # states over its text tokens, computed on that row alone; token states are those rows.
    from nosink.models.texts import tokenize

    encoder = make(family)
    tokens = tokenize(encoder.tokenizer, TEXTS, INSTRUCTION, sink=encoder.sink_ids())
    order = [2, 0, 3, 1]
    vectors = encoder.encode_tokens(tokens, order, padding_side=side)[str(parse_spec(SPEC))]
    token_states = encoder.encode_tokens(tokens, order, padding_side=side, token_embeddings=True)
    for row, i in enumerate(order):
        prefix, text = row_ids(encoder, TEXTS[i], INSTRUCTION)
        want = states(encoder, prefix + text)[len(prefix) :]
        torch.testing.assert_close(vectors[row], want.mean(0), atol=1e-5, rtol=0)
        torch.testing.assert_close(token_states[str(parse_spec(SPEC))][row], want, atol=1e-5, rtol=0)
