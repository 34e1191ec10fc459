"""The selection stage: candidate specs read off a sink profile, the best on a small sample kept (tiny models)."""

import random

import numpy as np
import pytest
from test_sinks import GEMMA_LIKE, SMOLLM2_LIKE, TEXTS, planted_sink_gpt2, stock_profile
from test_study import WORDS, sts_task, tiny_encoder

from nosink import EncoderFromDecoder, parse_spec
from nosink.evals import stats, study
from nosink.evals.ner import Sentence
from nosink.evals.sinks import Suggestion, candidate_specs, select_spec, sink_profile, suggest_spec
from nosink.evals.study import ClassificationTask, NERStudy, ner_selection_for, selection_for, selection_sample
from nosink.layerspec import SpecError

SPECS = ["F* | M0B", "F* | B*2 | M0B", "F* | B | M0B*2"]  # all fit the 4-layer tiny decoder


def mass_k(shares, upper):
    """k from the running sum of the shares: the layers from where it first exceeds (1 - upper) of the total."""
    running = np.cumsum(shares)
    return len(shares) - int(np.argmax(running > (1 - upper) * running[-1]))


@pytest.mark.parametrize("profile", [SMOLLM2_LIKE, GEMMA_LIKE])
def test_candidates_convert_the_upper_half_two_thirds_and_third_of_the_sink_mass(profile):
    depth = len(profile)
    cands = candidate_specs(stock_profile(profile), depth)
    assert [c.k for c in cands] == [mass_k(profile, s) for s in (1 / 2, 2 / 3, 1 / 3)]
    midpoint = suggest_spec(stock_profile(profile), depth)  # the first candidate is the midpoint rule's spec
    assert (cands[0].spec, cands[0].k, cands[0].k0) == (midpoint.spec, midpoint.k, midpoint.k0)
    for c in cands:
        assert c.k0 == max(1, round(c.k / 5)) and str(c.spec) == str(parse_spec(f"F* | B*{c.k - c.k0} | M0B*{c.k0}"))
        assert f"layers {depth - c.k}..{depth - 1}" in c.reason
    # SmolLM2-like: the mass grows with depth, so a third of it sits in the top 8 layers, two thirds in the top 16.
    assert [c.k for c in candidate_specs(stock_profile(SMOLLM2_LIKE), 30)] == [12, 16, 8]


def test_equal_candidates_are_kept_once_and_shares_come_in_the_order_given():
    assert [c.k for c in candidate_specs(stock_profile([0.5, 0.5]), 2)] == [1]  # one layer always stays forward
    flat = candidate_specs(stock_profile([0.5] * 12), 12, shares=(0.25, 0.5, 0.5))
    assert [c.k for c in flat] == [3, 6]


def test_candidates_need_the_stock_profile_and_shares_between_0_and_1():
    with pytest.raises(ValueError, match="at least one share"):
        candidate_specs(stock_profile(SMOLLM2_LIKE), 30, shares=())
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            candidate_specs(stock_profile(SMOLLM2_LIKE), 30, shares=(0.5, bad))
    with pytest.raises(ValueError, match="unconverted model"):
        candidate_specs(stock_profile(SMOLLM2_LIKE), 29)


def norm_score(texts):
    """A score that tells the specs apart: the mean norm of the vectors."""
    return lambda vectors: float(np.linalg.norm(vectors(texts), axis=1).mean())


def test_selection_keeps_the_best_candidate_scored_on_vectors_equal_to_encoding_each_spec_alone():
    encoder, texts = tiny_encoder(), TEXTS + TEXTS[:1]  # a repeat is encoded once
    chosen = select_spec(encoder, SPECS, texts, norm_score(TEXTS), instruction="say: ")
    alone = {}
    for spec in SPECS:
        vectors = encoder.encode_specs([spec], TEXTS, "say: ", max_length=512)[str(parse_spec(spec))]
        alone[str(parse_spec(spec))] = float(np.linalg.norm(vectors, axis=1).mean())
    assert list(chosen.scores) == list(alone)
    for name, value in alone.items():
        assert chosen.scores[name] == pytest.approx(value, rel=1e-5)
    assert str(chosen.spec) == max(alone, key=lambda n: alone[n])
    assert chosen.texts_encoded == 3 and chosen.cost == 9
    # the reverse preference picks the worst
    worst = select_spec(encoder, SPECS, TEXTS, lambda v: -norm_score(TEXTS)(v), instruction="say: ")
    assert str(worst.spec) == min(alone, key=lambda n: alone[n])


