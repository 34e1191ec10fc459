"""The MTEB evaluation: mteb scores tiny local copies, the paper's instructions and normalisation, sweeps.

The tests that spy on ``EncoderFromDecoder.encode_specs`` run ``run_mteb`` as if nosink's
sentence-transformers module could not be imported (:func:`without_st_extra`), so that it takes
``NosinkMTEBEncoder``; the sentence-transformers path is checked against that one, score for score.
"""

import json
import logging
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny import WORDS, tiny_decoder, tiny_tokenizer

mteb = pytest.importorskip("mteb")

from scipy.stats import spearmanr  # noqa: E402

from nosink import EncoderFromDecoder, parse_spec  # noqa: E402
from nosink.evals import mteb_eval  # noqa: E402
from nosink.evals.mteb_model import NosinkMTEBEncoder, SpecSweepCache  # noqa: E402
from nosink.evals.mteb_run import run_mteb  # noqa: E402
from nosink.evals.mteb_tasks import PAPER_TASKS, format_instruction  # noqa: E402

SPEC = "F* | M0B*2"
STS_PROMPT = "Instruct: Retrieve semantically similar text.\nQuery: "
BANKING_PROMPT = "Instruct: Given an online banking query, find the corresponding intents.\nQuery: "
EMOTION_PROMPT = format_instruction(PAPER_TASKS["EmotionClassification"])
SCIFACT_PROMPT = "Instruct: Given a scientific claim, retrieve documents that support or refute the claim.\nQuery: "


def sentence(rng, n=5):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def write_data(root: Path) -> dict:
    """Tiny copies in the shared folders' formats: stsb/, banking77/, emotion/."""
    rng = random.Random(0)
    stsb = root / "stsb"
    stsb.mkdir(parents=True)
    pairs = [(f"{sentence(rng)} {i}", f"{sentence(rng)} x{i}", round(rng.uniform(0, 5), 2)) for i in range(16)]
    lines = [f"main-news\tfile\t2012\t{i:04d}\t{s:.2f}\t{a}\t{b}" for i, (a, b, s) in enumerate(pairs)]
    lines[3] += "\textra\tcolumns"  # some rows of the real file carry extra columns
    (stsb / "sts-test.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")

    categories = ["card_arrival", "exchange_rate", "lost_or_stolen_card"]
    banking = root / "banking77"
    banking.mkdir()
    (banking / "categories.json").write_text(json.dumps(categories), encoding="utf-8")
    rows = {}
    for split, n in (("train", 8), ("test", 4)):
        rows[split] = [(f"{sentence(rng)}, {c} {k}", c) for c in categories for k in range(n)]
        body = "".join(f'"{t}",{c}\n' for t, c in rows[split])  # quoted: the texts hold commas
        (banking / f"{split}.csv").write_text("text,category\n" + body, encoding="utf-8")

    emotion = root / "emotion"
    emotion.mkdir()
    for split, n in (("train", 6), ("val", 2), ("test", 3)):
        body = "".join(f"{sentence(rng)} {split}{k};{lab}\n" for lab in ("joy", "sadness") for k in range(n))
        (emotion / f"{split}.txt").write_text("text;label_name\n" + body, encoding="utf-8")
    return {"sts": pairs, "banking": rows}


def make_encoder(spec=SPEC):
    return EncoderFromDecoder(tiny_decoder("llama"), spec, tiny_tokenizer())


class EncodeSpy:
    """Wraps encoder.encode_specs (which encode() calls too), recording each call's instruction,
    normalisation, texts and output norms (of its one spec)."""

    def __init__(self, encoder):
        self.original = encoder.encode_specs
        self.calls = []

    def __call__(self, specs, sentences, instruction=None, **kwargs):
        out = self.original(specs, sentences, instruction, **kwargs)
        (vectors,) = out.values()
        self.calls.append(
            {
                "texts": list(sentences),
                "instruction": instruction,
                "normalize": kwargs.get("normalize_embeddings", False),
                "pooling": kwargs.get("pooling", "mean"),
                "norms": np.linalg.norm(vectors, axis=1),
            }
        )
        return out

    def for_texts(self, texts):
        texts = set(texts)
        return [c for c in self.calls if texts & set(c["texts"])]


