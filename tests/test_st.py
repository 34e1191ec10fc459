"""sentence-transformers' door: convert, save, load, and encode exactly as nosink's own encode()."""

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import WORDS, tiny_decoder, tiny_tokenizer

pytest.importorskip("sentence_transformers")

from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Pooling

import nosink
from nosink import EncoderFromDecoder
from nosink.models.st import (
    NosinkPooling,
    NosinkTransformer,
    load_sentence_transformer,
    mteb_model,
    to_sentence_transformer,
)

TEXTS = ["the cat sat on the mat", "a dog ran", "paris is the capital of france", "i", "we love very good food"]
PROMPTS = {"query": "what is ", "sts": "how good is "}
# Families with and without a BOS token in their (tiny) tokenizer: Qwen's has none, so "auto" adds no sink token.
BOS = {"llama": True, "qwen2": False, "gpt2": True}


def make(family="llama", spec="F* | M0B*2", sink_token="auto", seed=0):
    return EncoderFromDecoder(tiny_decoder(family, seed=seed), spec, tiny_tokenizer(BOS[family]), sink_token=sink_token)


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("sink_token", ["auto", "none"])
@pytest.mark.parametrize("pooling", ["mean", "weighted_mean", "last"])
def test_saved_and_loaded_model_encodes_like_nosink(tmp_path, family, sink_token, pooling):
    encoder = make(family, sink_token=sink_token)
    expected = encoder.encode(TEXTS, instruction=PROMPTS["query"], pooling=pooling)
    for side in ("right", "left"):
        model = to_sentence_transformer(encoder, PROMPTS, pooling=pooling, padding_side=side)
        np.testing.assert_allclose(model.encode(TEXTS, prompt_name="query", batch_size=2), expected, atol=1e-5)
        model.save(str(tmp_path / side))
        loaded = load_sentence_transformer(tmp_path / side)
        assert isinstance(loaded[1], NosinkPooling) and loaded[1].pooling == pooling
        assert loaded[0].padding_side == side
        assert loaded[0].encoder.sink_token == sink_token
        got = loaded.encode(TEXTS, prompt_name="query", batch_size=3)
        # nosink's own loader of the same folder is the reference: transformers reloads the tiny word-level
        # tokenizer saved beside a qwen2 config as a Qwen2Tokenizer (other ids), so qwen2 differs from `expected`
        reloaded = EncoderFromDecoder.from_pretrained(tmp_path / side)
        np.testing.assert_allclose(got, reloaded.encode(TEXTS, PROMPTS["query"], pooling=pooling), atol=1e-5)
        if family != "qwen2":
            np.testing.assert_allclose(got, expected, atol=1e-5)
    # the instruction is excluded from pooling but read by the model: without it the vectors differ
    assert np.abs(encoder.encode(TEXTS, pooling=pooling) - expected).max() > 1e-4


def test_prompt_prompt_name_and_default_prompt():
    encoder = make()
    model = to_sentence_transformer(encoder, PROMPTS, default_prompt_name="sts")
    sts = encoder.encode(TEXTS, instruction=PROMPTS["sts"])
    np.testing.assert_allclose(model.encode(TEXTS), sts, atol=1e-5)  # the default prompt
    np.testing.assert_allclose(model.encode(TEXTS, prompt_name="sts"), sts, atol=1e-5)
    other = "where is "
    np.testing.assert_allclose(model.encode(TEXTS, prompt=other), encoder.encode(TEXTS, other), atol=1e-5)
    np.testing.assert_allclose(model.encode(TEXTS, prompt=""), encoder.encode(TEXTS), atol=1e-5)
    one = model.encode("a dog ran", prompt_name="query")
    assert one.shape == (32,)
    np.testing.assert_allclose(one, encoder.encode("a dog ran", PROMPTS["query"]), atol=1e-5)
    assert model.prompts["query"] == PROMPTS["query"]
    np.testing.assert_allclose(model.encode_query(TEXTS), encoder.encode(TEXTS, PROMPTS["query"]), atol=1e-5)


