"""The study runner's selection and scoring, on a tiny random decoder (no download, a few seconds)."""

import numpy as np
import pytest
from scipy.stats import spearmanr
from tiny import tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder
from nosink.evals import stats
from nosink.evals.ner import Sentence
from nosink.evals.study import (
    NO_TEMPLATE,
    Candidate,
    ClassificationTask,
    EmbeddingCache,
    STSTask,
    choose_by_family,
    comparisons,
    exit_candidates,
    grid,
    mean_over_seeds,
    ner_study,
    overall_choice,
    run_template,
    template_row,
)

WORDS = "the a cat dog sat on mat ran in park bank money river loan paris london city good bad food".split()


def tiny_encoder():
    return EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer())


def sentences(n, seed=0, length=5):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=length)) for _ in range(n)]


def sts_task(n_choose=10, n_report=12):
    rng = np.random.default_rng(1)
    texts = sentences(2 * (n_choose + n_report), seed=2)
    pairs = [(texts[2 * i], texts[2 * i + 1], float(rng.uniform(0, 5))) for i in range(n_choose + n_report)]
    return STSTask("tiny-sts", pairs[:n_choose], pairs[n_choose:], instruction="what is ")


def test_grid_holds_each_family_with_k0_below_k():
    names = [c.name for c in grid(12, ks=[3, 6], k0s=[1, 4])]
    assert names == ["F*", "F* | B*3", "F* | B*6", "F* | B*2 | M0B", "F* | B*5 | M0B", "F* | B*2 | M0B*4"]
    assert {c.family for c in grid(30)} == {"F*", "INPLACE-BIDIR", "MASK0&BIDIR"}
    assert [c.name for c in grid(30) if c.family == "INPLACE-BIDIR"] == ["F* | B*7", "F* | B*15", "F* | B*20"]
    with pytest.raises(ValueError, match="k <= 4"):
        grid(4, ks=[5])


def test_exit_candidates_skip_the_full_depth_and_specs_that_do_not_fit():
    cands = exit_candidates(Candidate("INPLACE-BIDIR", "F* | B*3"), depth=6, exits=[2, 4, 5, 6])
    assert [(c.exit_layer, c.name) for c in cands] == [(4, "F* | B*3 @ exit 4"), (5, "F* | B*3 @ exit 5")]


def test_choose_by_family_takes_each_familys_best_and_leaves_exits_out():
    scores = {
        Candidate("F*", "F*"): 0.1,
        Candidate("INPLACE-BIDIR", "F* | B*2"): 0.4,
        Candidate("INPLACE-BIDIR", "F* | B*3"): 0.3,
        Candidate("INPLACE-BIDIR", "F* | B*2", exit_layer=3): 0.9,
    }
    best = choose_by_family(scores)
    assert best == {"F*": Candidate("F*", "F*"), "INPLACE-BIDIR": Candidate("INPLACE-BIDIR", "F* | B*2")}
    assert choose_by_family(scores, full_depth_only=False)["INPLACE-BIDIR"].exit_layer == 3


def test_cache_equals_encode_specs_and_encodes_each_text_once():
    encoder = tiny_encoder()
    cands = [Candidate("F*", "F*"), Candidate("MASK0&BIDIR", "F* | M0B*2"), Candidate("F*", "F*", exit_layer=2)]
    texts = sentences(5)
    cache = EmbeddingCache(encoder, "Echo", instruction="ignored with a template")
    got = cache.vectors(cands, texts)
    want = encoder.encode_specs([c.plan(encoder) for c in cands], texts, template="Echo")
    for c in cands:
        np.testing.assert_allclose(got[c.name], want[c.name], rtol=1e-5, atol=1e-6)
    assert cache.texts_encoded == 5
    again = cache.vectors(cands[:1], texts[::-1] + texts[:1])  # seen texts: nothing new is encoded
    assert cache.texts_encoded == 5
    np.testing.assert_array_equal(again["F*"][0], got["F*"][-1])


def test_sts_scores_are_spearman_of_cosines():
    task = sts_task()
    rng = np.random.default_rng(0)
    table = {t: rng.normal(size=4) for t in task.texts("choose") + task.texts("report")}

    def vectors(texts):
        return np.stack([table[t] for t in texts])

    def cos(a, b):
        return a @ b / np.linalg.norm(a) / np.linalg.norm(b)

    sims = [cos(table[a], table[b]) for a, b, _ in task.choose]
    assert task.choose_score(vectors) == pytest.approx(spearmanr(sims, [s for *_, s in task.choose])[0])
    assert task.report_statistic(vectors).n == len(task.report)


