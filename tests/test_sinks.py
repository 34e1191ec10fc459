"""Attention-sink diagnostics on tiny random models, and a planted sink."""

import numpy as np
import pytest
import torch
import transformers as tf
from tiny import tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder, parse_spec
from nosink.evals.sinks import (
    LayerSinks,
    attention_maps,
    choose_sink_token,
    neighbours,
    plot_attention_grid,
    plot_sink_profiles,
    profile_ready,
    sink_candidates,
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
    caplog.clear()
    with caplog.at_level("WARNING"):  # once per decoder: another encoder over it (a sink-token search) is quiet
        attention_maps(EncoderFromDecoder.from_model(encoder.decoder, "F*", encoder.tokenizer), TEXTS)
    assert "eager attention" not in caplog.text


def planted_sink_gpt2(sink_id: int = 1) -> EncoderFromDecoder:
    """GPT-2 whose every query attends to any token with id ``sink_id`` (1: the BOS token, the default sink token)
    in layers 1 and 2."""
    config = tf.GPT2Config(vocab_size=96, n_embd=32, n_layer=4, n_head=4, n_positions=64, bos_token_id=1,
                           eos_token_id=2, attn_implementation="eager")  # fmt: skip
    torch.manual_seed(0)
    model = tf.AutoModel.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        model.wte.weight[:, 0] = 0.0
        model.wte.weight[sink_id, 0] = 30.0  # only the sink token has dimension 0
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
    # shares 0.26, 1.0, 1.0, 0.26: the running sum passes half the total (1.26) at layer 1
    assert "half the first-token attention (summed over layers) lies in layers 1..3" in suggestion.reason
    assert "2 of 4 layers put >= 50% of their attention on the first token" in suggestion.reason


def stock_profile(first_token_shares, threshold=0.5):
    """A synthetic profile of the unconverted model (F*): one stack layer per share on the first token."""
    return [LayerSinks(i, i, "F", "stack", (x, 0.05), x >= threshold) for i, x in enumerate(first_token_shares)]


# SmolLM2-135M-like (docs/results/sinks-profiles): a partial sink hovering around 0.5 in layers 3-9,
# dispersed layers 10-11, sink layers 12-29 with one layer (16) just under the threshold.
SMOLLM2_LIKE = [
    float(x)
    for x in (
        "0.11 0.05 0.24 0.50 0.49 0.51 0.51 0.53 0.50 0.48 0.11 0.05 "  # layers 0-11
        "0.60 0.54 0.75 0.70 0.496 0.79 0.76 0.61 0.88 0.69 0.69 0.89 0.92 0.76 0.78 0.58 0.74 0.62"  # 12-29
    ).split()
]


GEMMA_LIKE = [
    0.53,
    0.80,
    0.36,
    0.53,
    0.36,
    0.89,
    0.57,
    0.35,
    0.38,
    0.56,
    0.51,
    0.72,
    0.85,
    0.65,
    0.73,
    0.49,
    0.62,
    0.76,
]


def test_profile_ready_keeps_the_texts_the_profile_can_read():
    encoder = planted_sink_gpt2()
    short, long = "cat", "the cat sat on the mat"  # the short one: at most 3 tokens with the sink token
    with pytest.raises(ValueError, match="at most 3 tokens"):
        sink_profile(encoder, [long, short])
    assert profile_ready(encoder, [short, long, short]) == [long] and profile_ready(encoder, []) == []
    assert sink_profile(encoder, profile_ready(encoder, [long, short]))  # what it keeps, the profile reads


def test_k_is_the_layers_that_hold_the_upper_half_of_the_sink_mass():
    assert len(SMOLLM2_LIKE) == 30
    suggestion = suggest_spec(stock_profile(SMOLLM2_LIKE), depth=30)
    # Sum of the shares: 18.8; the running sum reaches 9.4 at layer 18. The run-of-sinks rule gave k = 18,
    # the first-layer-over-the-threshold rule k = 27.
    assert (suggestion.k, suggestion.k0) == (12, 2) and str(suggestion.spec) == "F* | B*10 | M0B*2"
    assert "lies in layers 18..29" in suggestion.reason
    # gemma-3-270m-like: sink layers scattered from layer 0; the mass is spread, its midpoint at layer 9.
    gemma = suggest_spec(stock_profile(GEMMA_LIKE), depth=18)
    assert (gemma.k, gemma.k0) == (9, 2)


def test_k_does_not_hang_on_the_threshold_or_on_the_scale_of_the_shares():
    base = suggest_spec(stock_profile(SMOLLM2_LIKE), depth=30)
    for threshold in (0.3, 0.85, 0.95):  # it only counts sink layers in the reason
        other = suggest_spec(stock_profile(SMOLLM2_LIKE, threshold), depth=30, threshold=threshold)
        assert (other.k, other.k0) == (base.k, base.k0)
    assert "0 of 30 layers put >= 95%" in suggest_spec(stock_profile(SMOLLM2_LIKE), depth=30, threshold=0.95).reason
    # Shares scaled down (weaker sinks everywhere, as on texts of another length) move nothing.
    weaker = suggest_spec(stock_profile([0.4 * x for x in SMOLLM2_LIKE]), depth=30)
    assert (weaker.k, weaker.k0) == (base.k, base.k0)
    # Qwen-like: no layer over 0.5 (the run-of-sinks rule then fell back to half), the mass slightly higher up.
    qwen = [0.25, 0.21, 0.33, 0.24, 0.25, 0.22, 0.31, 0.24, 0.34, 0.21, 0.18, 0.23]
    qwen += [0.26, 0.19, 0.25, 0.22, 0.18, 0.19, 0.11, 0.14, 0.24, 0.31, 0.45, 0.49]
    assert suggest_spec(stock_profile(qwen), depth=24).k == 12


def test_flat_and_empty_profiles_convert_the_top_half_and_one_layer_always_stays_forward():
    assert suggest_spec(stock_profile([0.5] * 30), depth=30).k == 15
    assert suggest_spec(stock_profile([0.5] * 7), depth=7).k == 4  # layers 3..6
    none = suggest_spec(stock_profile([0.0] * 30), depth=30)
    assert (none.k, none.k0) == (15, 3) and none.reason.startswith("no attention on the first token")
    bottom = suggest_spec(stock_profile([0.9] + [0.01] * 9), depth=10)  # all the mass in layer 0
    assert bottom.k == 9 and str(bottom.spec.resolve(10).stack[0]) == "F"
    top = suggest_spec(stock_profile([0.01] * 9 + [0.9]), depth=10)
    assert (top.k, top.k0) == (1, 1) and str(top.spec) == "F* | M0B"


@pytest.mark.parametrize(
    "k, k0", [(1, 1), (2, 1), (7, 1), (8, 2), (12, 2), (13, 3), (18, 4), (20, 4), (23, 5), (29, 6)]
)
def test_k0_is_a_fifth_of_k_rounded_and_at_least_one(k, k0):
    # All the mass in layer 30 - k: the top k layers are converted (the earlier rule's k0 was k // 2).
    suggestion = suggest_spec(stock_profile([0.0] * (30 - k) + [0.9] + [0.0] * (k - 1)), depth=30)
    assert (suggestion.k, suggestion.k0) == (k, k0)
    expected = f"F* | B*{k - k0} | M0B*{k0}" if k > k0 else f"F* | M0B*{k0}"
    assert suggestion.spec.resolve(30).stack == parse_spec(expected).resolve(30).stack


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


def _shares(profile):
    return np.array([p.shares for p in profile])


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
@pytest.mark.parametrize("spec", ["F*", "F* | B*2 | M0B"])
def test_a_profile_is_the_mean_of_the_one_text_profiles(family, spec):
    encoder = EncoderFromDecoder(tiny_decoder(family, "eager"), spec, tiny_tokenizer())
    texts = [*TEXTS, "the cat sat", "we love paris and london but not the river bank in the city"]
    alone = np.mean([_shares(sink_profile(encoder, [t])) for t in texts], axis=0)
    for batch_size in (1, 2, len(texts)):  # padded batches of texts of different lengths
        together = sink_profile(encoder, texts, batch_size=batch_size)
        np.testing.assert_allclose(_shares(together), alone, rtol=1e-5, atol=1e-6)
    assert [p.is_sink for p in sink_profile(encoder, texts)] == list(alone[:, 0] >= 0.5)


def test_a_short_text_joining_does_not_cut_the_others():
    encoder = planted_sink_gpt2()
    short = "the cat sat"  # 4 tokens with the sink token; TEXTS have 7 to 8
    before = _shares(sink_profile(encoder, TEXTS))
    after = _shares(sink_profile(encoder, [*TEXTS, short]))
    expected = (len(TEXTS) * before + _shares(sink_profile(encoder, [short]))) / (len(TEXTS) + 1)
    np.testing.assert_allclose(after, expected, rtol=1e-5, atol=1e-6)
    # Cutting the long texts to the short one's length (the earlier profile) gives other shares.
    cut = _shares(sink_profile(encoder, TEXTS, max_tokens=4))
    assert np.abs(cut - before).max() > 1e-3
    # max_tokens cuts each text on its own: a text shorter than it keeps its length.
    np.testing.assert_allclose(_shares(sink_profile(encoder, TEXTS, max_tokens=64)), before, rtol=1e-6)


def test_a_text_too_short_for_the_positions_is_named():
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer())
    with pytest.raises(ValueError, match=r"text 1 \(3 tokens: 'the cat'\).*lower positions"):
        sink_profile(encoder, [TEXTS[0], "the cat"], positions=3)
    assert len(sink_profile(encoder, [TEXTS[0], "the cat"], positions=2)) == 4
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        sink_profile(encoder, TEXTS, batch_size=0)