def without_st_extra(mp):
    """As if the ``st`` extra were missing: ``import nosink.models.st`` fails, so ``run_mteb`` falls back to
    ``NosinkMTEBEncoder``. (mteb itself needs some sentence-transformers, not necessarily nosink's 6.x.)"""
    mp.setitem(sys.modules, "nosink.models.st", None)


def spied_encoder(monkeypatch):
    without_st_extra(monkeypatch)  # the spy sees encode_specs(): NosinkMTEBEncoder's path
    encoder = make_encoder()
    spy = EncodeSpy(encoder)
    monkeypatch.setattr(encoder, "encode_specs", spy)
    return encoder, spy


# With pytest-xdist this file's tests run on one worker (--dist loadgroup): its MTEB run is made once.
pytestmark = pytest.mark.xdist_group("test_mteb")


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("mteb")
    data = write_data(root / "data")
    encoder = make_encoder()
    spy = EncodeSpy(encoder)
    with pytest.MonkeyPatch.context() as mp:
        without_st_extra(mp)
        mp.setattr(encoder, "encode_specs", spy)
        tasks = ["STSBenchmark", "Banking77Classification", "EmotionClassification", "SciFact"]
        summary = run_mteb(encoder, tasks, data_dir=root / "data", out_dir=root / "out")
    return {"summary": summary, "spy": spy, "data": data, "encoder": encoder, "root": root}


def test_mteb_scores_local_copies(local_run):
    tasks = local_run["summary"]["tasks"]
    for name in ("STSBenchmark", "Banking77Classification", "EmotionClassification"):
        assert tasks[name]["status"] == "ok", tasks[name]
        assert tasks[name]["source"].startswith("local:")
    sts = tasks["STSBenchmark"]["scores"][SPEC]
    assert tasks["STSBenchmark"]["main_score"] == "cosine_spearman"
    assert -1.0 <= sts <= 1.0
    for name in ("Banking77Classification", "EmotionClassification"):
        assert tasks[name]["main_score"] == "accuracy"
        assert 0.0 <= tasks[name]["scores"][SPEC] <= 1.0
    assert local_run["summary"]["limit"] is None


def test_sts_score_is_spearman_of_our_cosines(local_run):
    # mteb's main score must be what our own vectors give on the pairs as written: the pairs, their
    # order and their gold scores were read correctly (the row with extra columns included).
    pairs = local_run["data"]["sts"]
    encode = local_run["encoder"].encode  # no longer spied
    a = encode([p[0] for p in pairs], STS_PROMPT, normalize_embeddings=True)
    b = encode([p[1] for p in pairs], STS_PROMPT, normalize_embeddings=True)
    from mteb.similarity_functions import pairwise_cos_sim

    cos = np.asarray(pairwise_cos_sim(a, b), dtype=np.float64)
    expected = spearmanr([p[2] for p in pairs], cos)[0]
    got = local_run["summary"]["tasks"]["STSBenchmark"]["scores"][SPEC]
    assert got == pytest.approx(expected, abs=1e-6)


def test_results_json_in_mteb_format(local_run):
    summary = local_run["summary"]
    for name, entry in summary["tasks"].items():
        if entry["status"] != "ok":
            continue
        path = Path(entry["files"][SPEC])
        assert path.is_file() and path.name == f"{name}.json"
        assert path.is_relative_to(local_run["root"] / "out" / "results" / "nosink__llama")
        raw = json.loads(path.read_text())
        assert raw["task_name"] == name and "mteb_version" in raw and "dataset_revision" in raw
        loaded = mteb.TaskResult.from_disk(path)  # mteb reads back its own format
        assert loaded.get_score() == pytest.approx(entry["scores"][SPEC], abs=1e-6)
        meta = json.loads((path.parent / "model_meta.json").read_text())
        assert meta["name"] == "nosink/llama"
        assert meta["experiment_kwargs"]["spec"] == SPEC
        assert meta["similarity_fn_name"] == "cosine"


