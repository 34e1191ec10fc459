"""benchmarks/retrieval_full.py: rankings made where the model runs (no mteb there), scored here as the study scores."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from test_study import write_varied_beir
from tiny import tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder
from nosink.evals.study import Candidate, EmbeddingCache, load_retrieval, plot_retrieval
from nosink.evals.study.plots import CHOSEN, _retrieval_bars

pytest.importorskip("mteb")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "retrieval_full.py"


def script():
    spec = importlib.util.spec_from_file_location("retrieval_full", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(monkeypatch, *argv):
    monkeypatch.setattr(sys, "argv", ["retrieval_full.py", *map(str, argv)])
    script().main()


def test_rankings_made_without_mteb_score_as_the_study_scores(tmp_path, monkeypatch):
    write_varied_beir(tmp_path / "scifact", n_docs=24, n_queries=12)
    model = tmp_path / "model"
    tiny_decoder("llama").save_pretrained(model)
    tiny_tokenizer().save_pretrained(model)
    specs = ["F*", "F* | B*2"]
    run(monkeypatch, "export", "SciFact", tmp_path / "scifact", tmp_path / "task.json")
    with monkeypatch.context() as m:  # the encoding machine has no mteb
        m.setitem(sys.modules, "mteb", None)
        run(m, "embed", tmp_path / "task.json", model, "--specs", *specs, "--prepend", 0, 1, "--device", "cpu",
            "--top-k", 5, "--out", tmp_path / "ranked")  # fmt: skip
    run(monkeypatch, "score", tmp_path / "task.json", tmp_path / "ranked", tmp_path / "scores.json")
    payload = json.loads((tmp_path / "scores.json").read_text())
    rows = payload["results"]
    assert [(r["spec"], r["prepend"]) for r in rows] == [("F*", 0), ("F* | B*2", 0), ("F*", 1), ("F* | B*2", 1)]

    task = load_retrieval("SciFact", tmp_path / "scifact")
    task = type(task)(task.name, task.choose, task.report, task.corpus, task.relevant, task.query_instruction, top_k=5)
    queries = [*task.choose, *task.report]
    plain = EncoderFromDecoder.from_pretrained(model, "F*")
    for row in rows:
        encoder = plain if not row["prepend"] else EncoderFromDecoder.from_model(
            plain.decoder, "F*", plain.tokenizer, prepend=row["prepend"]
        )  # fmt: skip
        cache, cand = EmbeddingCache(encoder, None, task.instruction), Candidate("x", row["spec"])
        ndcg = task.per_query(queries, lambda texts, c=cache, k=cand: c.vectors([k], texts)[k.name])
        assert row["ndcg_at_10_all_queries"] == pytest.approx(ndcg.mean(), abs=1e-4)
        assert row["choose_half"] == pytest.approx(ndcg[: len(task.choose)].mean(), abs=1e-4)
        assert row["report_half"] == pytest.approx(ndcg[len(task.choose) :].mean(), abs=1e-4)
        assert row["report_low"] <= row["report_half"] <= row["report_high"]
    assert payload["chosen"] == max(rows, key=lambda r: r["choose_half"])
    gains = {g["spec"]: g for g in payload["prepend"]}
    assert set(gains) == set(specs)
    for spec, gain in gains.items():
        at = {r["prepend"]: r for r in rows if r["spec"] == spec}
        assert gain["chosen_depth"] == 1
        assert gain["gain"] == pytest.approx(at[1]["report_half"] - at[0]["report_half"], abs=2e-4)
        assert gain["low"] <= gain["gain"] <= gain["high"]


def test_score_refuses_rankings_of_other_queries(tmp_path, monkeypatch):
    write_varied_beir(tmp_path / "scifact", n_docs=9, n_queries=6)
    run(monkeypatch, "export", "SciFact", tmp_path / "scifact", tmp_path / "task.json")
    meta = {"configs": [{"spec": "F*", "prepend": 0}], "template": None, "queries": ["q0", "elsewhere"]}
    (tmp_path / "ranked").mkdir()
    idx = np.zeros((2, 3), np.int32)
    np.savez(tmp_path / "ranked" / "rankings.npz", meta=np.array(json.dumps(meta)), idx0=idx, sim0=idx.astype("f4"))
    with pytest.raises(SystemExit, match="not SciFact's test queries"):
        run(monkeypatch, "score", tmp_path / "task.json", tmp_path / "ranked", tmp_path / "scores.json")


def test_several_folders_score_as_one_set(tmp_path, monkeypatch):
    write_varied_beir(tmp_path / "scifact", n_docs=16, n_queries=10)
    model = tmp_path / "model"
    tiny_decoder("llama").save_pretrained(model)
    tiny_tokenizer().save_pretrained(model)
    run(monkeypatch, "export", "SciFact", tmp_path / "scifact", tmp_path / "task.json")
    common = ["--device", "cpu", "--top-k", 5]
    run(monkeypatch, "embed", tmp_path / "task.json", model, "--specs", "F*", "--prepend", 0, 1, *common,
        "--out", tmp_path / "one")  # fmt: skip
    run(monkeypatch, "embed", tmp_path / "task.json", model, "--specs", "F*", "F* | B*2", *common,
        "--out", tmp_path / "two")  # fmt: skip
    for name in ("one", "two"):
        run(monkeypatch, "score", tmp_path / "task.json", tmp_path / name, tmp_path / f"{name}.json")
    run(monkeypatch, "score", tmp_path / "task.json", tmp_path / "one", tmp_path / "two", tmp_path / "both.json")
    alone = [r for name in ("one", "two") for r in json.loads((tmp_path / f"{name}.json").read_text())["results"]]
    both = json.loads((tmp_path / "both.json").read_text())
    rows = both["results"]
    assert [(r["spec"], r["prepend"]) for r in rows] == [("F*", 0), ("F*", 1), ("F* | B*2", 0)]
    assert rows == alone[:2] + alone[3:]  # the second folder's F* at depth 0 repeats the first's
    assert alone[0] == alone[2]  # and scores the same
    assert [(r["spec"], r["prepend"], r["folder"], r["same_rankings"]) for r in both["repeated"]] == [
        ("F*", 0, "two", True)
    ]
    assert both["chosen"] == max(rows, key=lambda r: r["choose_half"])
    assert [(g["spec"], g["chosen_depth"]) for g in both["prepend"]] == [("F*", 1)]
    assert len(both["embed"]) == 2 and both["template"] is None

    # the study's figure reads these files: one model's files chosen over together, as score does with folders
    one, two = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("one", "two"))
    bars = _retrieval_bars([one, two])
    assert list(bars) == ["F*, no template", CHOSEN] and bars[CHOSEN] == {"template": None, **both["chosen"]}
    runs = {"SciFact": {"tiny": [both], "tiny, split": [one, two]}, "again": {"tiny": [one]}}
    assert plot_retrieval(runs, tmp_path / "bars.png", {"trained": {"SciFact": one}}).stat().st_size > 0
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_retrieval({"SciFact": {}}, tmp_path / "none.png")
    with pytest.raises(ValueError, match="hold no results"):
        plot_retrieval({"SciFact": {"tiny": [{**one, "results": []}]}}, tmp_path / "empty.png")

    run(monkeypatch, "embed", tmp_path / "task.json", model, "--device", "cpu", "--top-k", 4, "--out", tmp_path / "k4")
    with pytest.raises(SystemExit, match="top_k is 4"):
        run(monkeypatch, "score", tmp_path / "task.json", tmp_path / "one", tmp_path / "k4", tmp_path / "x.json")
    other = tmp_path / "other"  # another model: its rows must not pass for the first one's
    tiny_decoder("llama", seed=1).save_pretrained(other)
    tiny_tokenizer().save_pretrained(other)
    run(monkeypatch, "embed", tmp_path / "task.json", other, *common, "--out", tmp_path / "elsewhere")
    with pytest.raises(SystemExit, match="its model is 'other'"):
        run(monkeypatch, "score", tmp_path / "task.json", tmp_path / "one", tmp_path / "elsewhere", tmp_path / "x.json")
    with pytest.raises(SystemExit, match="is a folder"):  # the JSON file's name forgotten
        run(monkeypatch, "score", tmp_path / "task.json", tmp_path / "one", tmp_path / "two")

    # a configuration that ranks otherwise in its second folder: the first kept, the difference recorded
    data = dict(np.load(tmp_path / "two" / "rankings.npz"))
    data["sim0"] = data["sim0"] + 0.5
    (tmp_path / "two-moved").mkdir()
    np.savez(tmp_path / "two-moved" / "rankings.npz", **data)
    run(monkeypatch, "score", tmp_path / "task.json", tmp_path / "one", tmp_path / "two-moved", tmp_path / "m.json")
    moved = json.loads((tmp_path / "m.json").read_text())
    assert moved["results"] == rows and [r["same_rankings"] for r in moved["repeated"]] == [False]
