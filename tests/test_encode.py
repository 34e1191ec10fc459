"""encode(): pooling over text tokens, sink tokens, and results independent of batching and padding."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import specs_with_depth
from tiny import WORDS, tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder
from nosink.models import pool

TEXTS = ["the cat sat on the mat", "a dog ran", "paris is the capital of france", "i", "we love very good food"]


def make(spec="F* | M0B*2", family="llama", bos=True, **kwargs):
    return EncoderFromDecoder(tiny_decoder(family), spec, tiny_tokenizer(bos), **kwargs)


def test_pooling_literal_cases():
    hidden = torch.arange(2 * 4 * 1, dtype=torch.float32).reshape(2, 4, 1)  # row 0: 0..3, row 1: 4..7
    text = torch.tensor([[False, True, True, False], [False, False, False, False]])
    assert pool(hidden, text, "mean").flatten().tolist() == [1.5, 0.0]
    assert pool(hidden, text, "weighted_mean").flatten().tolist() == pytest.approx([(1 * 1 + 2 * 2) / 3, 0.0])
    assert pool(hidden, text, "last").flatten().tolist() == [2.0, 0.0]
    assert pool(hidden, text, "first").flatten().tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="unknown pooling 'max'"):
        pool(hidden, text, "max")


def test_mean_pooling_excludes_instruction_and_sink_token():
    encoder = make()
    tok = encoder.tokenizer
    instruction = "what is "  # prepended verbatim, as E5-style prompts ("...\nQuery: ") are
    got = encoder.encode(["the cat sat"], instruction=instruction)[0]
    ids = [tok.bos_token_id] + tok(instruction, add_special_tokens=False)["input_ids"]
    text_ids = tok("the cat sat", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        hidden = encoder(torch.tensor([ids + text_ids])).last_hidden_state[0]
    expected = hidden[len(ids) :].mean(0).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-6)
    # including the instruction would have given something else
    assert np.abs(hidden.mean(0).numpy() - got).max() > 1e-4


def test_sink_token_choices():
    with_bos, without_bos = make(bos=True), make(bos=False)
    assert with_bos.sink_ids() == [1]
    assert without_bos.sink_ids() == []  # no BOS token: the first text token becomes the sink
    assert make(sink_token="none").sink_ids() == []
    assert make(bos=False, sink_token="</s>").sink_ids() == [2]
    with pytest.raises(ValueError, match="not a token of this tokenizer"):
        make(sink_token="<nope>").sink_ids()
    # the sink token changes the embedding of the same text
    a = make(sink_token="auto").encode("the cat sat")
    b = make(sink_token="none").encode("the cat sat")
    assert np.abs(a - b).max() > 1e-4


@pytest.mark.parametrize("pooling", ["mean", "weighted_mean", "last", "first"])
def test_results_do_not_depend_on_batching_or_padding_side(pooling):
    encoder = make("F*2 | B | M0B")
    reference = np.stack([encoder.encode(t, pooling=pooling) for t in TEXTS])  # one at a time, no padding
    for batch_size in (1, 2, 5):
        for side in ("right", "left"):
            got = encoder.encode(TEXTS, pooling=pooling, batch_size=batch_size, padding_side=side)
            np.testing.assert_allclose(got, reference, atol=1e-5)


def test_output_types_and_normalisation():
    encoder = make()
    arr = encoder.encode(TEXTS)
    assert isinstance(arr, np.ndarray) and arr.shape == (5, 32) and arr.dtype == np.float32
    ten = encoder.encode(TEXTS, convert_to_tensor=True, normalize_embeddings=True)
    assert isinstance(ten, torch.Tensor) and torch.allclose(ten.norm(dim=-1), torch.ones(5))
    one = encoder.encode("a dog ran")
    assert one.shape == (32,)
    tokens = encoder.encode(TEXTS, output_value="token_embeddings")
    assert [t.shape for t in tokens] == [(6, 32), (3, 32), (6, 32), (1, 32), (5, 32)]
    assert encoder.encode([]).shape == (0, 32)


def test_empty_text_and_truncation():
    encoder = make()
    out = encoder.encode(["", "the cat"], max_length=2)
    assert out.shape == (2, 32) and not np.isnan(out).any()
    assert np.all(out[0] == 0)  # no text tokens: nothing to pool
    with pytest.raises(ValueError, match="leaving no room for text"):
        encoder.encode(["the cat"], instruction="what is the", max_length=3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"pooling": "max"}, "unknown pooling"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"padding_side": "middle"}, "padding_side must be"),
        ({"output_value": "logits"}, "output_value must be"),
    ],
)
def test_bad_encode_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make().encode(TEXTS, **kwargs)


def test_a_misspelt_keyword_names_the_public_method_and_the_valid_ones():
    encoder = make()
    with pytest.raises(TypeError, match=r"encode\(\) got an unexpected keyword argument 'pooling_mode'") as info:
        encoder.encode(TEXTS, pooling_mode="mean")
    assert "_EncodeOptions" not in str(info.value)
    typo = r"^encode_specs\(\) got an unexpected keyword argument 'pooling_mode'; "
    valid = r"the keyword arguments of encode\(\) are pooling, batch_size, .*, template$"
    with pytest.raises(TypeError, match=typo + valid):
        encoder.encode_specs(["F*"], TEXTS, pooling_mode="mean")


def test_encode_rejects_non_strings_and_needs_a_tokenizer():
    with pytest.raises(ValueError, match=r"sentences\[1\] is a int"):
        make().encode(["a", 3])
    with pytest.raises(ValueError, match="needs a tokenizer"):
        EncoderFromDecoder(tiny_decoder("llama"), "F*").encode(["a"])


sentences = st.lists(st.lists(st.sampled_from(WORDS), min_size=0, max_size=7).map(" ".join), min_size=1, max_size=5)


@pytest.mark.filterwarnings(r"ignore:encode\(\). .* no tokens:UserWarning")  # generated texts may be empty
@settings(max_examples=25, deadline=None)
@given(
    specs_with_depth(), sentences, st.integers(1, 4), st.sampled_from(["right", "left"]),
    st.sampled_from(["llama", "mistral", "gemma3_text", "gpt2"]),
)  # fmt: skip
def test_generated_specs_give_the_same_vectors_whatever_the_batching(spec_depth, texts, batch_size, side, family):
    spec, depth = spec_depth
    model = tiny_decoder(family)
    model.config.num_hidden_layers = depth
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = [model.config.layer_types[i % 4] for i in range(depth)]
    name = "h" if family == "gpt2" else "layers"
    stack = getattr(model, name)
    setattr(model, name, torch.nn.ModuleList([stack[i % 4] for i in range(depth)]))  # reuse weights to reach depth
    encoder = EncoderFromDecoder(model, spec, tiny_tokenizer())
    alone = np.stack([encoder.encode(t) for t in texts])
    batched = encoder.encode(texts, batch_size=batch_size, padding_side=side)
    np.testing.assert_allclose(batched, alone, atol=2e-5)


def test_encode_specs_equals_separate_encoders_and_shares_the_lower_layers():
    model = tiny_decoder("llama")
    tok = tiny_tokenizer()
    specs = ["F* | B", "F* | M0B*2", "F*2 | B | M0B", "F* | INTER(R)", "F* | EXTEND(B)"]
    base = EncoderFromDecoder(model, "F*", tok)
    calls = []
    hooks = [layer.register_forward_hook(lambda m, a, o, i=i: calls.append(i)) for i, layer in enumerate(model.layers)]
    try:
        together = base.encode_specs(specs, TEXTS, batch_size=5)
    finally:
        for h in hooks:
            h.remove()
    for spec in specs:
        alone = EncoderFromDecoder(model, spec, tok).encode(TEXTS, batch_size=5)
        np.testing.assert_allclose(together[str(EncoderFromDecoder(model, spec).spec)], alone, atol=1e-6)
    # Layers 0 and 1 are forward in every spec: once each. Layer 2: F (shared by three specs), M0B, B.
    assert [calls.count(i) for i in range(3)] == [1, 1, 3]
    # Layer 3: B; M0B; M0B after B; INTER's forward copy and R; EXTEND's F and the B on top.
    assert calls.count(3) == 7


def test_shared_prefix_is_the_common_leading_steps():
    from nosink import parse_spec
    from nosink.models.encoder import shared_prefix

    def cut(*texts):
        return shared_prefix([parse_spec(t).resolve(4) for t in texts])

    assert cut("F* | B", "F* | M0B*2") == 2
    assert cut("F* | B", "F* | B") == 4
    assert cut("F* | EXTRA(B)", "F* | EXTRA(B) | EXTEND(R)") == 6  # fork, 1 branch layer, 4 main layers
    assert cut("F* | EXTRA(B)", "F* | EXTRA(R)") == 1  # the same fork, then the branches differ
    assert cut("F*2 | INTER(R*2)", "F*2 | INTER(B*2)") == 5  # 2 layers, fork, the 2 forward copies
    assert cut("B*", "F*") == 0


def test_encode_specs_with_open_branches_at_the_cut():
    model, tok = tiny_decoder("llama"), tiny_tokenizer()
    specs = ["F* | EXTRA(B)", "F* | EXTRA(R)", "F*2 | INTER(R*2)", "F*2 | INTER(B*2)"]
    together = EncoderFromDecoder(model, "F*", tok).encode_specs(specs, TEXTS)
    for spec in specs:
        np.testing.assert_allclose(
            together[spec], EncoderFromDecoder(model, spec, tok).encode(TEXTS), atol=1e-6, err_msg=spec
        )