def test_on_a_tie_the_earliest_candidate_wins():
    encoder = tiny_encoder()
    assert str(select_spec(encoder, SPECS, TEXTS, lambda v: 0.5).spec) == SPECS[0]
    assert str(select_spec(encoder, SPECS[::-1], TEXTS, lambda v: 0.5).spec) == SPECS[-1]
    suggestions = [Suggestion(parse_spec(s), 0, 0, "") for s in SPECS[1:]]  # candidate_specs' output is accepted
    assert str(select_spec(encoder, suggestions, TEXTS, lambda v: 1).spec) == SPECS[1]


def test_bad_input_is_named():
    encoder = tiny_encoder()
    with pytest.raises(ValueError, match="at least one candidate"):
        select_spec(encoder, [], TEXTS, lambda v: 0.0)
    with pytest.raises(ValueError, match="given twice"):
        select_spec(encoder, ["F* | M0B", "F*|M0B"], TEXTS, lambda v: 0.0)
    with pytest.raises(ValueError, match="needs the texts"):
        select_spec(encoder, SPECS, [], lambda v: 0.0)
    with pytest.raises(ValueError, match="finite number"):
        select_spec(encoder, SPECS, TEXTS, lambda v: float("nan"))
    with pytest.raises(ValueError, match="finite number"):
        select_spec(encoder, SPECS, TEXTS, lambda v: "high")
    with pytest.raises(ValueError, match="not among select_spec"):
        select_spec(encoder, SPECS, TEXTS, norm_score(["a text never encoded"]))
    with pytest.raises(SpecError):
        select_spec(encoder, ["F* | B*9"], TEXTS, lambda v: 0.0)  # 9 layers on a 4-layer decoder


def test_selection_sample_draws_from_the_choosing_split_only():
    task = sts_task(n_choose=10, n_report=12)
    small = selection_sample(task, 4, seed=0)
    assert len(small.choose) == 4 and set(small.choose) <= set(task.choose) and small.report == task.report
    assert selection_sample(task, 4, seed=0) == small and selection_sample(task, 50).choose == task.choose
    train = [(f"item {i}", "abc"[i % 3]) for i in range(30)]
    cls = ClassificationTask("tiny-cls", train, [("test", "a")])
    sample = selection_sample(cls, 9)
    assert len(sample.train) == 9 and set(sample.train) <= set(train)
    assert sorted(y for _, y in sample.train) == list("aaabbbccc")  # label-stratified
    with pytest.raises(ValueError, match="at least 2"):
        selection_sample(task, 1)


def test_selection_for_scores_the_profiles_candidates_on_the_sample():
    encoder = planted_sink_gpt2()
    task = sts_task(n_choose=10, n_report=4)
    profile = sink_profile(encoder, TEXTS)
    chosen, record = selection_for(encoder, profile, task, 6)
    cands = candidate_specs(profile, 4)
    assert [c["spec"] for c in record["candidates"]] == [str(c.spec) for c in cands]
    best = max(record["candidates"], key=lambda c: c["score"])
    assert chosen.config == "SUGGESTED" and chosen.spec == best["spec"] == record["spec"]
    small = selection_sample(task, 6)
    assert record["texts_encoded"] == len(small.texts("choose"))
    assert record["text_spec_encodings"] == len(cands) * record["texts_encoded"]
    again = select_spec(encoder, cands, small.texts("choose"), small.choose_score, instruction=task.instruction)
    assert [c["score"] for c in record["candidates"]] == [again.scores[str(c.spec)] for c in cands]
    with pytest.raises(ValueError, match="unconverted model"):
        selection_for(encoder, sink_profile(EncoderFromDecoder(encoder.decoder, "M0B*", encoder.tokenizer), TEXTS),
                      task, 6)  # fmt: skip