def test_classification_chooses_on_a_held_out_part_of_train_and_reports_on_test():
    train = [(f"item {i}", "ab"[i % 2]) for i in range(20)]
    test = [(f"test {i}", "ab"[i % 2]) for i in range(8)]
    task = ClassificationTask("tiny-cls", train, test)
    rest, validation = task._split
    assert len(validation) == 4 and not set(rest) & set(validation)

    # vectors that give the label away: a perfect classifier on both splits
    def vectors(texts):
        return np.array([[1.0, 0.0] if int(t.split()[1]) % 2 == 0 else [0.0, 1.0] for t in texts])

    assert task.choose_score(vectors) == 1.0
    statistic = task.report_statistic(vectors)
    assert statistic.n == 8 and statistic() == 1.0
    assert task.texts("choose") == [t for t, _ in train] and len(task.texts("report")) == 28


def test_run_template_reports_each_familys_choice_on_the_other_split():
    encoder, task = tiny_encoder(), sts_task()
    cands = grid(encoder.depth, ks=[2, 3], k0s=[1])
    suggestion = Candidate("SUGGESTED", "F* | B*2 | M0B*2")
    result = run_template(encoder, task, cands, None, suggestion=suggestion, exits=[2, 3], exit_families=("F*", "best"))
    scores = {s.candidate: s.choose for s in result.grid}
    assert set(scores) == set(cands) | {suggestion}
    for fam, chosen in result.chosen.items():
        if fam != "SUGGESTED":
            assert chosen.choose == max(v for c, v in scores.items() if c.family == fam)
        assert chosen.report is not None and chosen.report.n == len(task.report)
    # the reported number is the chosen spec scored afresh on the reporting split
    vectors = EmbeddingCache(encoder, None, task.instruction).vectors
    spec = result.chosen["MASK0&BIDIR"].candidate
    direct = task.report_statistic(lambda texts: vectors([spec], texts)[spec.name])
    assert result.chosen["MASK0&BIDIR"].report() == pytest.approx(direct(), abs=1e-6)
    assert {c.candidate.exit_layer for c in result.exits["F*"]} == {2, 3, None}
    best = max(("INPLACE-BIDIR", "MASK0&BIDIR"), key=lambda f: result.chosen[f].choose)
    assert best in result.exits
    assert result.exit_choice["F*"].choose == max(s.choose for s in result.exits["F*"])
    row = template_row(result)
    assert row["template"] == NO_TEMPLATE and row["chosen"]["F*"]["low"] <= row["chosen"]["F*"]["high"]


def test_a_restricted_template_scores_only_the_given_specs_and_comparisons_pair_them():
    encoder, task = tiny_encoder(), sts_task()
    base = run_template(encoder, task, grid(encoder.depth, ks=[2], k0s=[1]), None)
    keep = {f: s.candidate for f, s in base.chosen.items()}
    prompt = run_template(encoder, task, [], "PromptEOL", restrict=keep)
    assert [s.candidate for s in prompt.grid] == list(keep.values())
    rows = comparisons([base, prompt])
    kinds = {r["comparison"] for r in rows}
    assert {"mask0&bidir vs inplace-bidir", "template alone vs nothing", "template+mask vs mask alone"} <= kinds
    for r in rows:
        assert 0 <= r["p_value"] <= 1 and r["low"] <= r["delta"] <= r["high"]
    choice = overall_choice([base, prompt])
    assert choice["choose"] == max(s.choose for r in (base, prompt) for s in r.chosen.values())


def test_mean_over_seeds_resamples_the_seeds_together():
    gold = np.array([0, 1, 1, 0, 1])
    a, b = stats.accuracy(gold, np.array([0, 1, 1, 0, 0])), stats.accuracy(gold, np.array([1, 1, 1, 0, 1]))
    both = mean_over_seeds([a, b])
    idx = stats.resample_indices(5, 20, seed=3)
    np.testing.assert_allclose(both.values(idx), (a.values(idx) + b.values(idx)) / 2)
    with pytest.raises(ValueError, match="same units"):
        mean_over_seeds([a, stats.accuracy([0, 1], [0, 1])])


def test_ner_study_scores_every_candidate_on_both_halves_with_each_seed():
    rng = np.random.default_rng(0)

    def tag(word):
        return "B-LOC" if word in ("paris", "london") else "B-PER" if word == "dog" else "O"

    data = [Sentence(tuple(ws), tuple(tag(w) for w in ws)) for ws in (rng.choice(WORDS, size=6) for _ in range(24))]
    cands = [Candidate("F*", "F*"), Candidate("INPLACE-BIDIR", "F* | B*2"), Candidate("F*", "F*", exit_layer=2)]
    result = ner_study(tiny_encoder(), data[:16], data[16:], cands, seeds=(0, 1))
    for c in cands:
        assert 0 <= result.choose[c] <= 1 and result.report[c].n == 4 and len(result.per_seed[c]) == 2
        assert result.report[c]() == pytest.approx(np.mean(result.per_seed[c]))