def test_sentence_transformers_pooling_and_include_prompt():
    # nosink's input module sets prompt_length (sink token + prompt), so sentence-transformers' own Pooling
    # with include_prompt=False pools the text tokens only; include_prompt=True pools every real token.
    encoder = make()
    tok = encoder.tokenizer
    prompt = PROMPTS["query"]
    for mode, ours in (("mean", "mean"), ("lasttoken", "last")):
        for side in ("right", "left"):
            first = NosinkTransformer(encoder, padding_side=side)
            model = SentenceTransformer(modules=[first, Pooling(32, mode, include_prompt=False)], device="cpu")
            expected = encoder.encode(TEXTS, prompt, pooling=ours)
            np.testing.assert_allclose(model.encode(TEXTS, prompt=prompt), expected, atol=1e-5)
    model = SentenceTransformer(modules=[NosinkTransformer(encoder), Pooling(32, "mean")], device="cpu")
    text = "the cat sat"
    ids = [tok.bos_token_id] + tok(prompt + text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        every = encoder(torch.tensor([ids])).last_hidden_state[0].mean(0).numpy()
    got = model.encode(text, prompt=prompt)
    np.testing.assert_allclose(got, every, atol=1e-5)
    assert np.abs(got - encoder.encode(text, prompt)).max() > 1e-4


def test_preprocess_marks_text_tokens_and_prompt_length():
    first = NosinkTransformer(make(), padding_side="left")
    features = first.preprocess(["cat", "the cat"], prompt="what is ")
    assert features["prompt_length"] == 3  # <s> what is
    assert features["input_ids"].tolist() == [[0, 1, 41, 20, 6], [1, 41, 20, 4, 6]]
    assert features["text_mask"].tolist() == [[False] * 4 + [True], [False] * 3 + [True, True]]
    assert features["attention_mask"].tolist() == [[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]]


def test_similarity_normalize_and_token_embeddings():
    encoder = make()
    model = to_sentence_transformer(encoder, PROMPTS, normalize=True)
    vectors = model.encode(TEXTS, prompt_name="query")
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    ours = encoder.encode(TEXTS, PROMPTS["query"], normalize_embeddings=True)
    np.testing.assert_allclose(vectors, ours, atol=1e-5)
    sims = model.similarity(vectors, vectors).numpy()
    np.testing.assert_allclose(sims, ours @ ours.T, atol=1e-5)
    assert model.get_embedding_dimension() == 32
    # sentence-transformers' token_embeddings keep every real token (sink token and prompt too)
    tokens = model.encode(["a dog ran"], prompt_name="query", output_value="token_embeddings")[0]
    assert tokens.shape == (1 + 2 + 3, 32)
    text_tokens = encoder.encode(["a dog ran"], PROMPTS["query"], output_value="token_embeddings")[0]
    np.testing.assert_allclose(tokens[3:].numpy(), text_tokens, atol=1e-5)


def test_the_model_runs_the_decoders_own_tensors():
    encoder = make()
    model = to_sentence_transformer(encoder, PROMPTS)
    decoder_ptrs = {p.data_ptr() for p in encoder.decoder.parameters()}
    assert {p.data_ptr() for p in model.parameters()} == decoder_ptrs
    assert nosink.to_sentence_transformer is to_sentence_transformer


def test_saved_folder_is_a_sentence_transformers_folder_and_an_encoder_folder(tmp_path):
    encoder = make(spec="F*2 | B | M0B")
    to_sentence_transformer(encoder, PROMPTS, pooling="weighted_mean", max_seq_length=64).save(str(tmp_path))
    modules = json.loads((tmp_path / "modules.json").read_text())
    assert [m["type"] for m in modules] == ["nosink.models.st.NosinkTransformer", "nosink.models.st.NosinkPooling"]
    config = json.loads((tmp_path / "config_sentence_transformers.json").read_text())
    assert config["prompts"]["query"] == PROMPTS["query"] and config["prompts"]["sts"] == PROMPTS["sts"]
    assert json.loads((tmp_path / "nosink.json").read_text())["spec"] == "F*2 | B | M0B"
    module_config = json.loads((tmp_path / "nosink_st_config.json").read_text())
    assert module_config == {"max_seq_length": 64, "padding_side": "right"}
    assert (tmp_path / "model.safetensors").is_file()
    # the root is nosink's own saved-encoder folder too
    again = EncoderFromDecoder.from_pretrained(tmp_path)
    assert again.spec == encoder.spec
    np.testing.assert_allclose(again.encode(TEXTS, "what is "), encoder.encode(TEXTS, "what is "), atol=1e-6)
    # sentence-transformers 6 imports module classes of other packages only when trusted
    with pytest.raises(ValueError, match="trust_remote_code"):
        SentenceTransformer(str(tmp_path))
    half = load_sentence_transformer(tmp_path, model_kwargs={"dtype": torch.bfloat16})
    assert half[0].encoder.parts.embed_tokens.weight.dtype == torch.bfloat16
    trusted = SentenceTransformer(str(tmp_path), trust_remote_code=True)
    assert trusted.max_seq_length == 64
    expected = encoder.encode(TEXTS, PROMPTS["sts"], pooling="weighted_mean")
    np.testing.assert_allclose(trusted.encode(TEXTS, prompt_name="sts"), expected, atol=1e-5)


@pytest.mark.parametrize(
    "kind",
    [
        "evil_package.Module",
        "sentence_transformers.sentence_transformer.modules.Pooling",  # to_sentence_transformer never writes it
        "sentence_transformers.base.modules.dense.Dense",
        "nosink.models.st.NosinkTransformerX",
        "nosink.models.st.load_sentence_transformer",
        None,
    ],
)
def test_load_refuses_module_types_nosink_does_not_write(tmp_path, kind):
    to_sentence_transformer(make()).save(str(tmp_path))
    modules = json.loads((tmp_path / "modules.json").read_text())
    modules.append({"idx": 2, "name": "2", "path": "2_Other", "type": kind})
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match=rf"modules\.json names module type {re.escape(repr(kind))} \(entry 2\)"):
        load_sentence_transformer(tmp_path)
    with pytest.raises(OSError, match=r"modules\.json"):
        load_sentence_transformer(tmp_path / "absent")


