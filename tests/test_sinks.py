"""Attention-sink diagnostics on tiny random models, and a planted sink."""

import numpy as np
import pytest
import torch
import transformers as tf
from tiny import tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder, parse_spec
from nosink.evals.sinks import (
    attention_maps,
    neighbours,
    plot_attention_grid,
    plot_sink_profiles,
    sink_profile,
    suggest_spec,
    write_profile,
)
from nosink.layerspec import build_mask

pytest.importorskip("matplotlib")  # the eval extra

TEXTS = ["the cat sat on the mat", "paris is the capital of france", "we love very good food and money"]


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma3_text"])
@pytest.mark.parametrize("spec", ["F*", "M0B*", "F*2 | R | M1B", "F* | INTER(M0B) | EXTEND(R)"])
def test_maps_are_row_stochastic_and_zero_where_the_mask_forbids(family, spec):
    encoder = EncoderFromDecoder(tiny_decoder(family), spec, tiny_tokenizer())
    maps = attention_maps(encoder, TEXTS)
    assert len(maps) == len(encoder.plan.layer_steps)
    for step, m in maps:
        np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-5)
        window = encoder.parts.windows[step.layer] if step.kind.is_causal else None  # Gemma3's sliding layers
        allowed = build_mask(step.kind, torch.ones(1, m.shape[0], dtype=torch.long), window)[0, 0].numpy()
        assert np.all(m[~allowed] == 0), step
        assert np.all(m[allowed] > 0), step


def test_the_tool_switches_to_eager_by_itself_and_says_so(caplog):
    encoder = EncoderFromDecoder(tiny_decoder("llama", "sdpa"), "F*", tiny_tokenizer())
    with caplog.at_level("WARNING"):
        attention_maps(encoder, TEXTS)
    assert "attention weights need eager attention" in caplog.text
    assert encoder.parts.attn_implementation == "sdpa"  # switched back


def planted_sink_gpt2() -> EncoderFromDecoder:
    """GPT-2 whose every query attends to any token with id 1 (the BOS used as sink token) in layers 1 and 2."""
    config = tf.GPT2Config(vocab_size=96, n_embd=32, n_layer=4, n_head=4, n_positions=64, bos_token_id=1,
                           eos_token_id=2, attn_implementation="eager")  # fmt: skip
    torch.manual_seed(0)
    model = tf.AutoModel.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        model.wte.weight[:, 0] = 0.0
        model.wte.weight[1, 0] = 30.0  # only the sink token has dimension 0
        model.wpe.weight[:, 0] = 0.0
        for i in (1, 2):
            attn = model.h[i].attn.c_attn  # Conv1D: (in, 3 * out) = q | k | v
            attn.weight[:, :64] = 0.0
            attn.bias[:32] = 1.0  # every query is the all-ones vector
            attn.bias[32:64] = 0.0
            attn.weight[0, 32:64] = 5.0  # keys: large only where dimension 0 is
    return EncoderFromDecoder(model, "F*", tiny_tokenizer())


def test_a_planted_sink_is_detected_and_masking_it_removes_it():
    encoder = planted_sink_gpt2()
    profile = sink_profile(encoder, TEXTS, threshold=0.5)
    assert [p.layer for p in profile if p.is_sink] == [1, 2]
    assert all(p.shares[0] > 0.9 for p in profile if p.is_sink)
    masked = EncoderFromDecoder(encoder.decoder, "M0B*", encoder.tokenizer)
    assert not any(p.is_sink for p in sink_profile(masked, TEXTS, threshold=0.5))
    suggestion = suggest_spec(profile, depth=4)
    assert (suggestion.k, suggestion.k0) == (3, 1) and str(suggestion.spec) == "F* | B*2 | M0B"
    assert "start at layer 1" in suggestion.reason


def test_suggestion_needs_the_stock_profile_and_has_neighbours():
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "M0B*", tiny_tokenizer())
    with pytest.raises(ValueError, match="unconverted model"):
        suggest_spec(sink_profile(encoder, TEXTS), depth=4)
    near = neighbours(suggest_spec(sink_profile(planted_sink_gpt2(), TEXTS), depth=4), depth=4, step=1)
    # (k, k0) = (3, 1) and its neighbours at k +- 2, k0 +- 1 that fit 1 <= k0 <= k <= 4
    assert [str(s) for s in near] == ["F* | M0B", "F* | B*2 | M0B", "F* | B | M0B*2"]
    assert parse_spec("F* | B*2 | M0B") in near
    for s in near:  # each resolves to k converted top layers, the top k0 of them hiding the sink
        stack = [str(k) for k in s.resolve(4).stack]
        assert stack in (["F", "F", "F", "M0B"], ["F", "B", "B", "M0B"], ["F", "B", "M0B", "M0B"]), stack


def test_figures_and_table(tmp_path):
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F* | M0B*2", tiny_tokenizer())
    maps = attention_maps(encoder, TEXTS)
    png = plot_attention_grid(maps, tmp_path / "maps.png", title="t")
    svg = plot_attention_grid(maps, tmp_path / "maps.svg", layers=[2, 3])
    assert png.read_bytes()[:4] == b"\x89PNG" and b"<svg" in svg.read_bytes()[:500]
    profile = sink_profile(encoder, TEXTS)
    table = write_profile(profile, tmp_path / "sinks.csv").read_text().splitlines()
    assert table[0] == "step,layer,kind,role,is_sink,share_pos0,share_pos1,share_pos2"
    assert len(table) == 1 + 4
    assert plot_sink_profiles({"F* | M0B*2": profile}, tmp_path / "p.png", threshold=0.5).is_file()
    with pytest.raises(ValueError, match="at least one text"):
        attention_maps(encoder, [])


def test_refining_a_suggestion_runs_a_small_search(tmp_path):
    pytest.importorskip("seqeval")
    from test_ner import make_sentences

    from nosink.evals.run_sweeps import refine_suggestion

    encoder = planted_sink_gpt2()
    suggestion = suggest_spec(sink_profile(encoder, TEXTS), depth=4)
    best, tried = refine_suggestion(
        encoder, suggestion, make_sentences(30, seed=1), make_sentences(10, seed=2), tmp_path, step=1,
        show_progress_bar=False,
    )  # fmt: skip
    assert suggestion.spec in [c.spec for c in tried] and 1 < len(tried) <= 9
    assert best.scores["f1"] == max(c.scores["f1"] for c in tried)
    for c in tried:
        stack = c.spec.resolve(4).stack
        assert (c.k, c.k0) == (sum(not k.is_causal for k in stack), sum(k.sink is not None for k in stack))
    assert (tmp_path / "suggestion_search.json").is_file()


def test_positions_must_be_positive():
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer())
    with pytest.raises(ValueError, match="positions must be at least 1"):
        sink_profile(encoder, TEXTS, positions=0)


def test_one_string_is_one_text():
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F* | M0B*2", tiny_tokenizer())
    (_, alone), *_ = attention_maps(encoder, "the cat sat on the mat")
    (_, listed), *_ = attention_maps(encoder, ["the cat sat on the mat"])
    assert alone.shape == (7, 7)  # the sink token and six words, not one text per character
    np.testing.assert_array_equal(alone, listed)