def test_instructions_and_normalisation_per_task_type(local_run):
    spy, data = local_run["spy"], local_run["data"]
    sts_calls = spy.for_texts([p[0] for p in data["sts"]] + [p[1] for p in data["sts"]])
    assert len(sts_calls) == 2  # sentence1 and sentence2
    for call in sts_calls:
        assert call["instruction"] == STS_PROMPT
        assert call["normalize"] is True and call["pooling"] == "mean"
        np.testing.assert_allclose(call["norms"], 1.0, rtol=1e-5)

    banking_texts = [t for rows in data["banking"].values() for t, _ in rows]
    banking_calls = spy.for_texts(banking_texts)
    assert len(banking_calls) == 2  # train and test
    assert {t for c in banking_calls for t in c["texts"]} == set(banking_texts)
    seen = sts_calls + banking_calls
    emotion_calls = [c for c in spy.calls if all(c is not d for d in seen)]
    assert len(emotion_calls) == 2
    for calls, prompt in ((banking_calls, BANKING_PROMPT), (emotion_calls, EMOTION_PROMPT)):
        for call in calls:
            assert call["instruction"] == prompt
            assert call["normalize"] is False  # classification keeps raw embeddings
            assert not np.allclose(call["norms"], 1.0, rtol=1e-3)


def test_missing_task_is_skipped_with_reason(local_run):
    entry = local_run["summary"]["tasks"]["SciFact"]
    assert entry["status"] == "skipped"
    assert "no local copy" in entry["reason"] and "hub" in entry["reason"]
    assert not list((local_run["root"] / "out").rglob("SciFact.json"))
    assert local_run["summary"]["skipped"] == ["SciFact"]  # not counted with the tasks that ran


def test_unknown_task_is_refused_before_any_model_work(tmp_path, monkeypatch):
    # An unknown name used to be "skipped" while the other tasks ran, and `nosink eval mteb` exited 0.
    write_data(tmp_path / "data")
    encoder, spy = spied_encoder(monkeypatch)
    with pytest.raises(ValueError, match=r"unknown mteb task 'NoSuchTask'") as err:
        run_mteb(encoder, ["STSBenchmark", "NoSuchTask", "STSBenchmar"], tmp_path / "data", tmp_path / "out")
    assert "unknown mteb task 'STSBenchmar' (closest: STSBenchmark" in str(err.value)
    assert all(name in str(err.value) for name in PAPER_TASKS)  # the paper's tasks are listed
    assert spy.calls == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("bad", [{"limit": 0}, {"limit": True}, {"batch_size": 0}, {"max_length": -1}])
def test_bad_run_settings_are_refused(tmp_path, bad):
    with pytest.raises(ValueError, match=f"{next(iter(bad))} must be a positive integer"):
        run_mteb(make_encoder(), ["STSBenchmark"], out_dir=tmp_path, **bad)


def scifact_task():
    """SciFact with a tiny retrieval set already loaded (6 documents, 3 queries)."""
    from datasets import Dataset

    rng = random.Random(1)
    docs = {f"d{i}": sentence(rng, 8) for i in range(6)}
    queries = {f"q{i}": sentence(rng, 4) for i in range(3)}
    task = mteb.get_task("SciFact")
    task.dataset = {
        "default": {
            "test": {
                "corpus": Dataset.from_dict({"id": list(docs), "title": [""] * 6, "text": list(docs.values())}),
                "queries": Dataset.from_dict({"id": list(queries), "text": list(queries.values())}),
                "relevant_docs": {"q0": {"d0": 1}, "q1": {"d2": 1}, "q2": {"d4": 1, "d5": 1}},
                "top_ranked": None,
            }
        }
    }
    task.data_loaded = True
    return task, docs, queries


def length_classification_task():
    """Banking77Classification with 30 + 30 texts whose label is their length (1-2, 3-5 or 8-12 words).

    Mean-pooled vectors of longer texts are shorter, so normalising them changes the scores: a run that
    normalises where the paper does not scores differently here.
    """
    from datasets import Dataset, DatasetDict

    rng = random.Random(3)
    lengths = [(1, 2), (3, 5), (8, 12)]

    def rows(split):
        labels = [k % 3 for k in range(30)]
        texts = [f"{sentence(rng, rng.choice(lengths[label]))} {split}{k}" for k, label in enumerate(labels)]
        return Dataset.from_dict({"text": texts, "label": labels})

    task = mteb.get_task("Banking77Classification")
    task.dataset = DatasetDict({"train": rows("train"), "test": rows("test")})
    task.data_loaded = True
    return task