def test_the_study_reports_the_selection_as_its_suggestion(tmp_path):
    import json

    from test_cli import _study_data
    from tiny import tiny_decoder, tiny_tokenizer

    from nosink.evals.study import main

    saved = tmp_path / "enc"
    EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer()).save_pretrained(saved)
    _study_data(tmp_path / "data")
    base = [str(saved), "--data", str(tmp_path / "data"), "--tasks", "sts", "--templates", "instruction",
            "--ks", "2", "--k0s", "1", "--sts-choose", "8", "--sts-report", "12"]  # fmt: skip
    assert main([*base, "--out", str(tmp_path / "out"), "--select", "6"]) == 0
    sts = json.loads((tmp_path / "out" / "sts.json").read_text())
    record, chosen = sts["suggestion"], sts["templates"][0]["chosen"]
    assert chosen["SUGGESTED"]["spec"] == record["spec"]
    assert record["spec"] == max(record["candidates"], key=lambda c: c["score"])["spec"]
    assert record["sample"] == 6 and record["texts_encoded"] <= 12 and record["midpoint"]["spec"].startswith("F* | ")
    assert any(c["comparison"] == "suggested vs best swept" for c in sts["comparisons"])
    with pytest.raises(SystemExit) as info:  # refused when parsed (tests/test_cli_input.py has the message)
        main([*base, "--out", str(tmp_path / "bad"), "--select", "1"])
    assert info.value.code == 2
    with pytest.raises(ValueError, match="--no-suggestion"):
        main([*base, "--out", str(tmp_path / "bad"), "--select", "4", "--no-suggestion"])


# ---------------------------------------------------------------------------------------- the NER selection stage


def ner_sentences(n, seed):
    rng = np.random.default_rng(seed)

    def tag(word):
        return "B-LOC" if word in ("paris", "london") else "B-PER" if word == "dog" else "O"

    return [Sentence(tuple(ws), tuple(tag(w) for w in ws)) for ws in (rng.choice(WORDS, size=6) for _ in range(n))]


def test_ner_selection_probes_the_candidates_on_a_training_sample_and_the_choosing_half_only(monkeypatch):
    encoder = planted_sink_gpt2()
    profile = sink_profile(encoder, TEXTS)
    train, dev = ner_sentences(20, seed=0), ner_sentences(11, seed=1)
    calls = []
    real = study.ner_study

    def spy(enc, tr, dv, cands, **kwargs):
        calls.append((list(tr), list(dv), kwargs))
        return real(enc, tr, dv, cands, **kwargs)

    monkeypatch.setattr(study.select, "ner_study", spy)  # where ner_selection_for looks it up
    chosen, record = ner_selection_for(encoder, profile, train, dev, 8)
    ((sample, probed, kwargs),) = calls
    choose_half, report_half = stats.halves(dev, seed=0)  # ner_study's own cut of the study's dev set
    assert probed == choose_half and not set(probed) & set(report_half)
    assert sample == random.Random(0).sample(train, 8) and kwargs["seeds"] == (0,)  # a seeded sample, not the first 8
    assert kwargs["split_seed"] is None  # scored on the whole choosing half, not cut again
    cands = candidate_specs(profile, 4)
    assert [c["spec"] for c in record["candidates"]] == [str(c.spec) for c in cands]
    # each score is the candidate's F1 on the whole choosing half (no second cut), its probe trained on the sample
    again = real(encoder, sample, choose_half, [study.Candidate("SUGGESTED", str(c.spec)) for c in cands],
                 seeds=(0,), split_seed=None)  # fmt: skip
    assert [c["score"] for c in record["candidates"]] == [again.choose[c] for c in again.choose]
    best = max(record["candidates"], key=lambda c: c["score"])
    assert chosen.config == "SUGGESTED" and chosen.spec == best["spec"] == record["spec"]
    assert record["texts_encoded"] == 8 + 6 and record["text_spec_encodings"] == len(cands) * 14
    assert record["sample"] == 8 and record["choose_sentences"] == 6
    assert ner_selection_for(encoder, profile, train, dev, 50)[1]["sample"] == 20  # all of them, no more