def _write_evil_code(folder: Path, marker: Path) -> None:
    """Code an ``auto_map`` in ``folder``'s ``config.json`` points at, which writes ``marker`` when imported."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "evil.py").write_text(
        "from pathlib import Path\n"
        f"Path({str(marker)!r}).write_text('the folder ran its code')\n"
        "from transformers import PretrainedConfig, PreTrainedModel\n"
        "class EvilConfig(PretrainedConfig):\n"
        "    model_type = 'evil'\n"
        "class EvilModel(PreTrainedModel):\n"
        "    config_class = EvilConfig\n"
    )
    config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}
    config.setdefault("model_type", "evil")
    (folder / "config.json").write_text(json.dumps(config))


@pytest.fixture
def hf_modules(tmp_path, monkeypatch):
    # where transformers would copy a folder's code to import it: not the user's cache, should a test fail
    import transformers.dynamic_module_utils as dynamic

    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "hf_modules"))


@pytest.mark.parametrize(
    "kind", ["sentence_transformers.models.Transformer", "sentence_transformers.base.modules.transformer.Transformer"]
)
def test_load_never_runs_code_from_a_folder_naming_a_transformer(tmp_path, hf_modules, kind):
    # sentence-transformers' Transformer hands the folder's config.json to transformers, which with
    # trust_remote_code=True imports the auto_map's evil.py
    folder, marker = tmp_path / "evil", tmp_path / "marker"
    _write_evil_code(folder, marker)
    (folder / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "", "type": kind}]))
    with pytest.raises(ValueError, match=rf"{re.escape(str(folder / 'modules.json'))} names module type '{kind}'"):
        load_sentence_transformer(folder)
    assert not marker.exists()


def test_load_refuses_a_router_even_of_nosink_modules(tmp_path, hf_modules):
    from sentence_transformers.base.modules import Router

    encoder = make()
    router = Router.for_query_document([NosinkTransformer(encoder)], [NosinkTransformer(encoder)])
    SentenceTransformer(modules=[router, NosinkPooling(32)], device="cpu").save(str(tmp_path / "router"))
    with pytest.raises(ValueError, match=r"module type 'sentence_transformers\.base\.modules\.router\.Router'"):
        load_sentence_transformer(tmp_path / "router")
    # a route naming code of its own is never reached
    config_file = tmp_path / "router" / "router_config.json"
    config = json.loads(config_file.read_text())
    route = next(iter(config["types"]))
    config["types"][route] = "sentence_transformers.base.modules.transformer.Transformer"
    config_file.write_text(json.dumps(config))
    _write_evil_code(tmp_path / "router" / route, tmp_path / "marker")
    # transformers looks for a subfolder's auto_map code in the repository's root
    (tmp_path / "router" / "evil.py").write_text((tmp_path / "router" / route / "evil.py").read_text())
    with pytest.raises(ValueError, match=r"Router"):
        load_sentence_transformer(tmp_path / "router")
    assert not (tmp_path / "marker").exists()


def test_load_ignores_an_auto_map_in_a_nosink_folder(tmp_path, hf_modules):
    # nosink's own module type, with code that transformers would import if trusted: loads, runs none of it
    encoder = make()
    to_sentence_transformer(encoder, PROMPTS).save(str(tmp_path / "model"))
    _write_evil_code(tmp_path / "model", tmp_path / "marker")
    tokenizer_config = tmp_path / "model" / "tokenizer_config.json"
    tokenizer_config.write_text(json.dumps(json.loads(tokenizer_config.read_text()) | {"auto_map": {}}))
    loaded = load_sentence_transformer(tmp_path / "model")
    expected = encoder.encode(TEXTS, PROMPTS["query"])
    np.testing.assert_allclose(loaded.encode(TEXTS, prompt_name="query"), expected, atol=1e-5)
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize("path", ["../elsewhere", "/etc", "C:\\x", "a\\..\\..\\b"])
def test_load_refuses_module_paths_outside_the_folder(tmp_path, path):
    to_sentence_transformer(make()).save(str(tmp_path))
    modules = json.loads((tmp_path / "modules.json").read_text())
    modules[1]["path"] = path
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match="expected a relative path inside the folder"):
        load_sentence_transformer(tmp_path)


def test_load_refuses_another_model_type(tmp_path):
    to_sentence_transformer(make()).save(str(tmp_path))
    file = tmp_path / "config_sentence_transformers.json"
    file.write_text(json.dumps(json.loads(file.read_text()) | {"model_type": "SparseEncoder"}))
    with pytest.raises(ValueError, match="model_type 'SparseEncoder'"):
        load_sentence_transformer(tmp_path)


def test_load_keeps_the_saved_settings_as_sentence_transformers_does(tmp_path):
    encoder = make()
    model = to_sentence_transformer(
        encoder, PROMPTS, normalize=True, default_prompt_name="sts", similarity_fn_name="dot"
    )
    model.truncate_dim = 16
    model.save(str(tmp_path))
    loaded = load_sentence_transformer(tmp_path)
    trusted = SentenceTransformer(str(tmp_path), trust_remote_code=True)  # the reference, on a folder we wrote
    assert [type(m) for m in loaded] == [type(m) for m in trusted] == [type(m) for m in model]
    for name in ("prompts", "default_prompt_name", "similarity_fn_name", "truncate_dim", "max_seq_length"):
        assert getattr(loaded, name) == getattr(trusted, name), name
    assert loaded.prompts == model.prompts and loaded.default_prompt_name == "sts"
    assert loaded.similarity_fn_name == "dot" and loaded.truncate_dim == 16
    vectors = loaded.encode(TEXTS)  # the default prompt, truncated
    np.testing.assert_allclose(vectors, trusted.encode(TEXTS), atol=1e-6)
    np.testing.assert_allclose(vectors, model.encode(TEXTS), atol=1e-5)
    assert vectors.shape == (len(TEXTS), 16)
    np.testing.assert_allclose(loaded.similarity(vectors, vectors), vectors @ vectors.T, atol=1e-5)
    # arguments win over the saved settings, as they do for SentenceTransformer(folder, ...)
    kwargs = dict(
        prompts={"sts": "why is ", "new": "who is "},
        default_prompt_name="query",
        similarity_fn_name="euclidean",
        truncate_dim=8,
    )
    mine = load_sentence_transformer(tmp_path, **kwargs)
    theirs = SentenceTransformer(str(tmp_path), trust_remote_code=True, **kwargs)
    for name in ("prompts", "default_prompt_name", "similarity_fn_name", "truncate_dim"):
        assert getattr(mine, name) == getattr(theirs, name), name
    assert mine.prompts["sts"] == "why is " and mine.prompts["query"] == PROMPTS["query"]
    new = mine.encode(TEXTS, prompt_name="new")
    np.testing.assert_allclose(new, theirs.encode(TEXTS, prompt_name="new"), atol=1e-6)
    with pytest.raises(TypeError):
        load_sentence_transformer(tmp_path, trust_remote_code=True)


def test_bad_arguments():
    encoder = make()
    with pytest.raises(ValueError, match="unknown pooling 'max'"):
        to_sentence_transformer(encoder, pooling="max")
    with pytest.raises(ValueError, match="padding_side"):
        to_sentence_transformer(encoder, padding_side="middle")
    with pytest.raises(ValueError, match="max_seq_length must be a positive integer, got True"):
        NosinkTransformer(encoder, max_seq_length=True)
    with pytest.raises(ValueError, match="no tokenizer"):
        NosinkTransformer(EncoderFromDecoder(tiny_decoder("llama"), "F*"))
    model = to_sentence_transformer(encoder, max_seq_length=3)
    with pytest.raises(ValueError, match="no room for text"):
        model.encode(TEXTS, prompt="what is ")
    # truncation as encode(max_length=...) does it
    short = to_sentence_transformer(encoder, max_seq_length=4)
    np.testing.assert_allclose(short.encode(TEXTS), encoder.encode(TEXTS, max_length=4), atol=1e-5)


def test_a_saved_folder_loads_in_a_clean_process(tmp_path):
    encoder = make("gpt2", spec="F* | M0B*3")
    to_sentence_transformer(encoder, PROMPTS, pooling="last").save(str(tmp_path / "model"))
    script = (
        "import json, sys, nosink\n"
        "model = nosink.load_sentence_transformer(sys.argv[1])\n"
        "vectors = model.encode(json.loads(sys.argv[2]), prompt_name='query')\n"
        "print(json.dumps(vectors.tolist()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "model"), json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,  # not the checkout: nosink must come from the installed package
        env={"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    got = np.array(json.loads(out.stdout.strip().splitlines()[-1]), dtype=np.float32)
    np.testing.assert_allclose(got, encoder.encode(TEXTS, PROMPTS["query"], pooling="last"), atol=1e-5)


def test_nosink_imports_without_sentence_transformers():
    script = (
        "import sys\n"
        "sys.modules['sentence_transformers'] = None  # as if not installed\n"
        "import nosink\n"
        "from nosink import *\n"
        "assert 'to_sentence_transformer' not in nosink.__all__\n"
        "try:\n"
        "    nosink.to_sentence_transformer\n"
        "except ImportError as err:\n"
        "    print('ImportError', err)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "ImportError" in out.stdout and "sentence_transformers" in out.stdout


def _write_stsb(root: Path) -> list:
    """A tiny STSBenchmark copy in the shared folder's format (stsb/sts-test.csv)."""
    rng = random.Random(0)
    words = lambda: " ".join(rng.choice(WORDS) for _ in range(5))  # noqa: E731
    pairs = [(words(), words(), round(rng.uniform(0, 5), 2)) for _ in range(16)]
    lines = [f"main-news\tfile\t2012\t{i:04d}\t{s:.2f}\t{a}\t{b}" for i, (a, b, s) in enumerate(pairs)]
    (root / "stsb").mkdir(parents=True)
    (root / "stsb" / "sts-test.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return pairs


def _paper_prompts():
    from nosink.evals.mteb_eval import PAPER_TASKS, format_instruction

    # Retrieval documents get no instruction (the paper's protocol): "<task>-document" wins over "<task>".
    prompts = {task: format_instruction(instruction) for task, instruction in PAPER_TASKS.items()}
    return prompts | {f"{task}-document": "" for task in PAPER_TASKS}


def test_mteb_evaluates_the_sentence_transformer_under_its_own_name(tmp_path):
    mteb = pytest.importorskip("mteb")
    from scipy.stats import spearmanr

    from nosink.evals.mteb_eval import load_local_data

    pairs = _write_stsb(tmp_path / "data")
    task = mteb.get_task("STSBenchmark")
    assert load_local_data(task, tmp_path / "data") is not None
    encoder = make()
    model = mteb_model(to_sentence_transformer(encoder), _paper_prompts(), languages=["eng-Latn"])
    meta = model.mteb_model_meta
    assert meta.name == "nosink/llama" and meta.revision == "no_revision_available"
    assert meta.embed_dim == 32 and meta.languages == ["eng-Latn"] and meta.use_instructions
    assert meta.n_parameters == sum(p.numel() for p in encoder.parameters())
    assert meta.experiment_kwargs == {"spec": "F* | M0B*2", "pooling": "mean"}
    from mteb.models.abs_encoder import get_prompt_name
    from mteb.types import PromptType

    scifact = mteb.get_task("SciFact").metadata
    assert model.model_prompts[get_prompt_name(model.model_prompts, scifact, PromptType.document)] == ""
    assert "scientific claim" in model.model_prompts[get_prompt_name(model.model_prompts, scifact, PromptType.query)]
    result = mteb.evaluate(
        model,
        task,
        cache=mteb.ResultCache(tmp_path / "out"),
        co2_tracker=False,
        show_progress_bar=False,
        encode_kwargs={"batch_size": 8},
    )
    assert result.model_name == "nosink/llama"
    (task_result,) = result.task_results
    prompt = _paper_prompts()["STSBenchmark"]
    a = encoder.encode([p[0] for p in pairs], prompt)
    b = encoder.encode([p[1] for p in pairs], prompt)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert task_result.get_score() == pytest.approx(spearmanr([p[2] for p in pairs], cos)[0], abs=1e-6)
    files = list((tmp_path / "out").rglob("STSBenchmark.json"))
    assert len(files) == 1 and "nosink__llama" in str(files[0])


def test_real_smollm2_matches_nosink_and_runs_mteb(smollm2_path, tmp_path):
    from nosink.evals.mteb_eval import PAPER_TASKS, format_instruction

    encoder = EncoderFromDecoder.from_pretrained(smollm2_path, spec="F* | M0B*10", dtype=torch.float32)
    prompts = {"sts": format_instruction(PAPER_TASKS["STSBenchmark"]), "query": "Query: "}
    texts = ["A man is playing a guitar.", "Someone is strumming a guitar.", " leading space", "Hi"]
    model = to_sentence_transformer(encoder, prompts)
    model.save(str(tmp_path / "smol"))
    loaded = load_sentence_transformer(tmp_path / "smol")
    for name, prompt in prompts.items():
        expected = encoder.encode(texts, prompt)
        np.testing.assert_allclose(loaded.encode(texts, prompt_name=name), expected, atol=1e-5)
    # "Query: " tokenized alone ends in a space token that the joint tokenization merges into the text:
    # sentence-transformers' prompt length from the lone prompt would drop the first text token.
    features = loaded[0].preprocess(["A man"], prompt="Query: ")
    alone = len(encoder.tokenizer("Query: ", add_special_tokens=False)["input_ids"])
    assert features["prompt_length"] == 1 + alone - 1


def test_real_smollm2_through_run_mteb_scores_like_nosinks_own_mteb_encoder(smollm2_path, tmp_path, monkeypatch):
    # The existing run_mteb takes any mteb-ready model: the sentence-transformers path on a small subset of
    # the local STSBenchmark copy must score what nosink's own mteb encoder scores on the same subset.
    # (run_mteb itself runs one spec as a sentence-transformers model where it can: `own` is run as if the
    # st extra were missing, so that it is NosinkMTEBEncoder's score.)
    from nosink.evals.mteb_eval import run_mteb

    data = Path(__file__).resolve().parents[2] / "shared" / "data"
    if not (data / "stsb").is_dir():
        pytest.skip("../shared/data/stsb is absent")
    encoder = EncoderFromDecoder.from_pretrained(smollm2_path, spec="F* | M0B*10", dtype=torch.float32)
    model = mteb_model(to_sentence_transformer(encoder), _paper_prompts(), experiment_kwargs={"limit": 16})
    via_st = run_mteb(model, ["STSBenchmark"], data_dir=data, out_dir=tmp_path / "st", limit=16)
    with monkeypatch.context() as mp:
        mp.setitem(sys.modules, "nosink.models.st", None)
        own = run_mteb(encoder, ["STSBenchmark"], data_dir=data, out_dir=tmp_path / "own", limit=16)
    st_task, own_task = via_st["tasks"]["STSBenchmark"], own["tasks"]["STSBenchmark"]
    assert st_task["status"] == own_task["status"] == "ok"
    (st_score,) = st_task["scores"].values()
    (own_score,) = own_task["scores"].values()
    assert st_score == pytest.approx(own_score, abs=1e-4)
    (file,) = (tmp_path / "st").rglob("STSBenchmark.json")
    assert "nosink__" in str(file) and "spec_F" in str(file)


@pytest.mark.parametrize(
    "keep",
    [[2], [1, 0], [0], [0, 2, 1], [0, 1, 2, 2]],
    ids=["only Normalize", "Pooling first", "no pooling", "Normalize before Pooling", "twice"],
)
def test_load_refuses_modules_in_an_order_nosink_does_not_write(tmp_path, keep):
    # each of these loaded before and failed only at encode() (AttributeError: ... tokenize)
    to_sentence_transformer(make(), normalize=True).save(str(tmp_path))
    modules = json.loads((tmp_path / "modules.json").read_text())
    (tmp_path / "modules.json").write_text(json.dumps([modules[i] | {"idx": n} for n, i in enumerate(keep)]))
    with pytest.raises(ValueError, match=r"modules\.json lists the modules .*NosinkTransformer, NosinkPooling and"):
        load_sentence_transformer(tmp_path)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"prompts": {"q": 5}}, r"'prompts' must map prompt names to strings"),
        ({"prompts": ["q"]}, r"'prompts' must map prompt names to strings"),
        ({"prompts": {"q": "x"}, "default_prompt_name": "p"}, r"'default_prompt_name' 'p' is not one of its prompts"),
        ({"truncate_dim": -3}, r"'truncate_dim' must be a positive integer, got -3"),
    ],
)
def test_load_refuses_saved_settings_that_would_fail_at_encode(tmp_path, settings, message):
    to_sentence_transformer(make(), PROMPTS).save(str(tmp_path))
    file = tmp_path / "config_sentence_transformers.json"
    file.write_text(json.dumps(json.loads(file.read_text()) | settings))
    with pytest.raises(ValueError, match=re.escape(str(file)) + ": " + message):
        load_sentence_transformer(tmp_path)