def test_retrieval_instruction_on_queries_only(tmp_path, monkeypatch):
    task, docs, queries = scifact_task()
    encoder, spy = spied_encoder(monkeypatch)
    summary = run_mteb(encoder, [task], out_dir=tmp_path)
    entry = summary["tasks"]["SciFact"]
    assert entry["status"] == "ok" and entry["source"] == "preloaded"
    assert 0.0 <= entry["scores"][SPEC] <= 1.0
    query_calls = spy.for_texts(queries.values())
    doc_calls = spy.for_texts(docs.values())
    assert query_calls and doc_calls
    assert all(c["instruction"] == SCIFACT_PROMPT and c["normalize"] for c in query_calls)
    assert all(c["instruction"] is None and c["normalize"] for c in doc_calls)


def test_limit_subsamples_every_split_and_is_recorded(tmp_path, monkeypatch):
    write_data(tmp_path / "data")
    encoder, spy = spied_encoder(monkeypatch)
    summary = run_mteb(encoder, ["STSBenchmark", "Banking77Classification"], tmp_path / "data", tmp_path / "out", 5)
    assert summary["limit"] == 5 and "5" in summary["note"]
    assert all(e["status"] == "ok" for e in summary["tasks"].values())
    assert [len(c["texts"]) for c in spy.calls] == [5, 5, 5, 5]  # sts1, sts2, banking train, banking test
    for entry in summary["tasks"].values():
        path = Path(entry["files"][SPEC])
        assert "limit_5" in str(path)
        meta = json.loads((path.parent / "model_meta.json").read_text())
        assert meta["experiment_kwargs"]["limit"] == 5


def test_home_in_paths_is_expanded_and_one_task_name_is_one_task(tmp_path, monkeypatch):
    write_data(tmp_path / "data")
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    summary = run_mteb(make_encoder(), "STSBenchmark", data_dir="~/data", out_dir="~/out", limit=4)
    assert list(summary["tasks"]) == ["STSBenchmark"] and summary["skipped"] == []
    assert summary["tasks"]["STSBenchmark"]["source"] == f"local:{tmp_path / 'data' / 'stsb'}"
    assert summary["out_dir"] == str(tmp_path / "out")
    assert Path(summary["tasks"]["STSBenchmark"]["files"][SPEC]).is_relative_to(tmp_path / "out")
    assert list((tmp_path / "cwd").iterdir()) == []  # no literal "~" folder


def test_sweep_encodes_each_text_once_for_all_specs(tmp_path, monkeypatch):
    data = write_data(tmp_path / "data")
    specs = ["F* | M0B*2", "F*|B*2"]
    names = [str(parse_spec(s)) for s in specs]
    encoder = make_encoder()
    calls = []
    original = encoder.encode_specs

    def spy(specs_, sentences, instruction=None, **kwargs):
        calls.append((list(specs_), list(sentences), instruction, kwargs["normalize_embeddings"]))
        return original(specs_, sentences, instruction, **kwargs)

    monkeypatch.setattr(encoder, "encode_specs", spy)
    summary = run_mteb(encoder, ["STSBenchmark"], tmp_path / "data", tmp_path / "out", specs=specs)
    entry = summary["tasks"]["STSBenchmark"]
    assert summary["specs"] == names and set(entry["scores"]) == set(names)

    # The first spec's two encode calls (sentence1, sentence2) fill the cache for both specs;
    # the second spec is served from it.
    assert len(calls) == 2
    assert all(c[0] == names and c[2] == STS_PROMPT and c[3] is True for c in calls)
    encoded = [t for c in calls for t in c[1]]
    assert len(encoded) == len(set(encoded))
    assert set(encoded) == {p[0] for p in data["sts"]} | {p[1] for p in data["sts"]}

    # Each spec's score equals a plain run of an encoder built with that spec, and has its own file.
    for i, spec in enumerate(names):
        single = run_mteb(make_encoder(spec), ["STSBenchmark"], tmp_path / "data", tmp_path / f"single{i}")
        assert entry["scores"][spec] == pytest.approx(single["tasks"]["STSBenchmark"]["scores"][spec], abs=1e-6)
        assert Path(entry["files"][spec]).is_file()
    assert entry["files"][names[0]] != entry["files"][names[1]]


