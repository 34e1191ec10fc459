"""Early exit: the plan stops after the decoder's first m layers, and the layers above never run."""

import pytest
import torch
from test_encoder import IDS, MASK, POS, REAL, run_layers
from tiny import CONFIGS, tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder, SpecError, parse_spec

FAMILIES = sorted(CONFIGS)
TEXTS = ["the cat sat on the mat", "a dog ran in the park", "paris is the capital of france", "i like food"]


def layers_run(model, encoder, *args):
    """Which decoder layers ran (in order) while ``encoder.forward_specs`` or ``encoder(...)`` ran on ``args``."""
    ran = []
    hook = lambda i: lambda mod, a, o: ran.append(i)  # noqa: E731
    handles = [layer.register_forward_hook(hook(i)) for i, layer in enumerate(model.layers)]
    try:
        with torch.no_grad():
            out = encoder.forward_specs(IDS, MASK, *args) if args else encoder(IDS, MASK)
    finally:
        for h in handles:
            h.remove()
    return ran, out


def stock_hidden_states(model):
    with torch.no_grad():
        return model(input_ids=IDS, attention_mask=MASK, position_ids=POS, output_hidden_states=True).hidden_states


@pytest.mark.parametrize("family", FAMILIES)
def test_exit_equals_the_stock_models_hidden_state_at_that_layer(family):
    model = tiny_decoder(family)
    stock = stock_hidden_states(model)  # embeddings, then after each layer; the last one after the final norm
    for m in (1, 2, 3):
        encoder = EncoderFromDecoder(model, "F*", exit_layer=m)
        with torch.no_grad():
            out = encoder(IDS, MASK, output_hidden_states=True)
            normed = encoder.parts.norm(stock[m])
        # hidden_states carries no final norm, as at the top; last_hidden_state is the exit's state, normed
        assert len(out.hidden_states) == 1 + m
        assert (out.hidden_states[-1] - stock[m])[REAL].abs().max() <= 1e-5
        assert (out.last_hidden_state - normed)[REAL].abs().max() <= 1e-5
        assert (out.last_hidden_state - stock[-1])[REAL].abs().max() > 1e-3  # not the top layer's output
    full = EncoderFromDecoder(model, "F*", exit_layer=4)
    with torch.no_grad():
        assert (full(IDS, MASK).last_hidden_state - stock[-1])[REAL].abs().max() <= 1e-5


def test_layers_above_the_exit_never_run():
    model = tiny_decoder("llama")
    encoder = EncoderFromDecoder(model, "F* | M0B", exit_layer=2)
    assert layers_run(model, encoder)[0] == [0, 1]


@pytest.mark.parametrize(
    "spec, kinds, layers",
    [
        ("F* | M0B*2", ["FWD", "MASK0", "MASK0"], [0, 1, 2]),
        ("F* | B", ["FWD", "FWD", "BIDIR"], [0, 1, 2]),
        ("F* | EXTEND(R)", ["FWD", "FWD", "FWD", "BWD"], [0, 1, 2, 2]),  # EXTEND reuses the exit's layer
    ],
)
def test_exit_with_converted_layers_equals_a_hand_built_reference(spec, kinds, layers):
    model = tiny_decoder("llama", "eager")
    with torch.no_grad():
        expected = model.norm(run_layers(model, model.embed_tokens(IDS), kinds, layers))
        got = EncoderFromDecoder(model, spec, exit_layer=3)(IDS, MASK).last_hidden_state
    assert (got - expected)[REAL].abs().max() <= 1e-5


def test_plan_resolves_against_the_first_m_layers_and_keeps_the_decoders_identity():
    plan = parse_spec("F* | M0B*4").resolve(22, exit_layer=20)
    assert [s.layer for s in plan.layer_steps] == list(range(20))
    assert [str(k) for k in plan.stack] == ["F"] * 16 + ["M0B"] * 4
    assert (plan.depth, plan.layers, plan.exit_layer) == (22, 20, 20)
    assert plan.name == "F* | M0B*4 @ exit 20"
    assert parse_spec("F* | M0B*4").resolve(22).name == "F* | M0B*4"
    # windows are the whole decoder's; the steps keep those of the layers they run
    windows = (3, None, 3, None, 3, None)
    plan = parse_spec("F*").resolve(6, windows=windows, exit_layer=3)
    assert plan.windows == windows
    assert [s.window for s in plan.layer_steps] == [3, None, 3]


def test_out_of_range_exits_and_specs_that_do_not_fit_them_are_errors():
    spec = parse_spec("F* | M0B*4")
    for bad in (0, -1, 23, True, 2.0, "3"):
        with pytest.raises(ValueError, match="exit_layer"):
            spec.resolve(22, exit_layer=bad)
    with pytest.raises(SpecError, match=r"model has 10.*exit_layer=10 keeps the first 10 of 22 layers"):
        parse_spec("F*12 | B*10").resolve(22, exit_layer=10)
    with pytest.raises(SpecError, match="exit_layer=3 keeps the first 3 of 22"):
        spec.resolve(22, exit_layer=3)  # M0B*4 needs 4 layers
    model = tiny_decoder("llama")
    with pytest.raises(ValueError, match="exit_layer must be from 1 to the model's 4 layers, got 5"):
        EncoderFromDecoder(model, "F*", exit_layer=5)
    encoder = EncoderFromDecoder(model, "F*", exit_layer=2)
    with pytest.raises(ValueError, match="already resolved"):
        encoder.plan_for(encoder.plan, exit_layer=3)