@pytest.mark.parametrize(("planted", "chosen"), [(1, "auto"), (2, "</s>")])
def test_the_sink_token_chosen_is_the_first_token_the_model_attends_most(planted, chosen):
    encoder = planted_sink_gpt2(sink_id=planted)  # the sink planted on the BOS token <s>, or on the EOS token </s>
    choice = choose_sink_token(encoder, TEXTS)
    assert choice.sink_token == chosen and set(choice.masses) == {"auto", "</s>"} and choice.texts == len(TEXTS)
    assert choice.masses[chosen] > 0.45 > 0.3 > min(choice.masses.values())  # layers 1-2 of 4 near 1.0, or none
    probe = EncoderFromDecoder.from_model(encoder.decoder, "F*", encoder.tokenizer, sink_token="</s>")
    own = [layer.shares[0] for layer in sink_profile(probe, TEXTS, positions=1)]
    assert choice.masses["</s>"] == pytest.approx(sum(own) / len(own))  # a mass is its own profile's mean share


def test_an_earlier_candidate_within_the_tolerance_wins():
    encoder = planted_sink_gpt2(sink_id=2)  # </s> is the sink: far above <s> ("auto")
    assert choose_sink_token(encoder, TEXTS).sink_token == "</s>"
    assert choose_sink_token(encoder, TEXTS, tolerance=1.0).sink_token == "auto"  # any mass is within 1.0
    assert choose_sink_token(encoder, TEXTS, ["</s>", "auto"], tolerance=1.0).sink_token == "</s>"


def test_sink_candidates_and_a_choice_with_nothing_to_choose():
    assert sink_candidates(tiny_tokenizer()) == ["auto", "</s>"]  # the BOS token is "auto"; then the EOS token
    encoder = planted_sink_gpt2()
    assert choose_sink_token(encoder, TEXTS, candidates=["</s>", "none"]).masses.keys() == {"</s>"}
    with pytest.raises(ValueError, match="no candidate sink token"):
        choose_sink_token(encoder, TEXTS, candidates=["none"])  # no token: the text's first token would be the sink