def test_sweep_cache_keys_and_wrapper_protocol():
    encoder = make_encoder()
    cache = SpecSweepCache(encoder, ["F* | M0B*2", "F* | B*2"])
    calls = []
    original = encoder.encode_specs
    encoder.encode_specs = lambda *a, **k: calls.append(a[1]) or original(*a, **k)
    raw = cache.get("F* | B*2", ["a dog", "the cat", "a dog"], "p", normalize=False)
    again = cache.get("F*|B*2", ["the cat"], "p", normalize=False)
    normed = cache.get("F* | B*2", ["the cat"], "p", normalize=True)
    other = cache.get("F* | B*2", ["the cat"], None, normalize=False)
    assert calls == [["a dog", "the cat"], ["the cat"], ["the cat"]]  # one call per new (instruction, normalize)
    np.testing.assert_array_equal(raw[0], raw[2])
    np.testing.assert_array_equal(again[0], raw[1])
    np.testing.assert_allclose(normed[0], raw[1] / np.linalg.norm(raw[1]), rtol=1e-5)
    assert not np.allclose(other[0], raw[1])
    with pytest.raises(KeyError):
        cache.get("F* | B*3", ["the cat"], None, normalize=False)

    from mteb.models import EncoderProtocol

    model = NosinkMTEBEncoder(encoder, "F* | B*2", cache=cache)
    assert isinstance(model, EncoderProtocol)
    meta = model.mteb_model_meta
    assert meta.name == "nosink/llama" and meta.experiment_kwargs["spec"] == "F* | B*2"
    with pytest.raises(ValueError, match="not in the cache"):
        NosinkMTEBEncoder(encoder, "F* | B*3", cache=cache)


def test_any_mteb_ready_model_runs_as_a_baseline(local_run, tmp_path):
    # A baseline encoder (here the wrapper itself, which mteb accepts) runs without specs or a sweep cache,
    # on the same local data, and scores exactly what the nosink run scored for that spec.
    encoder = make_encoder()
    plain = NosinkMTEBEncoder(encoder, SPEC)
    summary = run_mteb(plain, ["STSBenchmark"], data_dir=local_run["root"] / "data", out_dir=tmp_path)
    sts = summary["tasks"]["STSBenchmark"]
    assert summary["specs"] == ["(encoder)"] and sts["status"] == "ok"
    assert sts["scores"]["(encoder)"] == pytest.approx(local_run["summary"]["tasks"]["STSBenchmark"]["scores"][SPEC])


def test_specs_are_refused_for_a_model_without_them(tmp_path):
    baseline = NosinkMTEBEncoder(make_encoder(), SPEC)  # any mteb-ready model that is not an EncoderFromDecoder
    with pytest.raises(ValueError, match="specs apply to an EncoderFromDecoder; a NosinkMTEBEncoder"):
        run_mteb(baseline, ["STSBenchmark"], out_dir=tmp_path, specs=["F* | B*2"])


def test_two_baselines_in_one_folder_do_not_share_results(local_run, tmp_path):
    # Foreign models can share mteb's folder name; their results must never be reused for each other.
    data = local_run["root"] / "data"
    a = run_mteb(NosinkMTEBEncoder(make_encoder(), SPEC), ["STSBenchmark"], data_dir=data, out_dir=tmp_path)
    other = EncoderFromDecoder(tiny_decoder("llama", seed=7), SPEC, tiny_tokenizer())
    b = run_mteb(NosinkMTEBEncoder(other, SPEC), ["STSBenchmark"], data_dir=data, out_dir=tmp_path)
    alone = run_mteb(NosinkMTEBEncoder(other, SPEC), ["STSBenchmark"], data_dir=data, out_dir=tmp_path / "b")
    score = lambda s: s["tasks"]["STSBenchmark"]["scores"]["(encoder)"]  # noqa: E731
    assert score(b) == pytest.approx(score(alone)) and score(b) != pytest.approx(score(a))


def test_mteb_eval_is_the_one_import_for_every_piece():
    import importlib

    parts = [importlib.import_module(f"nosink.evals.mteb_{p}") for p in ("tasks", "data", "model", "subsample", "run")]
    exported = [name for part in parts for name in part.__all__]
    assert sorted(mteb_eval.__all__) == sorted(exported)
    for part in parts:
        for name in part.__all__:
            assert getattr(mteb_eval, name) is getattr(part, name), name