def test_forward_specs_shares_lower_layers_across_exits():
    model = tiny_decoder("qwen2")
    encoder = EncoderFromDecoder(model, "F*")
    plans = [encoder.plan_for(s, exit_layer=m) for s, m in [("F*", 1), ("F*", 3), ("F* | B", 3), ("F*", 4)]]
    calls, shared = layers_run(model, encoder, plans)
    assert list(shared) == ["F* @ exit 1", "F* @ exit 3", "F* | B @ exit 3", "F* @ exit 4"]
    assert sorted(calls) == [0, 1, 2, 2, 3]  # layers 0-1 once, layer 2 as F and as B, layer 3 once
    for plan in plans:
        alone = EncoderFromDecoder(model, plan.spec, exit_layer=plan.exit_layer)
        with torch.no_grad():
            assert torch.equal(shared[plan.name], alone(IDS, MASK).last_hidden_state)


def test_encode_and_encode_specs_with_exits():
    model = tiny_decoder("llama")
    encoder = EncoderFromDecoder(model, "F* | M0B", tiny_tokenizer(), exit_layer=3)
    assert "exit_layer=3" in repr(encoder)
    vectors = encoder.encode(TEXTS)
    # specs given as strings exit where the encoder does; plans keep their own exit
    sweep = encoder.encode_specs(["F* | M0B", encoder.plan_for("F*", exit_layer=2), encoder.plan_for("F*", 4)], TEXTS)
    assert list(sweep) == ["F* | M0B @ exit 3", "F* @ exit 2", "F* @ exit 4"]
    assert torch.equal(torch.from_numpy(sweep["F* | M0B @ exit 3"]), torch.from_numpy(vectors))
    full = EncoderFromDecoder(model, "F*", tiny_tokenizer()).encode(TEXTS)
    assert abs(sweep["F* @ exit 4"] - full).max() <= 1e-6
    cut = EncoderFromDecoder(model, "F*", tiny_tokenizer(), exit_layer=2).encode(TEXTS)
    assert abs(sweep["F* @ exit 2"] - cut).max() <= 1e-6
    assert abs(cut - full).max() > 1e-3


def test_a_saved_encoder_keeps_its_exit(tmp_path):
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer(), exit_layer=2)
    encoder.save_pretrained(tmp_path / "enc")
    loaded = EncoderFromDecoder.from_pretrained(tmp_path / "enc")
    assert (loaded.exit_layer, loaded.plan.name) == (2, "F* @ exit 2")
    assert abs(loaded.encode(TEXTS) - encoder.encode(TEXTS)).max() == 0


def test_from_pretrained_takes_an_exit_and_checks_it_before_loading_weights(tmp_path, monkeypatch):
    from nosink.models import loading

    folder = tmp_path / "enc"
    EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer()).save_pretrained(folder)
    loaded = EncoderFromDecoder.from_pretrained(folder, exit_layer=2)
    assert (loaded.exit_layer, loaded.plan.name) == (2, "F* @ exit 2")
    expected = EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer(), exit_layer=2).encode(TEXTS)
    assert abs(loaded.encode(TEXTS) - expected).max() <= 1e-6
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("weights loaded before the check"))
    with pytest.raises(ValueError, match="exit_layer must be from 1 to the model's 4 layers, got 9"):
        EncoderFromDecoder.from_pretrained(folder, exit_layer=9)
    with pytest.raises(SpecError, match="exit_layer=1 keeps the first 1 of 4"):
        EncoderFromDecoder.from_pretrained(folder, spec="F* | B*2", exit_layer=1)


def test_evaluations_file_results_of_an_encoder_that_exits_under_its_plan_name():
    from nosink.evals.classify import Example, evaluate_classification
    from nosink.evals.ner import Sentence, word_features

    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F* | B", tiny_tokenizer(), exit_layer=2)
    examples = [Example(t, label) for t, label in zip(TEXTS * 2, "abab" * 2, strict=True)]
    (result,) = evaluate_classification(encoder, examples, examples, smote=False)
    assert result.spec == "F* | B @ exit 2"
    sentences = [Sentence(("the", "cat"), ("O", "O"))]
    feats, _ = word_features(encoder, sentences, ["F* | B"], show_progress_bar=False)
    other = EncoderFromDecoder(tiny_decoder("llama"), "F* | B", tiny_tokenizer(), exit_layer=2)
    assert list(feats) == ["F* | B @ exit 2"]
    assert list(word_features(other, sentences, ["F*"], show_progress_bar=False)[0]) == ["F* @ exit 2"]


def test_mteb_results_of_an_encoder_that_exits_are_filed_apart_and_its_sweep_cache_reads_them():
    from nosink.evals.mteb_model import NosinkMTEBEncoder, SpecSweepCache

    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F* | B", tiny_tokenizer(), exit_layer=2)
    assert NosinkMTEBEncoder(encoder).experiment_kwargs["exit_layer"] == 2
    assert "exit_layer" not in NosinkMTEBEncoder(EncoderFromDecoder(encoder.decoder, "F*")).experiment_kwargs
    cache = SpecSweepCache(encoder, ["F* | B", "F*"])
    for spec in ("F* | B", "F*"):
        alone = EncoderFromDecoder(encoder.decoder, spec, tiny_tokenizer(), exit_layer=2).encode(TEXTS)
        assert abs(cache.get(spec, TEXTS, None, False) - alone).max() <= 1e-6


def test_a_drawn_plan_that_exits_is_as_tall_as_the_layers_it_runs():
    from nosink.layerspec.draw import plan_svg

    spec = parse_spec("F* | EXTEND(R)")
    cut, small = plan_svg(spec.resolve(8, exit_layer=3)), plan_svg(spec.resolve(3))
    assert cut == small  # the decoder cut after layer 3 draws as a 3-layer decoder
    assert cut != plan_svg(spec.resolve(8))
