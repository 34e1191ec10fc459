"""Bootstrap intervals, paired tests and clean-selection splits, against independent computations."""

import random

import numpy as np
import pytest
from scipy.stats import spearmanr
from seqeval.metrics import f1_score
from sklearn.metrics import f1_score as sk_f1

from nosink.evals import stats

pytest.importorskip("seqeval")  # the eval extra


def mean_of(values):
    values = np.asarray(values, dtype=float)
    return stats.Statistic("mean", len(values), lambda idx: values[idx].mean(axis=1))


def test_a_means_interval_matches_the_normal_theory_interval_on_a_large_sample():
    x = np.random.default_rng(7).normal(3.0, 2.0, size=4000)
    ci = stats.bootstrap_ci(mean_of(x), seed=1)
    half = 1.959964 * x.std(ddof=1) / np.sqrt(len(x))  # about 0.062
    assert ci.estimate == pytest.approx(x.mean())
    assert ci.low == pytest.approx(x.mean() - half, abs=0.1 * half)
    assert ci.high == pytest.approx(x.mean() + half, abs=0.1 * half)
    assert (ci.level, ci.resamples) == (0.95, 1000)


def test_an_accuracys_interval_matches_the_binomial_normal_interval():
    gold = np.zeros(3000, dtype=int)
    predicted = (np.random.default_rng(3).random(3000) < 0.2).astype(int)  # about 80% right
    ci = stats.bootstrap_ci(stats.accuracy(gold, predicted), seed=2)
    p = (predicted == 0).mean()
    half = 1.959964 * np.sqrt(p * (1 - p) / 3000)
    assert (ci.low, ci.high) == pytest.approx((p - half, p + half), abs=0.1 * half)


def test_a_wider_level_gives_a_wider_interval_and_the_same_seed_the_same_interval():
    s = mean_of(np.random.default_rng(0).normal(size=300))
    assert stats.bootstrap_ci(s, seed=5) == stats.bootstrap_ci(s, seed=5)
    assert stats.bootstrap_ci(s, seed=5) != stats.bootstrap_ci(s, seed=6)
    narrow, wide = stats.bootstrap_ci(s, level=0.8), stats.bootstrap_ci(s, level=0.99)
    assert wide.low < narrow.low < narrow.high < wide.high
    assert np.array_equal(stats.resample_indices(10, 4, seed=3), stats.resample_indices(10, 4, seed=3))
    with pytest.raises(ValueError, match="level must be between 0 and 1"):
        stats.bootstrap_ci(s, level=95)


def test_paired_p_value_is_one_half_for_identical_systems_and_near_zero_for_a_clearly_better_one():
    rng = np.random.default_rng(11)
    gold = rng.integers(0, 5, size=500)
    noisy = np.where(rng.random(500) < 0.4, rng.integers(0, 5, size=500), gold)  # about 68% right
    better = np.where(rng.random(500) < 0.5, gold, noisy)  # about 84% right
    same = stats.compare(stats.accuracy(gold, noisy), stats.accuracy(gold, noisy))
    assert same.p_value == 0.5 and same.delta.estimate == same.delta.low == same.delta.high == 0
    clear = stats.compare(stats.accuracy(gold, better), stats.accuracy(gold, noisy))
    assert clear.p_value < 0.001 and clear.delta.low > 0
    reverse = stats.compare(stats.accuracy(gold, noisy), stats.accuracy(gold, better))
    assert clear.p_value + reverse.p_value == pytest.approx(1.0)
    # two systems of equal quality that err on different items: no clear winner either way
    other = np.where(rng.random(500) < 0.4, rng.integers(0, 5, size=500), gold)
    assert 0.02 < stats.compare(stats.accuracy(gold, other), stats.accuracy(gold, noisy)).p_value < 0.98
    with pytest.raises(ValueError, match="same units: A has 500, B has 499"):
        stats.compare(stats.accuracy(gold, noisy), stats.accuracy(gold[1:], noisy[1:]))