def _metrics(path: Path) -> dict:
    """Every number of a result file's scores, keyed by split, subset and metric name."""
    raw = json.loads(path.read_text())
    out = {}
    for split, entries in raw["scores"].items():
        for entry in entries:
            for key, value in entry.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[(split, entry["hf_subset"], key)] = float(value)
    return out


def test_sentence_transformers_path_scores_like_nosinks_own_encoder(tmp_path, monkeypatch, caplog):
    # One spec runs as the encoder's sentence-transformers form (mteb's own wrapper, the paper's
    # instructions as prompts, the normalisation in encode_kwargs); without sentence-transformers, as
    # NosinkMTEBEncoder. Every metric mteb writes must agree, and both must file the results alike.
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    data = write_data(tmp_path / "data")
    names = ["STSBenchmark", "EmotionClassification"]
    encoder = make_encoder()
    calls = []
    original = SentenceTransformer.encode

    def spy(self, *args, **kwargs):  # encode_query and encode_document pass everything by keyword
        texts = args[0] if args else kwargs["inputs"]
        calls.append((list(texts), kwargs.get("prompt"), kwargs.get("normalize_embeddings")))
        return original(self, *args, **kwargs)

    runs = {}
    for path in ("st", "own"):
        with monkeypatch.context() as mp, caplog.at_level(logging.INFO, logger="nosink.evals.mteb_run"):
            caplog.clear()
            if path == "st":
                mp.setattr(SentenceTransformer, "encode", spy)
            else:
                without_st_extra(mp)
            tasks = [*names, length_classification_task(), scifact_task()[0]]
            runs[path] = run_mteb(encoder, tasks, tmp_path / "data", tmp_path / path)
            said = caplog.text
        assert ("as a sentence-transformers model" in said) == (path == "st"), said
        assert ("through NosinkMTEBEncoder (the st extra is missing)" in said) == (path == "own"), said

    st, own = runs["st"], runs["own"]
    assert st["model"] == own["model"] == "nosink/llama" and st["specs"] == own["specs"] == [SPEC]
    for name in [*names, "Banking77Classification", "SciFact"]:
        a, b = st["tasks"][name], own["tasks"][name]
        assert a["status"] == b["status"] == "ok", (a, b)
        assert a["scores"][SPEC] == pytest.approx(b["scores"][SPEC], abs=1e-4), name
        file_a, file_b = Path(a["files"][SPEC]), Path(b["files"][SPEC])
        assert file_a.relative_to(tmp_path / "st") == file_b.relative_to(tmp_path / "own")  # the same layout
        metrics_a, metrics_b = _metrics(file_a), _metrics(file_b)
        assert metrics_a.keys() == metrics_b.keys() and metrics_a
        for key, value in metrics_a.items():
            assert value == pytest.approx(metrics_b[key], abs=1e-4, nan_ok=True), (name, key)
        meta_a = json.loads((file_a.parent / "model_meta.json").read_text())
        meta_b = json.loads((file_b.parent / "model_meta.json").read_text())
        for meta in (meta_a, meta_b):
            assert meta["name"] == "nosink/llama" and meta["revision"] == "no_revision_available"
            assert meta["experiment_kwargs"] == {"spec": SPEC, "pooling": "mean"}
            assert meta["embed_dim"] == 32 and meta["n_parameters"] == sum(p.numel() for p in encoder.parameters())
        assert "Sentence Transformers" in meta_a["framework"] and "Sentence Transformers" not in meta_b["framework"]

    # The sentence-transformers path put the paper's prompt and normalisation on each input role.
    seen = {}
    for texts, prompt, normalize in calls:
        for text in texts:
            seen[text] = (prompt, normalize)
    _, docs, queries = scifact_task()
    expected = {p[0]: (STS_PROMPT, True) for p in data["sts"]} | {p[1]: (STS_PROMPT, True) for p in data["sts"]}
    banking = length_classification_task().dataset
    expected |= {t: (BANKING_PROMPT, False) for split in ("train", "test") for t in banking[split]["text"]}
    expected |= {t: (SCIFACT_PROMPT, True) for t in queries.values()} | {t: ("", True) for t in docs.values()}
    for text, want in expected.items():
        assert seen[text] == want, text
    emotion = [v for t, v in seen.items() if t not in expected]
    assert emotion and all(v == (EMOTION_PROMPT, False) for v in emotion)


