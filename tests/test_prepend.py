"""Token Prepending (Fu et al. 2024): a placeholder after the sink token takes the last token's state before layers.

The reference is written from the authors' description on the stock model: forward pre-hooks on its layers zero the
placeholder's input (it enters as zeros) and, before each layer of the range, copy the last token's state into it.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny import CONFIGS, tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder, parse_spec
from nosink.layerspec import Prepend, check_prepend

FAMILIES = sorted(CONFIGS)
TEXTS = ["the cat sat on the mat", "a dog ran in the park", "paris is the capital of france", "i like food"]
SPECS = ["F*", "F* | B*2", "F* | R*2", "F* | M0B*2", "F* | M0F*2", "M0B*", "F* | INTER(R*2)", "F | B | R | M1B"]


def by_hand(model, ids, prepend):
    """The stock model on unpadded rows, with the authors' replacement done by pre-hooks on its layers."""
    start, stop = prepend
    layers = model.h if hasattr(model, "h") else model.layers

    def hook(i):
        def fn(module, args, kwargs):
            h = (args[0] if args else kwargs["hidden_states"]).clone()
            if i == 0:
                h[:, 1] = 0  # the placeholder enters as a zero vector
            if start <= i < stop:
                h[:, 1] = h[:, -1]  # the previous layer's last-token state
            if args:
                return (h, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": h}

        return fn

    handles = [layer.register_forward_pre_hook(hook(i), with_kwargs=True) for i, layer in enumerate(layers)]
    try:
        with torch.no_grad():
            return model(input_ids=ids)[0]
    finally:
        for handle in handles:
            handle.remove()


def rows(n=3, length=7, seed=0):
    return torch.randint(3, 90, (n, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("prepend", [(1, 3), (0, 2), (2, 4)])
def test_forward_equals_the_authors_replacement_on_the_stock_model(family, prepend):
    model = tiny_decoder(family)
    ids = rows()
    want = by_hand(model, ids, prepend)
    encoder = EncoderFromDecoder(model, "F*", prepend=prepend)
    with torch.no_grad():
        got = encoder(ids).last_hidden_state
        plain = EncoderFromDecoder(model, "F*")(ids).last_hidden_state
    assert (got - want).abs().max() <= 1e-5
    assert (got - plain)[:, 2:].abs().max() > 1e-3  # the placeholder changes what the later tokens see


def test_an_integer_means_layers_one_to_k_and_the_plan_says_so():
    assert check_prepend(3, 4) == (1, 4)
    assert check_prepend(0, 4) is None and check_prepend(None, 4) is None
    plan = parse_spec("F* | M0B*2").resolve(4, prepend=2)
    assert plan.prepend == (1, 3) and plan.name == "F* | M0B*2 @ prepend 1..2"
    assert [s.layer for s in plan.steps if isinstance(s, Prepend)] == [1, 2]
    # each Prepend step comes right before its layer's step on the main stack
    for i, step in enumerate(plan.steps):
        if isinstance(step, Prepend):
            assert plan.steps[i + 1].layer == step.layer and plan.steps[i + 1].role == "stack"
    assert "prepend main before layer 1" in plan.table()


@pytest.mark.parametrize(
    "prepend, error, words",
    [
        (4, ValueError, "give 1 to 3"),
        ((2, 2), ValueError, "start < stop"),
        ((0, 5), ValueError, "stop <= 4"),
        ((-1, 2), ValueError, "0 <= start"),
        (True, TypeError, "prepend must be"),
        ("3", TypeError, "prepend must be"),
        ((1, 2, 3), TypeError, "prepend must be"),
    ],
)
def test_a_range_that_does_not_fit_is_refused(prepend, error, words):
    with pytest.raises(error, match=words):
        parse_spec("F*").resolve(4, prepend=prepend)


def test_with_an_exit_the_range_must_fit_the_layers_that_run():
    with pytest.raises(ValueError, match="give 1 to 1"):
        parse_spec("F*").resolve(4, exit_layer=2, prepend=2)
    assert parse_spec("F*").resolve(4, exit_layer=3, prepend=2).name == "F* @ exit 3 @ prepend 1..2"


def padded(ids, lengths, side):
    out = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for r, n in enumerate(lengths):
        sl = slice(0, n) if side == "right" else slice(ids.shape[1] - n, None)
        out[r, sl], mask[r, sl] = ids[r, :n], 1
    return out, mask


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=6, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    side=st.sampled_from(["right", "left"]),
    route=st.sampled_from([(False, False), (True, False), (True, True)]),  # (fast_attention, pack_padding)
)
def test_every_kind_and_route_equals_each_row_alone_on_the_dense_path(spec, lengths, side, route):
    model = tiny_decoder("llama")
    ids = rows(len(lengths), 9, seed=sum(lengths))
    batch_ids, mask = padded(ids, lengths, side)
    fast, pack = route
    encoder = EncoderFromDecoder(model, spec, prepend=(1, 3), fast_attention=fast, pack_padding=pack)
    dense = EncoderFromDecoder(model, spec, prepend=(1, 3), fast_attention=False)
    with torch.no_grad():
        got = encoder(batch_ids, mask).last_hidden_state
        for r, n in enumerate(lengths):
            alone = dense(ids[r : r + 1, :n]).last_hidden_state[0]
            row = got[r][mask[r].bool()]
            assert (row - alone).abs().max() <= 1e-4, (r, n)


def test_specs_that_prepend_over_different_layers_share_a_batch_and_equal_separate_runs():
    model = tiny_decoder("qwen3")
    encoder = EncoderFromDecoder(model, "F*", prepend=2)
    ids, mask = padded(rows(3, 8), [8, 5, 3], "right")
    plans = [encoder.plan_for("F*", prepend=p) for p in (1, 2, (1, 4))] + [encoder.plan_for("F* | M0B*2")]
    with torch.no_grad():
        together = encoder.forward_specs(ids, mask, plans)
        for plan in plans:
            alone = EncoderFromDecoder(model, plan.spec, prepend=plan.prepend)(ids, mask).last_hidden_state
            assert (together[plan.name] - alone)[mask.bool()].abs().max() <= 1e-5, plan.name
    assert len(set(together)) == 4


def test_plans_that_prepend_and_plans_that_do_not_cannot_share_a_batch():
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer(), prepend=2)
    with pytest.raises(ValueError, match="cannot share a batch"):
        encoder.forward_specs(rows(), None, ["F*", encoder.plan_for("F*", prepend=0)])
    with pytest.raises(ValueError, match="disagree"):
        encoder.encode_specs([encoder.plan_for("F*", prepend=0)], TEXTS)


def test_encode_puts_the_placeholder_after_the_sink_and_never_pools_it():
    model, tok = tiny_decoder("llama"), tiny_tokenizer()
    encoder = EncoderFromDecoder(model, "F* | M0B*2", tok, prepend=2)
    assert encoder.sink_ids() == [1, 1]
    got = encoder.encode(TEXTS, batch_size=3)
    for text, vector in zip(TEXTS, got, strict=True):
        ids = torch.tensor([[1, 1, *tok(text, add_special_tokens=False)["input_ids"]]])
        with torch.no_grad():
            states = encoder(ids).last_hidden_state[0]
        np.testing.assert_allclose(vector, states[2:].mean(0).numpy(), atol=1e-5)  # text tokens only
    plain = EncoderFromDecoder(model, "F* | M0B*2", tok).encode(TEXTS)
    assert np.abs(got - plain).max() > 1e-3


def test_a_last_token_template_reads_the_state_that_fed_the_placeholder():
    from nosink.models.texts import Template

    tok = tiny_tokenizer()
    encoder = EncoderFromDecoder(tiny_decoder("qwen2"), "F* | M0B*2", tok, prepend=(0, 4))
    got = encoder.encode(["the cat sat"], template=Template("what is {text} and why", target="last"))
    ids = torch.tensor([[1, 1, *tok("what is the cat sat and why", add_special_tokens=False)["input_ids"]]])
    with torch.no_grad():
        want = encoder(ids).last_hidden_state[0, -1]
    np.testing.assert_allclose(got[0], want.numpy(), atol=1e-5)


def test_prepending_needs_a_sink_token_and_says_which():
    model = tiny_decoder("llama")
    encoder = EncoderFromDecoder(model, "F*", tiny_tokenizer(bos=False), prepend=2)
    with pytest.raises(ValueError, match="sink_token='</s>'"):
        encoder.encode(TEXTS)
    fixed = EncoderFromDecoder(model, "F*", tiny_tokenizer(bos=False), prepend=2, sink_token="</s>")
    assert fixed.sink_ids() == [2, 2] and fixed.encode(TEXTS).shape == (4, 32)


def test_saved_and_loaded_it_keeps_its_range_and_vectors(tmp_path):
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F* | M0B*2", tiny_tokenizer(), prepend=(1, 3))
    encoder.save_pretrained(tmp_path / "enc")
    loaded = EncoderFromDecoder.from_pretrained(tmp_path / "enc")
    assert loaded.prepend == (1, 3) and loaded.plan.name == "F* | M0B*2 @ prepend 1..2"
    np.testing.assert_allclose(loaded.encode(TEXTS), encoder.encode(TEXTS), atol=1e-6)
    assert EncoderFromDecoder.from_pretrained(tmp_path / "enc", prepend=0).prepend is None


def test_a_saved_range_that_is_not_two_layer_numbers_is_named(tmp_path):
    import json

    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer(), prepend=2)
    encoder.save_pretrained(tmp_path / "enc")
    meta = json.loads((tmp_path / "enc" / "nosink.json").read_text())
    meta["prepend"] = "1..2"
    (tmp_path / "enc" / "nosink.json").write_text(json.dumps(meta))
    with pytest.raises(OSError, match="'prepend' must be"):
        EncoderFromDecoder.from_pretrained(tmp_path / "enc")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA kernels and packing of the fast path")
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("side", ["right", "left"])
def test_on_cuda_the_kernels_equal_the_dense_path(spec, side):
    model = tiny_decoder("llama", dtype=torch.bfloat16).cuda()
    ids, mask = padded(rows(6, 20, seed=3), [20, 13, 5, 2, 17, 9], side)
    ids, mask = ids.cuda(), mask.cuda()
    fast = EncoderFromDecoder(model, spec, prepend=2, cuda_graphs=False)  # the fast path: CUDA's default
    dense = EncoderFromDecoder(model, spec, prepend=2, fast_attention=False)
    with torch.inference_mode():
        got, want = fast(ids, mask).last_hidden_state, dense(ids, mask).last_hidden_state
    real = mask.bool()
    scale = max(1.0, float(want[real].float().abs().max()))
    torch.testing.assert_close(got[real].float(), want[real].float(), atol=0.03 * scale, rtol=0)
