"""Sweeps: the configurations' specs, the best pick, tables and plots, and an NER sweep end to end."""

import json

import pytest
from test_ner import make_sentences
from tiny import tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder, parse_spec
from nosink.evals.ner import evaluate_ner
from nosink.evals.run_sweeps import ner_sweep
from nosink.evals.sweeps import SweepPoint, best, config_specs, default_ks, plot_sweep, read_table, write_table

pytest.importorskip("seqeval")  # the eval extra
pytest.importorskip("matplotlib")  # the eval extra


def test_config_specs():
    assert default_ks(22) == [1, 2, 4, 6, 8, 10, 12, 16, 20, 22]
    assert [str(c.spec) for c in config_specs("INPLACE-BACK", 4, [4, 1, 4])] == ["F* | R", "F* | R*4"]
    assert [c.k for c in config_specs("EXTEND-BIDIR", 30, [2, 4, 6, 8])] == [2, 4]  # EXTEND stops at 5
    grid = config_specs("MASK0&BIDIR", 10, [2, 3], [1, 3])
    assert [(c.k, c.k0, str(c.spec)) for c in grid] == [
        (2, 1, "F* | B | M0B"),
        (3, 1, "F* | B*2 | M0B"),
        (3, 3, "F* | M0B*3"),
    ]
    with pytest.raises(ValueError, match="unknown configuration 'SIDEWAYS'"):
        config_specs("SIDEWAYS", 4)


def test_best_and_table(tmp_path):
    cs = [
        SweepPoint("MASK0-BIDIR", 2, parse_spec("F* | M0B*2"), scores={"f1": 0.5}),
        SweepPoint("MASK0-BIDIR", 4, parse_spec("F* | M0B*4"), scores={"f1": 0.7}),
        SweepPoint("MASK0-BIDIR", 6, parse_spec("F* | M0B*6"), scores={"f1": 0.7}),
        SweepPoint("BASELINE", 0, parse_spec("F*"), scores={"f1": 0.4}),
    ]
    chosen = best(cs, "f1")
    assert chosen["MASK0-BIDIR"].k == 4 and chosen["BASELINE"].k == 0  # ties go to the smaller k
    json_path, csv_path = write_table(cs, tmp_path, "t", {"model": "x"})
    data = json.loads(json_path.read_text())
    assert data["meta"] == {"model": "x"} and data["rows"][1] == {
        "config": "MASK0-BIDIR", "k": 4, "k0": None, "spec": "F* | M0B*4", "f1": 0.7,
    }  # fmt: skip
    assert csv_path.read_text().splitlines()[0] == "config,k,k0,spec,f1"
    again, meta = read_table(json_path)
    assert again == cs and [c.scores for c in again] == [c.scores for c in cs] and meta == {"model": "x"}
    png = plot_sweep(cs, "f1", tmp_path / "p.png", title="t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ner_sweep_end_to_end(tmp_path):
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer())
    train, evaluation = make_sentences(30, seed=1), make_sentences(15, seed=2)
    cs = ner_sweep(
        encoder, train, evaluation, ["INPLACE-BIDIR", "MASK0&BIDIR"], tmp_path, ks=[1, 2], k0s=[1],
        meta={"model": "tiny"}, show_progress_bar=False,
    )  # fmt: skip
    assert [str(c.spec) for c in cs] == ["F*", "F* | B", "F* | B*2", "F* | M0B", "F* | B | M0B"]
    for c in cs:  # each score equals the probe run alone on an encoder built for that spec only
        alone = EncoderFromDecoder(encoder.decoder, c.spec, encoder.tokenizer)
        (one,) = evaluate_ner(alone, train, evaluation, show_progress_bar=False)
        assert (c.scores["f1"], c.scores["precision"], c.scores["recall"]) == pytest.approx(
            (one.f1, one.precision, one.recall), abs=1e-9
        )
    assert len({c.scores["f1"] for c in cs}) > 1
    meta = json.loads((tmp_path / "ner_sweep.json").read_text())["meta"]
    assert meta["n_train"] == 30 and meta["model"] == "tiny" and set(meta["best"]) == {
        "BASELINE", "INPLACE-BIDIR", "MASK0&BIDIR",
    }  # fmt: skip
    assert (tmp_path / "ner_sweep.png").is_file()


def test_mteb_sweep_end_to_end(tmp_path):
    pytest.importorskip("mteb")
    from test_mteb import write_data

    from nosink.evals.run_sweeps import mteb_sweep

    write_data(tmp_path / "data")
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer())
    cs = mteb_sweep(encoder, "STSBenchmark", ["MASK0-BIDIR"], tmp_path / "out", tmp_path / "data", ks=[1, 2])
    assert [str(c.spec) for c in cs] == ["F*", "F* | M0B", "F* | M0B*2"]
    assert all(-1 <= c.scores["cosine_spearman"] <= 1 for c in cs)
    meta = json.loads((tmp_path / "out" / "mteb_sweep.json").read_text())["meta"]
    assert meta["main_score"] == "cosine_spearman" and meta["source"].startswith("local:")
    assert (tmp_path / "out" / "mteb_sweep.png").is_file()
    with pytest.raises(RuntimeError, match="SciFact was skipped"):
        mteb_sweep(encoder, "SciFact", ["MASK0-BIDIR"], tmp_path / "out2", tmp_path / "data", ks=[1])


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("INPLACE-BIDIR", 30, [0, -3, 99]),
            "ks [0, -3, 99] out of range: each must be an integer from 1 to the model's depth 30",
        ),
        (("MASK0-BIDIR", 30, [2, 31]), "ks [31] out of range"),
        (("MASK0-BIDIR", 30, [2.5]), "ks [2.5] out of range"),
        (("MASK0&BIDIR", 30, [4], [0, 2]), "k0s [0] out of range"),
        (("MASK0-BIDIR", 30, []), "ks [] out of range"),
        (("EXTEND-BACK", 30, [6, 8]), "EXTEND-BACK has no spec for ks=[6, 8]: EXTEND stops at k=5"),
        (("MASK0&BIDIR", 30, [2], [3]), "MASK0&BIDIR has no spec for ks=[2], k0s=[3]: every k0 is above every k"),
    ],
)
def test_a_grid_value_that_gives_no_spec_is_an_error_not_a_silent_drop(args, message):
    with pytest.raises(ValueError) as info:
        config_specs(*args)
    assert str(info.value).startswith(message)


def test_candidates_for_refuses_out_of_range_ks_instead_of_running_only_baseline():
    from nosink.evals.run_sweeps import candidates_for

    with pytest.raises(ValueError, match=r"ks \[0, -3, 99\] out of range"):
        candidates_for(["MASK0-BIDIR"], 30, [0, -3, 99])


def test_sweepable_configs_are_the_presets_that_take_k():
    from nosink import presets
    from nosink.evals.sweeps import CONFIGS

    assert list(CONFIGS) == [
        "INPLACE-BIDIR", "INPLACE-BACK", "INTER-BIDIR", "INTER-BACK", "EXTRA-BIDIR", "EXTRA-BACK",
        "EXTEND-BIDIR", "EXTEND-BACK", "MASK0-FOR", "MASK0-BIDIR",
    ]  # fmt: skip
    assert all(CONFIGS[name] is presets.PRESETS[name] for name in CONFIGS)


def test_refine_suggestion_is_exported_where_the_docs_link_it():
    import nosink.evals.run_sweeps as run_sweeps

    assert "refine_suggestion" in run_sweeps.__all__  # docs/guides/sinks.md imports and links it from here