def test_paper_prompts_give_each_role_nosinks_instruction():
    tasks = mteb_eval.resolve_tasks(["STSBenchmark", "SciFact", "Banking77Classification"])
    prompts = mteb_eval.paper_prompts(tasks)
    assert prompts["STSBenchmark"] == prompts["STSBenchmark-query"] == STS_PROMPT
    assert prompts["STSBenchmark-document"] == ""  # as task_instruction: no instruction for a document role
    assert prompts["SciFact"] == prompts["SciFact-query"] == SCIFACT_PROMPT and prompts["SciFact-document"] == ""
    assert prompts["Banking77Classification"] == BANKING_PROMPT
    assert len(prompts) == 9
    own = mteb_eval.paper_prompts(tasks, {"STSBenchmark": "Say it."})
    assert own["STSBenchmark"] == "Instruct: Say it.\nQuery: "


def test_foreign_model_summary_names_its_mteb_model(tmp_path):
    # A wrapped model's ModelMeta has .name (not .model_name): the summary names it, not "encoder".
    summary = run_mteb(NosinkMTEBEncoder(make_encoder(), SPEC), [], out_dir=tmp_path)
    assert summary["model"] == "nosink/llama"
    renamed = run_mteb(NosinkMTEBEncoder(make_encoder(), SPEC, model_name="me/mine"), [], out_dir=tmp_path)
    assert renamed["model"] == "me/mine"


def test_a_task_mteb_cannot_name_runs_through_nosinks_own_encoder(tmp_path, caplog):
    # mteb's sentence-transformers wrapper drops prompts whose task name it does not know; run_mteb then
    # takes NosinkMTEBEncoder, which reads the instruction from the task itself.
    pytest.importorskip("sentence_transformers")
    from nosink.evals.mteb_data import load_local_data

    write_data(tmp_path / "data")
    task = mteb.get_task("STSBenchmark")
    assert load_local_data(task, tmp_path / "data") is not None
    task.metadata = task.metadata.model_copy(update={"name": "MySTS"})
    with caplog.at_level(logging.INFO, logger="nosink.evals.mteb_run"):
        summary = run_mteb(make_encoder(), [task], out_dir=tmp_path / "out")
    assert "NosinkMTEBEncoder (a task name mteb does not know)" in caplog.text
    assert summary["tasks"]["MySTS"]["status"] == "ok"
    plain = run_mteb(make_encoder(), ["STSBenchmark"], tmp_path / "data", tmp_path / "plain")
    assert summary["tasks"]["MySTS"]["scores"][SPEC] == pytest.approx(
        plain["tasks"]["STSBenchmark"]["scores"][SPEC], abs=1e-4
    )


def test_specs_naming_only_the_encoders_own_spec_is_not_a_sweep(tmp_path, caplog):
    # `nosink eval mteb MODEL --specs S` passes specs=[S] with an encoder built with S: one spec, the
    # sentence-transformers path where it can, filed as a plain run of that spec.
    pytest.importorskip("sentence_transformers")
    write_data(tmp_path / "data")
    with caplog.at_level(logging.INFO, logger="nosink.evals.mteb_run"):
        summary = run_mteb(make_encoder(), ["STSBenchmark"], tmp_path / "data", tmp_path / "a", specs=["F*|M0B*2"])
    assert "as a sentence-transformers model" in caplog.text and summary["specs"] == [SPEC]
    plain = run_mteb(make_encoder(), ["STSBenchmark"], tmp_path / "data", tmp_path / "b")
    a, b = summary["tasks"]["STSBenchmark"], plain["tasks"]["STSBenchmark"]
    assert a["scores"] == b["scores"]
    assert Path(a["files"][SPEC]).relative_to(tmp_path / "a") == Path(b["files"][SPEC]).relative_to(tmp_path / "b")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="nosink.evals.mteb_run"):
        run_mteb(make_encoder(), ["STSBenchmark"], tmp_path / "data", tmp_path / "c", specs=["F* | B*2"])
    assert "through NosinkMTEBEncoder (a sweep)" in caplog.text  # another spec than the encoder's own
