"""The study runner's selection and scoring, on a tiny random decoder (no download, a few seconds)."""

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr
from tiny import tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder
from nosink.evals import stats
from nosink.evals.ner import Sentence
from nosink.evals.study import (
    DEFAULT_CONFIGS,
    NO_TEMPLATE,
    Candidate,
    ClassificationTask,
    EmbeddingCache,
    RetrievalTask,
    STSTask,
    choose_by_config,
    comparisons,
    converted_layers,
    curves_table,
    effect,
    exit_candidates,
    exit_configs_of,
    grid,
    interplay,
    interplay_counts_table,
    interplay_table,
    load_classification,
    load_retrieval,
    load_sts,
    load_sts17,
    mean_over_seeds,
    ner_study,
    overall_choice,
    plot_curves,
    plot_interplay,
    plot_study,
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


def test_grid_holds_each_config_with_k0_below_k():
    names = [c.name for c in grid(12, ks=[3, 6], k0s=[1, 4])]
    assert names == ["F*", "F* | B*3", "F* | B*6", "F* | B*2 | M0B", "F* | B*5 | M0B", "F* | B*2 | M0B*4"]
    assert {c.config for c in grid(30)} == {"F*", "INPLACE-BIDIR", "MASK0&BIDIR"}
    assert [c.name for c in grid(30) if c.config == "INPLACE-BIDIR"] == ["F* | B*7", "F* | B*15", "F* | B*20"]
    with pytest.raises(ValueError, match="k <= 4"):
        grid(4, ks=[5])


def test_exit_candidates_skip_the_full_depth_and_specs_that_do_not_fit():
    cands = exit_candidates(Candidate("INPLACE-BIDIR", "F* | B*3"), depth=6, exits=[2, 4, 5, 6])
    assert [(c.exit_layer, c.name) for c in cands] == [(4, "F* | B*3 @ exit 4"), (5, "F* | B*3 @ exit 5")]


def test_choose_by_config_takes_each_configs_best_and_leaves_exits_out():
    scores = {
        Candidate("F*", "F*"): 0.1,
        Candidate("INPLACE-BIDIR", "F* | B*2"): 0.4,
        Candidate("INPLACE-BIDIR", "F* | B*3"): 0.3,
        Candidate("INPLACE-BIDIR", "F* | B*2", exit_layer=3): 0.9,
    }
    best = choose_by_config(scores)
    assert best == {"F*": Candidate("F*", "F*"), "INPLACE-BIDIR": Candidate("INPLACE-BIDIR", "F* | B*2")}
    assert choose_by_config(scores, full_depth_only=False)["INPLACE-BIDIR"].exit_layer == 3


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


def test_classification_with_choose_folds_chooses_by_cross_validation_over_all_of_train():
    train = [(f"item {i}", "abcd"[i // 2]) for i in range(8)]  # two items per label: no holdout possible
    task = ClassificationTask("tiny-cls", train, [("test 0", "a")], choose_folds=2)
    fits = []

    def vectors(texts):
        fits.append(len(texts))
        return np.array([[float("abcd".index("abcd"[int(t.split()[1]) // 2]) if t.startswith("item") else 0.0)]
                         for t in texts])  # fmt: skip

    assert task.choose_score(vectors) == 1.0  # each item predicted by the fit on the other fold
    assert fits == [4, 4, 4, 4]  # two folds: a fit on 4 items and a prediction of the other 4, twice


def test_classification_refuses_a_training_sample_too_small_to_hold_out_validation_items():
    train = [(f"item {i}", "abcd"[i // 2]) for i in range(8)]  # two items per label: 0.2 of 2 rounds to 0
    with pytest.raises(ValueError, match=r"tiny-cls: the validation holdout .* is empty: 8 training items, at most 2"):
        ClassificationTask("tiny-cls", train, [("test", "a")])
    ClassificationTask("tiny-cls", train, [("test", "a")], validation=[("v", "a")])  # its own validation split: fine
    assert len(ClassificationTask("tiny-cls", train * 2, [("test", "a")])._split[1]) == 4  # four of a label: one each


def test_run_template_reports_each_configs_choice_on_the_other_split():
    encoder, task = tiny_encoder(), sts_task()
    cands = grid(encoder.depth, ks=[2, 3], k0s=[1])
    suggestion = Candidate("SUGGESTED", "F* | B*2 | M0B*2")
    result = run_template(encoder, task, cands, None, suggestion=suggestion, exits=[2, 3], exit_configs=("F*", "best"))
    scores = {s.candidate: s.choose for s in result.grid}
    assert set(scores) == set(cands) | {suggestion}
    for cfg, chosen in result.chosen.items():
        if cfg != "SUGGESTED":
            assert chosen.choose == max(v for c, v in scores.items() if c.config == cfg)
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
    # split_seed=None: no cut, both "halves" are all 8 dev sentences (the NER selection stage's choosing half)
    whole = ner_study(tiny_encoder(), data[:16], data[16:], cands[:1], seeds=(0,), split_seed=None)
    assert whole.report[cands[0]].n == 8 and whole.choose[cands[0]] == pytest.approx(whole.report[cands[0]]())


# ---------------------------------------------------------------------------------------- more tasks


def retrieval_task(**kwargs):
    corpus = [("d1", "cat sat on mat"), ("d2", "bank money loan"), ("d3", "paris london city"), ("d4", "good food")]
    relevant = {"q1": {"d1": 1}, "q2": {"d2": 2, "d3": 1}, "q3": {"d4": 1}}
    return RetrievalTask(
        "tiny-ret", [("q1", "the cat"), ("q2", "the bank")], [("q3", "the food"), ("q1", "the cat")], corpus,
        relevant, query_instruction="find: ", **kwargs,
    )  # fmt: skip


def test_retrieval_scores_each_query_by_mtebs_ndcg_at_10():
    task = retrieval_task()
    # one-hot documents; each query points at documents with given weights
    docs = {t: np.eye(4)[i] for i, (_, t) in enumerate(task.corpus)}
    want = {"the cat": [0.5, 1.0, 0, 0], "the bank": [0, 0.2, 1.0, 0], "the food": [1.0, 0, 0, 0.5]}

    def vectors(texts):
        return np.stack([docs[t] if t in docs else np.array(want[t]) for t in texts])

    ndcg = task.per_query(task.choose, vectors)
    # q1: its one relevant document ranked 2nd -> 1/log2(3); q2: relevance 1 ranked 1st, relevance 2 ranked 2nd
    # (trec_eval's gains are the relevance values)
    assert ndcg[0] == pytest.approx(1 / np.log2(3))
    assert ndcg[1] == pytest.approx((1 + 2 / np.log2(3)) / (2 + 1 / np.log2(3)), rel=1e-4)
    statistic = task.report_statistic(vectors)
    assert statistic.n == 2 and statistic() == pytest.approx(np.mean(task.per_query(task.report, vectors)))
    assert task.choose_score(vectors) == pytest.approx(ndcg.mean())


def test_retrieval_instructs_queries_only_and_embeds_the_corpus_for_both_splits():
    task = retrieval_task()
    assert task.instruction("the cat") == "find: " and task.instruction("cat sat on mat") is None
    assert task.texts("choose") == ["the cat", "the bank", *(t for _, t in task.corpus)]
    assert task.texts("report")[:2] == ["the food", "the cat"]
    with pytest.raises(ValueError, match="without relevance judgements"):
        RetrievalTask("x", [("q9", "a")], [], task.corpus, {})


def test_cache_with_a_per_text_instruction_encodes_each_group_with_its_own():
    encoder = tiny_encoder()
    cands = [Candidate("F*", "F*"), Candidate("INPLACE-BIDIR", "F* | B*2")]
    queries, docs = sentences(3, seed=5), sentences(4, seed=6)
    cache = EmbeddingCache(encoder, None, lambda t: "find: " if t in queries else None)
    got = cache.vectors(cands, docs[:2] + queries + docs[2:])
    plans = [c.plan(encoder) for c in cands]
    with_ins = encoder.encode_specs(plans, queries, "find: ")
    without = encoder.encode_specs(plans, docs, None)
    for c in cands:
        np.testing.assert_allclose(got[c.name][2:5], with_ins[c.name], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[c.name][[0, 1, 5, 6]], without[c.name], rtol=1e-5, atol=1e-6)
    assert cache.texts_encoded == 7


def test_run_template_on_retrieval_reports_on_the_other_queries():
    encoder, task = tiny_encoder(), retrieval_task()
    result = run_template(encoder, task, grid(encoder.depth, ks=[2], k0s=[1]), None)
    assert set(result.chosen) == set(DEFAULT_CONFIGS)
    for scored in result.chosen.values():
        assert 0 <= scored.choose <= 1 and scored.report.n == len(task.report)
    prompt = run_template(encoder, task, [], "PromptEOL", restrict={f: s.candidate for f, s in result.chosen.items()})
    assert all(0 <= s.report() <= 1 for s in prompt.chosen.values())


def test_classification_with_its_own_validation_split_chooses_there():
    train = [(f"item {i}", "ab"[i % 2]) for i in range(10)]
    validation = [(f"val {i}", "ab"[i % 2]) for i in range(6)]
    test = [(f"test {i}", "ab"[i % 2]) for i in range(4)]
    task = ClassificationTask("tiny-cls", train, test, validation=validation)
    assert task._split == (train, validation)
    assert task.texts("choose") == [t for t, _ in train + validation]
    assert task.texts("report") == [t for t, _ in train + test]

    def vectors(texts):
        return np.array([[1.0, 0.0] if int(t.split()[1]) % 2 == 0 else [0.0, 1.0] for t in texts])

    assert task.choose_score(vectors) == 1.0 and task.report_statistic(vectors).n == 4


def write_beir(folder, n_docs=12):
    (folder / "qrels").mkdir(parents=True)
    docs = [
        {"_id": f"d{i}", "title": f"title {i}" if i % 2 else "", "text": f"text {i} " + "word " * 10}
        for i in range(n_docs)
    ]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    queries = [{"_id": f"q{i}", "text": f"query {i}"} for i in range(6)]
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    rows = ["query-id\tcorpus-id\tscore"] + [f"q{i}\td{i}\t1" for i in range(6)] + ["q0\td7\t2"]
    (folder / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n")


def test_load_retrieval_keeps_judged_documents_and_samples_the_rest(tmp_path):
    write_beir(tmp_path / "scifact")
    task = load_retrieval("SciFact", tmp_path / "scifact", n_queries=4, n_other=2, seed=0, doc_words=3)
    sampled = [q for q, _ in task.choose + task.report]
    assert len(task.choose) == 2 and len(task.report) == 2 and len(set(sampled)) == 4
    ids = [d for d, _ in task.corpus]
    judged = {d for q in sampled for d in task.relevant[q]}
    assert judged <= set(ids) and len(ids) == len(judged) + 2
    assert all(len(t.split()) <= 3 for _, t in task.corpus)
    assert task.instruction(task.choose[0][1]).startswith("Instruct: Given a scientific claim")
    whole = load_retrieval("SciFact", tmp_path / "scifact", None, None)
    assert len(whole.corpus) == 12 and len(whole.choose) + len(whole.report) == 6
    texts = dict(whole.corpus)
    assert texts["d1"].startswith("title 1 text 1 word") and texts["d2"].startswith("text 2 word")  # as mteb joins
    with pytest.raises(ValueError, match="unknown retrieval task"):
        load_retrieval("ArguAna", tmp_path / "scifact", None, None)


def test_load_sts17_reports_on_sts17_and_chooses_on_stsb_dev(tmp_path):
    stsb, sts17 = tmp_path / "stsb", tmp_path / "sts17"
    stsb.mkdir()
    sts17.mkdir()
    rows = [f"g\tf\t2012\t{i}\t{i % 5}.0\tdev one {i}\tdev two {i}" for i in range(8)]
    (stsb / "sts-dev.csv").write_text("\n".join(rows) + "\n")
    (stsb / "sts-test.csv").write_text(rows[0] + "\n")
    (sts17 / "STS.input.track5.en-en.txt").write_text("a b\tc d\ne f\tg h\n")
    (sts17 / "STS.gs.track5.en-en.txt").write_text("4.0\n1.5\n")
    task = load_sts17(stsb, sts17, n_choose=5, seed=0)
    assert task.report == [("a b", "c d", 4.0), ("e f", "g h", 1.5)]
    assert task.choose == load_sts(stsb, 5, None, 0).choose and len(task.choose) == 5


def test_load_massive_chooses_on_validation(tmp_path):
    folder = tmp_path / "massive_intent"
    folder.mkdir()
    for split, n in (("train", 12), ("validation", 6), ("test", 6)):
        rows = [{"id": str(i), "label": i % 3, "text": f"{split} {i}", "label_text": f"l{i % 3}"} for i in range(n)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = load_classification("MassiveIntentClassification", folder, 9, None, n_validation=3)
    assert len(task.train) == 9 and len(task.validation) == 3 and len(task.test) == 6
    assert {y for _, y in task.validation} == {"0", "1", "2"}  # stratified: every intent kept
    assert task.instruction.startswith("Instruct: Given a user utterance")


def test_exit_configs_resolve_best_and_keep_the_order():
    specs = {"F*": "F*", "INPLACE-BIDIR": "F* | B*2", "MASK0&BIDIR": "F* | B | M0B"}
    chosen = {f: Candidate(f, spec) for f, spec in specs.items()}
    scores = {chosen["F*"]: 0.1, chosen["INPLACE-BIDIR"]: 0.5, chosen["MASK0&BIDIR"]: 0.4}
    assert exit_configs_of(["F*", "best"], chosen, scores) == ["F*", "INPLACE-BIDIR"]
    scores[chosen["MASK0&BIDIR"]] = 0.6
    assert exit_configs_of(["best", "F*"], chosen, scores) == ["MASK0&BIDIR", "F*"]
    both = exit_configs_of(["INPLACE-BIDIR", "MASK0&BIDIR", "best"], chosen, scores)
    assert both == ["INPLACE-BIDIR", "MASK0&BIDIR"]  # "best" is one of them: tried once
    only_f = {"F*": chosen["F*"]}
    assert exit_configs_of(["F*", "best", "MASK0&BIDIR"], only_f, scores) == ["F*"]  # nothing converted chosen
    with pytest.raises(ValueError, match="unknown exit configs"):
        exit_configs_of(["BACK"], chosen, scores)


def test_run_template_tries_exits_on_every_named_config():
    encoder, task = tiny_encoder(), sts_task()
    cands = grid(encoder.depth, ks=[2, 3], k0s=[1])
    result = run_template(encoder, task, cands, None, exits=[2, 3], exit_configs=("INPLACE-BIDIR", "MASK0&BIDIR"))
    assert set(result.exits) == {"INPLACE-BIDIR", "MASK0&BIDIR"}  # and not F*
    for cfg, rows in result.exits.items():
        spec = result.chosen[cfg].candidate.spec
        assert {r.candidate.spec for r in rows} == {spec} and None in {r.candidate.exit_layer for r in rows}
        assert all(r.report is not None for r in rows)
        assert result.exit_choice[cfg].choose == max(r.choose for r in rows)


def test_the_exit_configs_option_is_parsed_and_checked(tmp_path, capsys):
    import argparse

    from nosink.evals.study import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["demo", "--data", str(tmp_path), "--out", str(tmp_path)]
    assert parser.parse_args(base).exit_configs == ["F*", "best"]
    both = parser.parse_args([*base, "--exit-families", "INPLACE-BIDIR", "MASK0&BIDIR"])
    assert both.exit_configs == ["INPLACE-BIDIR", "MASK0&BIDIR"]
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--exit-families", "BACK"])
    assert "argument --exit-configs/--exit-families: invalid choice: 'BACK'" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------- the paper's configs


def test_grid_sweeps_the_papers_configs_in_the_order_given():
    names = [c.name for c in grid(12, ks=[3, 6], k0s=[1], configs=["MASK0-BIDIR", "INPLACE-BACK", "MASK0-ALL"])]
    assert names == ["F*", "F* | M0B*3", "F* | M0B*6", "F* | R*3", "F* | R*6", "M0B*"]
    cfgs = ["INPLACE-BIDIR", "MASK0-FOR", "MASK0&BIDIR"]
    assert {c.config: c.spec for c in grid(12, ks=[3], k0s=[1], configs=cfgs)} == {
        "F*": "F*", "INPLACE-BIDIR": "F* | B*3", "MASK0-FOR": "F* | M0F*3", "MASK0&BIDIR": "F* | B*2 | M0B",
    }  # fmt: skip
    assert grid(12, ks=[3], k0s=[1]) == grid(12, ks=[3], k0s=[1], configs=["INPLACE-BIDIR", "MASK0&BIDIR"])
    with pytest.raises(ValueError, match=r"unknown configs \['BACK'\]"):
        grid(12, configs=["BACK"])


def test_converted_layers_counts_every_layer_not_plain_forward():
    assert [converted_layers(c.spec, 12) for c in grid(12, ks=[3, 12], k0s=[2], configs=["INPLACE-BACK"])] == [
        0, 3, 12,
    ]  # fmt: skip
    assert converted_layers("M0B*", 12) == 12 and converted_layers("F* | B*3 | M0B*2", 12) == 5
    assert converted_layers("F* | M0F*4", 12) == 4  # a forward layer that hides the sink is converted


def test_report_grid_scores_every_spec_on_both_splits_and_compares_along_k(tmp_path):
    encoder, task = tiny_encoder(), sts_task()
    depth = encoder.depth
    cands = grid(depth, ks=[2, depth], k0s=[1], configs=["INPLACE-BIDIR", "INPLACE-BACK", "MASK0-BIDIR", "MASK0-ALL"])
    result = run_template(encoder, task, cands, None, report_grid=True)
    assert [s.candidate for s in result.grid] == cands and all(s.report is not None for s in result.grid)
    reported = {s.candidate.name: s.report for s in result.grid}
    # each grid row's reported number is its spec scored afresh on the reporting split
    vectors = EmbeddingCache(encoder, None, task.instruction).vectors
    back = Candidate("INPLACE-BACK", "F* | R*2")
    assert reported[back.name]() == pytest.approx(
        task.report_statistic(lambda texts: vectors([back], texts)[back.name])(), abs=1e-6
    )
    rows = {r["comparison"]: r for r in comparisons([result], depth=depth)}
    at = ["inplace-back vs inplace-bidir at k=2", f"inplace-back vs inplace-bidir at k={depth}"]
    assert set(at) | {
        "mask0-all vs inplace-bidir at k=n",
        "mask0-bidir vs inplace-back",
        "mask0-all vs inplace-bidir",
    } <= set(rows)
    assert rows[at[0]]["delta"] == pytest.approx(reported["F* | R*2"]() - reported["F* | B*2"](), abs=1e-9)
    assert (rows[at[0]]["a_spec"], rows[at[0]]["b_spec"]) == ("F* | R*2", "F* | B*2")
    assert not any(" at k=" in k for k in (r["comparison"] for r in comparisons([result])))  # no depth, no curves
    for config, chosen in result.chosen.items():  # Finding 1: the chosen k against every layer converted
        kind = f"{config.lower()} chosen vs all layers"
        if (
            config in ("INPLACE-BIDIR", "INPLACE-BACK", "MASK0-BIDIR")
            and converted_layers(chosen.candidate.spec, depth) < depth
        ):
            assert rows[kind]["b_spec"] == chosen.candidate.spec.rsplit("*", 1)[0] + f"*{depth}"
        else:
            assert kind not in rows

    payload = {"depth": depth, "metric": task.metric, "templates": [template_row(result)]}
    table = curves_table(payload).splitlines()
    assert table[0] == "| k | INPLACE-BIDIR | INPLACE-BACK | MASK0-BIDIR | MASK0-ALL |"
    assert [line.split(" | ")[0] for line in table[2:]] == ["| 0 (`F*`)", "| 2", f"| {depth}"]
    row2 = {s.candidate.name: s.row() for s in result.grid}["F* | R*2"]
    assert f"{row2['report']:.3f} [{row2['low']:.3f}, {row2['high']:.3f}]" in table[3].split(" | ")[2]
    assert table[4].split(" | ")[4].startswith(f"{reported['M0B*']():.3f}")  # MASK0-ALL at k = depth only
    assert table[3].split(" | ")[4].strip(" |") == ""
    assert "\n".join(table).count("(chosen)") == 4  # one per config (F* is the k = 0 row)
    assert plot_curves({"tiny": payload}, tmp_path / "curves.png").stat().st_size > 0
    assert plot_study({"tiny": payload}, tmp_path / "bars.png").stat().st_size > 0  # five configs: five slots

    plain = run_template(encoder, task, cands, None)
    with pytest.raises(ValueError, match="--report-grid"):
        curves_table({"depth": depth, "metric": task.metric, "templates": [template_row(plain)]})
    with pytest.raises(ValueError, match=r"no template 'PromptEOL' in this study JSON; it has \['instruction'\]"):
        curves_table(payload, template="PromptEOL")


def test_curves_mark_each_configs_own_choice_only():
    """A spec chosen by one config (or the suggestion) is not marked in another config's column."""
    rows = [
        {"family": "F*", "spec": "F*", "name": "F*", "exit_layer": None, "report": 0.5, "low": 0.4, "high": 0.6},
        {"family": "INPLACE-BIDIR", "spec": "F* | B*2", "name": "F* | B*2", "exit_layer": None, "report": 0.6,
         "low": 0.5, "high": 0.7},
        {"family": "MASK0-BIDIR", "spec": "F* | M0B*2", "name": "F* | M0B*2", "exit_layer": None, "report": 0.7,
         "low": 0.6, "high": 0.8},
    ]  # fmt: skip
    chosen = {"F*": "F*", "INPLACE-BIDIR": "F* | B*2", "MASK0-BIDIR": "F* | M0B*2", "SUGGESTED": "F* | B*2"}
    table = curves_table({"depth": 4, "rows": rows, "chosen": chosen}).splitlines()
    assert table[3] == "| 2 | 0.600 [0.500, 0.700] (chosen) | 0.700 [0.600, 0.800] (chosen) |"
    chosen["MASK0-BIDIR"] = "F* | M0B*4"  # chosen elsewhere: its k = 2 cell loses the mark
    table = curves_table({"depth": 4, "rows": rows, "chosen": chosen}).splitlines()
    assert table[3] == "| 2 | 0.600 [0.500, 0.700] (chosen) | 0.700 [0.600, 0.800] |"


def test_best_config_may_be_any_converted_config():
    specs = {"F*": "F*", "INPLACE-BIDIR": "F* | B*2", "INPLACE-BACK": "F* | R*2", "MASK0-ALL": "M0B*"}
    chosen = {f: Candidate(f, spec) for f, spec in specs.items()}
    scores = {chosen["F*"]: 0.1, chosen["INPLACE-BIDIR"]: 0.3, chosen["INPLACE-BACK"]: 0.5, chosen["MASK0-ALL"]: 0.2}
    assert exit_configs_of(["F*", "best"], chosen, scores) == ["F*", "INPLACE-BACK"]
    encoder, task = tiny_encoder(), sts_task()
    cands = grid(encoder.depth, ks=[2], configs=["INPLACE-BIDIR", "INPLACE-BACK", "MASK0-ALL"])
    result = run_template(encoder, task, cands, None)
    best = max(("INPLACE-BIDIR", "INPLACE-BACK", "MASK0-ALL"), key=lambda f: result.chosen[f].choose)
    assert template_row(result)["best_family"] == best
    (row,) = [r for r in comparisons([result]) if r["comparison"] == "template+mask vs template alone"]
    assert row["a"] == f"instruction / {best}"


def test_progress_bars_are_shown_on_request_for_long_passes(capsys):
    encoder, texts = tiny_encoder(), sentences(10)
    EmbeddingCache(encoder, batch_size=1).vectors([Candidate("F*", "F*")], texts)
    assert "%|" not in capsys.readouterr().err  # the library's default: no bar
    EmbeddingCache(encoder, batch_size=1, show_progress_bar=True).vectors([Candidate("F*", "F*")], texts)
    assert "10/10" in capsys.readouterr().err  # ten batches of one text
    EmbeddingCache(encoder, batch_size=5, show_progress_bar=True).vectors([Candidate("F*", "F*")], texts)
    assert "%|" not in capsys.readouterr().err  # two batches: too short for a bar


def test_the_study_command_shows_progress_unless_told_not_to(tmp_path):
    import argparse

    from nosink.evals.study import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["demo", "--data", str(tmp_path), "--out", str(tmp_path)]
    assert parser.parse_args(base).progress is True
    assert parser.parse_args([*base, "--no-progress"]).progress is False


def study_payload(results, **meta):
    """A study JSON as the driver writes it (the keys the renderers read), for one model on one task."""
    payload = {"model": "tiny", "task": "tiny-sts", "data": {"n": 12}, "seed": 0, **meta}
    return payload | {"templates": [template_row(r) for r in results], "comparisons": comparisons(results)}


def test_interplay_reads_the_mask_and_the_template_from_each_runs_comparisons(tmp_path):
    encoder, task = tiny_encoder(), sts_task()
    base = run_template(encoder, task, grid(encoder.depth, ks=[2], k0s=[1]), None)
    keep = {f: s.candidate for f, s in base.chosen.items()}
    prompt, echo = (run_template(encoder, task, [], t, restrict=keep) for t in ("PromptEOL", "Echo"))
    first, second, alone = study_payload([base, prompt]), study_payload([base, echo]), study_payload([echo])
    entries = interplay([first, second])  # the no-template rows are in both runs: read once
    assert [e["template"] for e in entries] == [NO_TEMPLATE, "PromptEOL", "Echo"]
    reported = {(r.template, f): s.report() for r in (base, prompt, echo) for f, s in r.chosen.items()}
    for e, r in zip(entries, (base, prompt, echo), strict=True):
        best = r.chosen[template_row(r)["best_family"]]
        assert e["alone"]["report"] == pytest.approx(reported[r.template, "F*"])
        assert e["with_mask"]["name"] == best.candidate.name
        assert e["mask"]["delta"] == pytest.approx(best.report() - r.chosen["F*"].report(), abs=1e-9)
        if r is base:
            assert e["prompt"] is None and e["verdict"] == f"mask {effect(e['mask'])}"
        else:
            on_top = best.report() - reported[NO_TEMPLATE, best.candidate.config]
            assert e["prompt"]["delta"] == pytest.approx(on_top, abs=1e-9)
            words = (effect(e["mask"]), effect(e["prompt"]))
            assert e["verdict"] == ("add up" if words == ("adds", "adds") else "mask {}, template {}".format(*words))
    (echo_alone,) = interplay([alone])  # a template run without the no-template rows: no "on top" comparison
    assert echo_alone["prompt"] is None and echo_alone["mask"] == entries[2]["mask"]

    rows = {"tiny, STS": [first, second], "tiny again, STS": [alone]}
    table = interplay_table(rows).splitlines()
    assert len(table) == 2 + 4 and table[3].startswith("| tiny, STS | PromptEOL | ")
    e = entries[1]
    assert f"{e['alone']['report']:.3f} [{e['alone']['low']:.3f}, {e['alone']['high']:.3f}]" in table[3]
    assert f"{e['mask']['delta']:+.3f} [{e['mask']['low']:+.3f}, {e['mask']['high']:+.3f}]" in table[3]
    assert table[3].endswith(f"| {e['verdict']} |") and table[-1].endswith(" | - | " + echo_alone["verdict"] + " |")
    counts = {
        line.split(" | ")[0][2:]: line.strip("| ").split(" | ")[1:]
        for line in interplay_counts_table(rows).splitlines()[2:]
    }
    assert counts["Echo"][0] == "2" and sum(map(int, counts["Echo"][1:4])) == 2  # two rows, each mask word once
    assert sum(map(int, counts["Echo"][4:7])) == 1  # "on top" only where the no-template rows were run
    assert counts["Echo"][8] == "1" and counts[NO_TEMPLATE][4:] == ["-"] * 5  # no pair; nothing on top of nothing
    assert plot_interplay(rows, tmp_path / "interplay.png").stat().st_size > 0
    only_base = {"tiny, STS": [study_payload([base])]}  # no template: the second panel says so
    assert plot_interplay(only_base, tmp_path / "base.png").stat().st_size > 0
    with pytest.raises(ValueError, match="no rows to plot"):
        plot_interplay({}, tmp_path / "none.png")


def test_interplay_refuses_runs_that_cannot_be_read_together():
    encoder, task = tiny_encoder(), sts_task()
    base = run_template(encoder, task, grid(encoder.depth, ks=[2], k0s=[1]), None)
    payload = study_payload([base])
    with pytest.raises(ValueError, match="no study JSON given"):
        interplay([])
    with pytest.raises(ValueError, match="differ in data, seed"):
        interplay([payload, payload | {"data": {"n": 99}, "seed": 1}])
    with pytest.raises(ValueError, match="JSON 1 is not a study JSON with templates"):
        interplay([payload, {k: v for k, v in payload.items() if k not in ("templates", "comparisons")}])
    score = json.loads(json.dumps(payload))
    score["templates"][0]["chosen"]["F*"]["report"] += 0.01
    with pytest.raises(ValueError, match=r"'instruction', family F\*: JSON 0 has 'F\*' reporting .*JSON 1 'F\*'"):
        interplay([payload, score])
    spec = json.loads(json.dumps(payload))
    spec["templates"][0]["chosen"]["MASK0&BIDIR"]["name"] = "F* | M0B*2"
    with pytest.raises(ValueError, match="family MASK0&BIDIR: JSON 0 has 'F\\* \\| B \\| M0B'"):
        interplay([payload, spec])
    best = json.loads(json.dumps(payload))
    other = "MASK0&BIDIR" if payload["templates"][0]["best_family"] == "INPLACE-BIDIR" else "INPLACE-BIDIR"
    best["templates"][0]["best_family"] = other
    with pytest.raises(ValueError, match=f"JSON 0 chose .* and JSON 1 {other}"):
        interplay([payload, best])
    only_f = run_template(encoder, task, [], "PromptEOL", restrict={"F*": Candidate("F*", "F*")})
    with pytest.raises(ValueError, match="'PromptEOL' in JSON 0 needs F\\* and a converted family"):
        interplay([study_payload([only_f])])
    unscored = json.loads(json.dumps(payload))
    unscored["comparisons"] = []
    with pytest.raises(ValueError, match="no 'template\\+mask vs template alone' comparison"):
        interplay([unscored])


def test_interplay_reads_the_copy_that_has_the_template_on_top_of_the_mask():
    """A template in two runs, once alone and once beside the no-template rows: the pair is read, in any order."""
    encoder, task = tiny_encoder(), sts_task()
    base = run_template(encoder, task, grid(encoder.depth, ks=[2], k0s=[1]), None)
    prompt = run_template(encoder, task, [], "PromptEOL", restrict={f: s.candidate for f, s in base.chosen.items()})
    alone, both = study_payload([prompt]), study_payload([base, prompt])
    for order in ([alone, both], [both, alone]):
        (entry,) = [e for e in interplay(order) if e["template"] == "PromptEOL"]
        assert entry["prompt"] is not None and entry["prompt"]["b"].startswith(f"{NO_TEMPLATE} / ")


def test_interplay_reads_study_jsons_with_suggestions_exits_and_curves():
    """The comparisons interplay reads are found among every other kind a study JSON holds."""
    encoder, task = tiny_encoder(), sts_task()
    depth = encoder.depth
    cands = grid(depth, ks=[2, depth], k0s=[1], configs=["INPLACE-BIDIR", "INPLACE-BACK", "MASK0&BIDIR"])
    suggestion = Candidate("SUGGESTED", "F* | B*2 | M0B*2")
    base = run_template(encoder, task, cands, None, suggestion=suggestion, exits=[2], report_grid=True)
    prompt = run_template(encoder, task, [], "PromptEOL", restrict={f: s.candidate for f, s in base.chosen.items()})
    payload = study_payload([base, prompt]) | {"comparisons": comparisons([base, prompt], depth=depth)}
    assert any(" at k=" in c["comparison"] for c in payload["comparisons"])
    assert any(c["comparison"] == "suggested vs best swept" for c in payload["comparisons"])
    for e, r in zip(interplay([payload]), (base, prompt), strict=True):
        best = template_row(r)["best_family"]
        assert best != "SUGGESTED" and e["with_mask"]["name"] == r.chosen[best].candidate.name
        assert (e["mask"]["a"], e["mask"]["b"]) == (f"{r.template} / {best}", f"{r.template} / F*")
        assert e["mask"]["delta"] == pytest.approx(r.chosen[best].report() - r.chosen["F*"].report(), abs=1e-9)


@pytest.mark.parametrize(
    ("mask", "prompt", "verdict"),
    [
        ((0.01, 0.05), (0.02, 0.04), "add up"),
        ((0.01, 0.05), (-0.01, 0.04), "mask adds, template ties"),
        ((-0.01, 0.05), (-0.09, -0.04), "mask ties, template costs"),
        ((-0.05, -0.01), None, "mask costs"),
    ],
)
def test_interplay_verdicts_follow_the_intervals(mask, prompt, verdict):
    row = {"family": "F*", "spec": "F*", "name": "F*", "choose": 0.5, "report": 0.5, "low": 0.4, "high": 0.6}
    converted = row | {"family": "INPLACE-BIDIR", "spec": "F* | B*2", "name": "F* | B*2"}
    chosen = {"F*": row, "INPLACE-BIDIR": converted}
    templates = [{"template": t, "chosen": chosen, "best_family": "INPLACE-BIDIR"} for t in (NO_TEMPLATE, "T")]

    def compared(kind, template, b, interval):
        return {"comparison": kind, "a": f"{template} / INPLACE-BIDIR", "b": b, "delta": sum(interval) / 2,
                "low": interval[0], "high": interval[1], "p_value": 0.5}  # fmt: skip

    found = [compared("template+mask vs template alone", NO_TEMPLATE, f"{NO_TEMPLATE} / F*", (0.01, 0.02))]
    found.append(compared("template+mask vs template alone", "T", "T / F*", mask))
    if prompt is not None:
        found.append(compared("template+mask vs mask alone", "T", f"{NO_TEMPLATE} / INPLACE-BIDIR", prompt))
    payload = {"model": "m", "task": "t", "data": {}, "seed": 0, "templates": templates, "comparisons": found}
    assert interplay([payload])[1]["verdict"] == verdict


def test_ner_table_marks_each_configs_own_choice_only():
    """A suggestion equal to a swept spec that its config did not choose is marked in its own row only."""
    from nosink.evals.study import ner_table

    def row(config, name, report):
        return {"family": config, "name": name, "choose": report, "report": report, "low": report - 0.1,
                "high": report + 0.1, "per_seed": [report]}  # fmt: skip

    rows = [row("F*", "F*", 0.4), row("MASK0&BIDIR", "F* | B | M0B", 0.5), row("MASK0&BIDIR", "F* | M0B*2", 0.6)]
    rows.append(row("SUGGESTED", "F* | B | M0B", 0.5))
    chosen = {"F*": "F*", "MASK0&BIDIR": "F* | M0B*2", "SUGGESTED": "F* | B | M0B"}
    marked = [
        line.split(" | ")[0] for line in ner_table({"rows": rows, "chosen": chosen}).splitlines() if "(chosen)" in line
    ]
    assert marked == ["| F*", "| MASK0&BIDIR", "| SUGGESTED"]
    assert "`F* \\| B \\| M0B` |" in ner_table({"rows": rows, "chosen": chosen}).splitlines()[3]


# ---------------------------------------------------------------------------------------- retrieval as MTEB scores it

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def write_varied_beir(folder, n_docs=9, n_queries=4):
    """A BEIR folder whose documents and queries differ in every word (no ties in a tiny model's ranking)."""
    (folder / "qrels").mkdir(parents=True)
    docs = sentences(n_docs, seed=11, length=7)
    titles = sentences(n_docs, seed=12, length=2)
    rows = [{"_id": f"d{i}", "title": titles[i] if i % 3 else "", "text": t} for i, t in enumerate(docs)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    queries = [{"_id": f"q{i}", "text": t} for i, t in enumerate(sentences(n_queries, seed=13, length=3))]
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    qrels = ["query-id\tcorpus-id\tscore"] + [f"q{i}\td{2 * i}\t1" for i in range(n_queries)] + ["q0\td5\t2"]
    (folder / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n")


def test_full_corpus_ndcg_at_10_is_mtebs_own_score(tmp_path, monkeypatch):
    """The study's nDCG@10 over every test query on the full corpus is the score mteb's own run gives."""
    import sys

    from nosink.evals.mteb_run import run_mteb

    monkeypatch.setitem(sys.modules, "nosink.models.st", None)  # mteb calls NosinkMTEBEncoder, as in test_mteb
    write_varied_beir(tmp_path / "data" / "scifact")
    encoder = tiny_encoder()
    summary = run_mteb(encoder, ["SciFact"], data_dir=tmp_path / "data", out_dir=tmp_path / "out")
    entry = summary["tasks"]["SciFact"]
    assert entry["main_score"] == "ndcg_at_10", entry
    mtebs = next(iter(entry["scores"].values()))

    task = load_retrieval("SciFact", tmp_path / "data" / "scifact")
    assert task.mode == "full" and task.quick is None and len(task.corpus) == 9
    cache, cand = EmbeddingCache(encoder, None, task.instruction), Candidate("F*", "F*")
    ndcg = task.per_query([*task.choose, *task.report], lambda texts: cache.vectors([cand], texts)["F*"])
    assert 0 < ndcg.mean() < 1
    assert ndcg.mean() == pytest.approx(mtebs, abs=1e-5)  # mteb rounds its mean to 5 decimals


def test_retrieval_scores_a_long_corpus_in_blocks_of_queries_alike():
    base = retrieval_task()
    rng = np.random.default_rng(0)
    table = {t: rng.normal(size=6) for _, t in [*base.choose, *base.report, *base.corpus]}

    def vectors(texts):
        return np.stack([table[t] for t in texts])

    def task(**kwargs):
        return RetrievalTask(base.name, base.choose, base.report, base.corpus, base.relevant, **kwargs)

    queries = [*base.choose, *base.report]
    whole = base.per_query(queries, vectors)
    np.testing.assert_allclose(task(query_chunk=1).per_query(queries, vectors), whole)
    # a top 3 of 4 documents (argpartition) in blocks of one query or all: the same rankings
    np.testing.assert_allclose(
        task(query_chunk=1, top_k=3).per_query(queries, vectors), task(top_k=3).per_query(queries, vectors)
    )


def test_quick_mode_is_labelled_in_the_task_the_json_and_the_table(tmp_path):
    from nosink.evals.study import results_table, retrieval_setting
    from nosink.evals.study.driver import retrieval_mode

    write_beir(tmp_path / "scifact")
    full = load_retrieval("SciFact", tmp_path / "scifact")
    quick = load_retrieval("SciFact", tmp_path / "scifact", n_other=2, doc_words=3)
    assert full.mode == "full" and quick.mode == "quick"
    assert "corpus of 9 of 12 documents (every judged one + 2 random)" in quick.quick and "first 3 words" in quick.quick
    # fewer queries alone is a quick mode too (the mean is no longer over the data set's queries)
    assert load_retrieval("SciFact", tmp_path / "scifact", n_queries=4).mode == "quick"

    data_full, data_quick = retrieval_mode(full, 512), retrieval_mode(quick, 512)
    assert data_full["mteb_comparable"] and data_full["corpus"].startswith("full: all 12 documents")
    assert "512 tokens" in data_full["truncation"]
    assert not data_quick["mteb_comparable"] and data_quick["corpus"].startswith("QUICK MODE, not comparable")
    row = {"name": "F*", "choose": 0.5, "report": 0.5, "low": 0.4, "high": 0.6}
    for data, opening in ((data_full, "Corpus: full"), (data_quick, "Corpus: QUICK MODE")):
        payload = {"metric": "ndcg@10", "data": data, "templates": [{"template": "instruction", "chosen": {"F*": row}}]}
        assert results_table(payload).startswith(opening)
    # a JSON from before the modes: its cuts say it was the quick mode
    old = {"metric": "ndcg@10", "data": {"n_queries": 60, "n_other_documents": 90, "doc_words": 64, "n_documents": 150}}
    assert retrieval_setting(old).startswith("QUICK MODE") and retrieval_setting({"metric": "spearman"}) is None


def test_the_study_command_takes_the_quick_mode_and_the_token_limit():
    import argparse

    from nosink.evals.study.cli import add_arguments, options_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    o = options_from_args(parser.parse_args(["m", "--data", "d", "--out", "o"]))
    assert (o.ret_queries, o.ret_other, o.ret_doc_words, o.max_length) == (None, None, None, 512)
    o = options_from_args(
        parser.parse_args(["m", "--data", "d", "--out", "o", "--ret-other", "90", "--max-length", "256"])
    )
    assert o.ret_other == 90 and o.max_length == 256


@pytest.mark.parametrize(("name", "docs", "queries"), [("SciFact", 5183, 300), ("NFCorpus", 3633, 323)])
def test_the_shared_retrieval_sets_load_whole_by_default(name, docs, queries):
    folder = SHARED / name.lower()
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    task = load_retrieval(name, folder)
    assert task.mode == "full" and len(task.corpus) == docs and len(task.choose) + len(task.report) == queries