GOLD = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG"], ["O", "O"], ["B-LOC", "O", "B-PER"]]
PRED = [["B-PER", "I-PER", "O", "O"], ["O", "B-LOC"], ["B-MISC", "O"], ["B-LOC", "O", "B-PER"]]


def test_ner_f1_on_a_resample_equals_a_hand_count_and_seqeval():
    statistic = stats.ner_f1(GOLD, PRED)
    # all sentences: gold entities PER, LOC | ORG | - | LOC, PER = 5; predicted PER | LOC | MISC | LOC, PER = 5;
    # right: PER (s0), LOC and PER (s3) = 3, so F1 = 2*3 / (5 + 5)
    assert statistic() == pytest.approx(0.6) == pytest.approx(f1_score(GOLD, PRED))
    # resample [3, 3, 1]: gold 2 + 2 + 1 = 5, predicted 2 + 2 + 1 = 5, right 2 + 2 + 0 = 4: F1 = 0.8
    assert statistic([3, 3, 1]) == pytest.approx(0.8)
    assert statistic([2]) == 0.0  # no gold entity, one wrong guess
    rng = random.Random(0)
    gold = GOLD * 25
    pred = [rng.choice([PRED[i % 4], GOLD[i % 4]]) for i in range(100)]  # right or wrong, sentence by sentence
    statistic = stats.ner_f1(gold, pred)
    for idx in stats.resample_indices(100, 5, seed=4):
        assert statistic(idx) == pytest.approx(f1_score([gold[i] for i in idx], [pred[i] for i in idx]))
    with pytest.raises(ValueError, match="sentence 0 has 4 gold tags but 3 predicted"):
        stats.ner_f1(GOLD, [PRED[0][:3], *PRED[1:]])


def test_spearman_and_macro_f1_on_resamples_equal_scipy_and_scikit_learn():
    rng = np.random.default_rng(5)
    gold = rng.integers(0, 6, size=200).astype(float)  # STS-like gold with many ties
    scores = gold + rng.normal(scale=2.0, size=200)
    labels = rng.integers(0, 7, size=200)
    guesses = np.where(rng.random(200) < 0.5, labels, rng.integers(0, 9, size=200))  # classes 7, 8 never gold
    rho, macro = stats.spearman(scores, gold), stats.f1_macro(labels, guesses)
    assert rho() == pytest.approx(spearmanr(scores, gold).statistic)
    assert macro() == pytest.approx(sk_f1(labels, guesses, average="macro"))
    for idx in stats.resample_indices(200, 5, seed=9):
        assert rho(idx) == pytest.approx(spearmanr(scores[idx], gold[idx]).statistic)
        assert macro(idx) == pytest.approx(sk_f1(labels[idx], guesses[idx], average="macro", zero_division=0))
    ci = stats.bootstrap_ci(rho)
    assert ci.low < rho() < ci.high


def test_halves_are_a_seeded_partition():
    items = list(range(101))
    first, second = stats.halves(items, seed=3)
    assert (len(first), len(second)) == (51, 50)
    assert sorted(first + second) == items
    assert stats.halves(items, seed=3) == (first, second) and stats.halves(items, seed=4) != (first, second)
    assert first != sorted(first)  # shuffled, not the first half of the file


def test_holdout_is_stratified_and_seeded():
    labels = ["a"] * 50 + ["b"] * 30 + ["c"] * 10 + ["d"]
    items = list(range(len(labels)))
    rest, validation = stats.holdout(items, labels, fraction=0.2, seed=1)
    assert sorted(rest + validation) == items
    counts = {k: sum(labels[i] == k for i in validation) for k in "abcd"}
    assert counts == {"a": 10, "b": 6, "c": 2, "d": 0}  # a label seen once stays in the training part
    assert stats.holdout(items, labels, fraction=0.2, seed=1) == (rest, validation)
    assert stats.holdout(items, labels, fraction=0.2, seed=2) != (rest, validation)
    with pytest.raises(ValueError, match="fraction must be between 0 and 1"):
        stats.holdout(items, labels, fraction=1.0)