def test_load_refuses_a_prompt_argument_that_is_not_a_string(tmp_path):
    to_sentence_transformer(make(), PROMPTS).save(str(tmp_path))
    with pytest.raises(ValueError, match=r"prompt 'q' is 5: prompts map names to strings"):
        load_sentence_transformer(tmp_path, prompts={"q": 5})


@pytest.mark.parametrize("file", ["modules.json", "config_sentence_transformers.json"])
def test_load_says_which_file_is_nested_too_deeply(tmp_path, file):
    to_sentence_transformer(make(), PROMPTS).save(str(tmp_path))
    (tmp_path / file).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(OSError, match=re.escape(file) + " is nested too deeply to read as JSON"):
        load_sentence_transformer(tmp_path)


def test_load_refuses_a_tokenizer_that_needs_its_own_code_without_asking(tmp_path, hf_modules, monkeypatch):
    asked = []
    monkeypatch.setattr("builtins.input", lambda prompt="": asked.append(prompt) or "y")
    to_sentence_transformer(make(), PROMPTS).save(str(tmp_path))
    (tmp_path / "evil_tok.py").write_text(f"from pathlib import Path\nPath({str(tmp_path / 'marker')!r}).touch()\n")
    file = tmp_path / "tokenizer_config.json"
    config = json.loads(file.read_text()) | {"auto_map": {"AutoTokenizer": [None, "evil_tok.EvilTok"]}}
    file.write_text(json.dumps(config | {"tokenizer_class": "EvilTok"}))
    with pytest.raises(nosink.RemoteCodeError, match=r"auto_map in tokenizer_config\.json"):
        load_sentence_transformer(tmp_path)
    assert asked == [] and not (tmp_path / "marker").exists()


def test_an_encoder_with_a_template_is_refused():
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer(), template="PromptEOL")
    with pytest.raises(ValueError, match="template PromptEOL, which the sentence-transformers form cannot"):
        to_sentence_transformer(encoder)