@pytest.mark.parametrize(("scores", "want"), [((0.5, 0.5), 0), ((0.4, 0.6), 1), ((0.7, 0.6), 0)])
def test_ner_selection_keeps_the_best_f1_and_the_earliest_candidate_on_a_tie(monkeypatch, scores, want):
    encoder = planted_sink_gpt2()
    profile = sink_profile(encoder, TEXTS)
    cands = candidate_specs(profile, 4)
    assert len(cands) == 2  # the planted sink's profile gives two distinct specs

    def fake(enc, tr, dv, candidates, **kwargs):
        return NERStudy(dict(zip(candidates, scores, strict=True)), {}, {}, 0.0)

    monkeypatch.setattr(study.select, "ner_study", fake)
    chosen, _ = ner_selection_for(encoder, profile, ner_sentences(6, 0), ner_sentences(4, 1), 4)
    assert chosen.spec == str(cands[want].spec)


def test_ner_selection_names_bad_input():
    encoder = planted_sink_gpt2()
    profile = sink_profile(encoder, TEXTS)
    with pytest.raises(ValueError, match="at least 2 training sentences, got 1"):
        ner_selection_for(encoder, profile, ner_sentences(6, 0), ner_sentences(4, 1), 1)
    with pytest.raises(ValueError, match="training and dev sentences, got 6 and 0"):
        ner_selection_for(encoder, profile, ner_sentences(6, 0), [], 4)


def test_the_ner_study_reports_the_selection_as_its_suggestion(tmp_path):
    import json

    from test_cli import _study_data
    from tiny import tiny_decoder, tiny_tokenizer

    from nosink.evals.study import main

    saved = tmp_path / "enc"
    EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer()).save_pretrained(saved)
    _study_data(tmp_path / "data")
    base = [str(saved), "--data", str(tmp_path / "data"), "--tasks", "ner", "--ks", "2", "--k0s", "1",
            "--ner-train", "24", "--ner-dev", "12", "--no-progress"]  # fmt: skip
    assert main([*base, "--out", str(tmp_path / "out"), "--select", "10"]) == 0
    ner = json.loads((tmp_path / "out" / "ner.json").read_text())
    record = ner["suggestion"]
    assert record["spec"] == max(record["candidates"], key=lambda c: c["score"])["spec"]
    assert record["sample"] == 10 and record["choose_sentences"] == 6 and record["midpoint"]["spec"].startswith("F* |")
    suggested = [r for r in ner["rows"] if r["family"] == "SUGGESTED"]
    assert [r["spec"] for r in suggested] == [record["spec"]] and ner["chosen"]["SUGGESTED"] == record["spec"]
    assert any(c["comparison"] == "suggested vs best swept" for c in ner["comparisons"])
    # without --select the NER suggestion is the midpoint rule's spec, recorded as before
    assert main([*base, "--out", str(tmp_path / "mid")]) == 0
    mid = json.loads((tmp_path / "mid" / "ner.json").read_text())
    assert "candidates" not in mid["suggestion"] and mid["chosen"]["SUGGESTED"] == record["midpoint"]["spec"]


def test_the_ner_study_probes_the_selected_spec_not_the_midpoints(tmp_path, monkeypatch):
    import json

    from test_cli import _study_data
    from tiny import tiny_decoder, tiny_tokenizer

    from nosink.evals.study import Candidate, main

    saved = tmp_path / "enc"
    EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer()).save_pretrained(saved)
    _study_data(tmp_path / "data")
    other = "F* | B | M0B*2"  # not what the midpoint rule suggests for the tiny decoder (checked below)

    def select(encoder, profile, train, dev, n, seed=0, **kwargs):
        return Candidate("SUGGESTED", other), {"spec": other, "candidates": []}

    monkeypatch.setattr(study.driver, "ner_selection_for", select)  # where run() looks it up
    argv = [str(saved), "--data", str(tmp_path / "data"), "--tasks", "ner", "--ks", "2", "--k0s", "1",
            "--ner-train", "24", "--ner-dev", "12", "--no-progress", "--out", str(tmp_path / "out"),
            "--select", "10"]  # fmt: skip
    assert main(argv) == 0
    ner = json.loads((tmp_path / "out" / "ner.json").read_text())
    assert ner["suggestion"]["midpoint"]["spec"] != other
    assert [r["spec"] for r in ner["rows"] if r["family"] == "SUGGESTED"] == [other]
    (c,) = [c for c in ner["comparisons"] if c["comparison"] == "suggested vs best swept"]
    assert c["a"] == other