def test_folds_hold_every_item_out_once_stratified_and_seeded():
    labels = ["a"] * 50 + ["b"] * 30 + ["c"] * 10 + ["d"]
    items = list(range(len(labels)))
    cut = stats.folds(items, labels, k=5, seed=1)
    assert len(cut) == 5 and sorted(i for _, held in cut for i in held) == items  # each item held out once
    for rest, held in cut:
        assert sorted(rest + held) == items
        counts = {k: sum(labels[i] == k for i in held) for k in "abc"}
        assert counts == {"a": 10, "b": 6, "c": 2}  # every label spread evenly over the folds
    assert sorted(len(held) for _, held in cut) == [18, 18, 18, 18, 19]
    assert stats.folds(items, labels, k=5, seed=1) == cut and stats.folds(items, labels, k=5, seed=2) != cut
    assert len(stats.folds([1, 2], ["a", "b"], k=5)) == 2  # folds that would hold nothing are left out
    with pytest.raises(ValueError, match="at least 2 folds"):
        stats.folds(items, labels, k=1)
    with pytest.raises(ValueError, match="91 items but 3 labels"):
        stats.folds(items, labels[:3])


def test_select_reports_the_choice_on_the_other_split():
    choose = {"F* | M0B*4": 0.70, "F* | M0B*8": 0.75, "F* | B*8": 0.72}
    report = {"F* | M0B*4": 0.71, "F* | M0B*8": 0.69, "F* | B*8": 0.74}
    s = stats.select(choose, report)
    assert (s.choice, s.choose_score, s.report_score) == ("F* | M0B*8", 0.75, 0.69)
    assert (s.oracle, s.oracle_score) == ("F* | B*8", 0.74)
    with pytest.raises(ValueError, match="no score on the reporting split"):
        stats.select(choose, {"F* | M0B*4": 0.7})


def test_the_ner_probe_keeps_per_sentence_tags_for_its_error_bars():
    from test_ner import make_sentences
    from tiny import tiny_decoder, tiny_tokenizer

    from nosink import EncoderFromDecoder
    from nosink.evals.ner import evaluate_ner

    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F* | M0B*2", tiny_tokenizer())
    evaluation = make_sentences(30, seed=2)
    train, specs = make_sentences(60, seed=1), ["F*", "F* | M0B*2"]
    results = evaluate_ner(encoder, train, evaluation, specs=specs, show_progress_bar=False)
    for r in results:
        assert r.gold == tuple(s.tags for s in evaluation)
        assert [len(p) for p in r.predictions] == [len(s.tags) for s in evaluation]
        assert stats.ner_f1(r.gold, r.predictions)() == pytest.approx(r.f1)
        assert set(r.as_dict()) == {"spec", "f1", "precision", "recall", "truncated_words", "n_train", "n_eval"}
    ci = stats.bootstrap_ci(stats.ner_f1(results[0].gold, results[0].predictions))
    assert ci.low <= results[0].f1 <= ci.high and ci.low < ci.high
    paired = stats.compare(*(stats.ner_f1(r.gold, r.predictions) for r in results))
    assert 0 <= paired.p_value <= 1


def test_mean_of_per_unit_values_resamples_the_units():
    values = np.array([0.0, 0.5, 1.0, 0.25])
    statistic = stats.mean_of("ndcg_at_10", values)
    assert statistic.n == 4 and statistic() == pytest.approx(0.4375)
    assert statistic.values(np.array([[0, 0, 2, 2], [1, 1, 1, 1]])).tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match="ndcg_at_10: need a non-empty list"):
        stats.mean_of("ndcg_at_10", [])
