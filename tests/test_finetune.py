"""nosink finetune on tiny random decoders: the training forward is the inference forward, the adapter's folder
loads back to the same vectors, the base weights stay shared and unchanged, steps lower the loss, resume continues."""

import http.client
import json
import shutil

import pytest
import torch

pytest.importorskip("peft")

from safetensors.torch import load_file, save_file
from tiny import tiny_chat_model, tiny_tokenizer

from nosink.finetune import FinetuneOptions, finetune
from nosink.finetune.dropout import attention_dropout
from nosink.finetune.losses import embed, mask_token_id, mnrl_loss, mntp_loss, simcse_loss
from nosink.layerspec import SpecError
from nosink.models import EncoderFromDecoder
from nosink.models.adapters import adapter_layers, adapters_off, add_lora, load_adapter, save_adapter

SPEC = "F* | B | M0B*2"
TEXTS = [
    "the cat sat on the mat", "a dog ran in the park", "paris is the capital of france", "i like good food",
    "we hate bad loan", "london is a city of england", "what is the river", "you love very good money",
]  # fmt: skip


tiny_lm = tiny_chat_model  # a causal LM with a chat template (chat through the server)


@pytest.fixture
def base(tmp_path):
    lm, tok = tiny_lm()
    folder = tmp_path / "base"
    lm.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture
def texts_file(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(TEXTS * 2) + "\n", encoding="utf-8")
    return path


def adapted(spec=SPEC, rank=4, dropout=0.0, scale=0.3, seed=1):
    """An encoder over a tiny LM with a LoRA adapter whose B matrices are random (so it changes the outputs)."""
    lm, tok = tiny_lm()
    encoder = EncoderFromDecoder.from_model(lm, spec, tok)
    add_lora(encoder.decoder, list(range(encoder.depth)), rank=rank, alpha=2 * rank, dropout=dropout)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in encoder.decoder.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * scale)
    return encoder, lm, tok


def options(**kwargs):
    defaults = dict(steps=4, batch_size=4, checkpoint_every=2, show_progress_bar=False, rank=4, alpha=8.0)
    return FinetuneOptions(**{**defaults, **kwargs})


# ------------------------------------------------------------------ the training forward is the inference forward


@pytest.mark.parametrize("spec", ["F* | B | M0B*2", "F* | M0B*4", "F*", "R* | B"])
def test_the_training_forward_in_training_mode_without_dropout_equals_encode(spec):
    encoder, _, _ = adapted(spec)
    want = encoder.encode(TEXTS, "what is ", convert_to_tensor=True)
    encoder.train()
    got = embed(encoder, TEXTS, instruction="what is ")
    assert got.requires_grad  # autograd ran through the layer loop
    torch.testing.assert_close(got.detach(), want, atol=1e-5, rtol=1e-5)
    # the spec's masks matter: under another spec the same weights give other vectors
    other = EncoderFromDecoder.from_model(encoder.decoder, "F*" if spec != "F*" else "F* | B*4", encoder.tokenizer)
    assert not torch.allclose(other.encode(TEXTS, "what is ", convert_to_tensor=True), want, atol=1e-3)


def test_the_adapter_changes_the_vectors_and_adapters_off_gives_the_base_encoder_back():
    encoder, _, tok = adapted()
    plain_lm, _ = tiny_lm()
    plain = EncoderFromDecoder.from_model(plain_lm, SPEC, tok).encode(TEXTS, convert_to_tensor=True)
    tuned = encoder.encode(TEXTS, convert_to_tensor=True)
    assert (tuned - plain).abs().max() > 1e-2
    with adapters_off(adapter_layers(encoder.decoder)):
        torch.testing.assert_close(encoder.encode(TEXTS, convert_to_tensor=True), plain)
    torch.testing.assert_close(encoder.encode(TEXTS, convert_to_tensor=True), tuned)
    assert {p.requires_grad for n, p in encoder.named_parameters() if "lora_" in n} == {True}  # as it was


def test_attention_dropout_is_the_simcse_augmentation_and_is_restored():
    encoder, _, _ = adapted()
    attention = encoder.decoder.layers[0].self_attn
    assert attention.attention_dropout == 0.0  # the tiny config has none, as many decoders
    encoder.train()
    torch.manual_seed(0)
    with torch.no_grad():
        assert torch.equal(embed(encoder, TEXTS), embed(encoder, TEXTS))  # no dropout: the two views agree
        with attention_dropout(encoder.decoder, 0.3) as count:
            assert count == encoder.depth and attention.attention_dropout == 0.3
            a, b = embed(encoder, TEXTS), embed(encoder, TEXTS)
            assert (a - b).abs().max() > 1e-3
            encoder.eval()
            assert torch.equal(embed(encoder, TEXTS), embed(encoder, TEXTS))  # eval mode never drops
    assert attention.attention_dropout == 0.0


def test_lora_dropout_alone_also_makes_the_views_differ():
    encoder, _, _ = adapted(dropout=0.5)
    encoder.train()
    with torch.no_grad():
        assert (embed(encoder, TEXTS) - embed(encoder, TEXTS)).abs().max() > 1e-4


# ------------------------------------------------------------------ weights shared, saved, reloaded


def test_the_base_weights_stay_the_same_tensors_and_a_saved_adapter_reloads_to_the_same_vectors(tmp_path):
    lm, tok = tiny_lm()
    before = {n: p.detach().clone() for n, p in lm.model.named_parameters()}
    pointers = {n: p.data_ptr() for n, p in lm.model.named_parameters()}
    encoder = EncoderFromDecoder.from_model(lm, SPEC, tok)
    add_lora(encoder.decoder, list(range(encoder.depth)), rank=4, alpha=8, dropout=0.0)
    with torch.no_grad():
        for name, p in encoder.decoder.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    base = {n.replace(".base_layer", ""): p for n, p in encoder.decoder.named_parameters() if "lora_" not in n}
    assert set(base) == set(before) and all(not p.requires_grad for p in base.values())
    # the adapter wraps the LM's layers in place: the encoder and the LM hold the very same base tensors
    assert {n: p.data_ptr() for n, p in base.items()} == pointers
    assert encoder.decoder is lm.model
    assert encoder.parts.embed_tokens.weight.data_ptr() == pointers["embed_tokens.weight"]
    want = encoder.encode(TEXTS, convert_to_tensor=True)
    config = encoder.decoder.peft_config["default"]
    save_adapter(encoder.decoder, config, tmp_path / "adapter")
    fresh, _ = tiny_lm()
    fresh_ptrs = {n: p.data_ptr() for n, p in fresh.model.named_parameters()}
    load_adapter(fresh.model, tmp_path / "adapter")
    again = EncoderFromDecoder.from_model(fresh, SPEC, tok)
    torch.testing.assert_close(again.encode(TEXTS, convert_to_tensor=True), want, atol=0, rtol=0)
    loaded = {n.replace(".base_layer", ""): p for n, p in fresh.model.named_parameters() if "lora_" not in n}
    assert {n: p.data_ptr() for n, p in loaded.items()} == fresh_ptrs  # wrapped in place, nothing copied
    assert len(pointers) == len(fresh_ptrs)


def test_finetune_writes_a_folder_that_from_pretrained_loads_with_the_base_unchanged(base, texts_file, tmp_path):
    result = finetune(base, SPEC, texts_file, tmp_path / "out", options(objectives=("mntp", "simcse")))
    assert result.steps == 4 and len(result.losses) == 4 and all(map(torch.isfinite, torch.tensor(result.losses)))
    meta = json.loads((tmp_path / "out" / "nosink.json").read_text())
    assert meta["format"] == 2 and meta["base"] == str(base.resolve()) and meta["spec"] == SPEC
    tuned = EncoderFromDecoder.from_pretrained(tmp_path / "out")
    plain = EncoderFromDecoder.from_pretrained(base, SPEC)
    assert str(tuned.spec) == SPEC and adapter_layers(tuned.decoder)
    assert (tuned.encode(TEXTS) - plain.encode(TEXTS)).__abs__().max() > 1e-5  # trained: the vectors moved
    # the base file is untouched and the loaded base tensors equal it
    stored = load_file(str(base / "model.safetensors"))
    for name, p in tuned.decoder.named_parameters():
        if "lora_" not in name:
            torch.testing.assert_close(p, stored["model." + name.replace(".base_layer", "")], atol=0, rtol=0)
    # the same folder loads twice to the same vectors
    torch.testing.assert_close(
        EncoderFromDecoder.from_pretrained(tmp_path / "out").encode(TEXTS), tuned.encode(TEXTS), atol=0, rtol=0
    )
    with pytest.raises(ValueError, match="LoRA adapter"):
        tuned.save_pretrained(tmp_path / "elsewhere")


def test_a_contrastive_objective_refuses_batches_of_one(base, tmp_path):
    data = tmp_path / "one.txt"
    data.write_text("one line only\n")  # batches shrink to the file's size: no negative would be left
    with pytest.raises(ValueError, match=r"simcse learns from the other items of a batch as negatives"):
        finetune(base, SPEC, data, tmp_path / "out", options())
    assert not (tmp_path / "out").exists()


def test_a_diverging_run_fails_and_writes_no_folder(base, texts_file, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(
        FloatingPointError, match=r"training diverged at step \d+: .*smaller --lr \(this run's: 1e\+30\)"
    ):
        finetune(base, SPEC, texts_file, out, options(learning_rate=1e30, steps=6, checkpoint_every=10))
    assert not (out / "nosink.json").exists() and not (out / "checkpoint").exists()


def test_copy_base_makes_the_folder_self_contained(base, texts_file, tmp_path):
    finetune(base, SPEC, texts_file, tmp_path / "out", options(steps=1), copy_base=True)
    meta = json.loads((tmp_path / "out" / "nosink.json").read_text())
    assert meta["base"] == "base" and (tmp_path / "out" / "base" / "config.json").is_file()
    moved = tmp_path / "moved"
    (tmp_path / "out").rename(moved)
    import shutil

    shutil.rmtree(base)
    EncoderFromDecoder.from_pretrained(moved).encode(TEXTS)


def test_an_exit_layer_is_recorded_and_applied_on_load(base, texts_file, tmp_path):
    finetune(base, "F* | M0B*2", texts_file, tmp_path / "out", options(steps=1, exit_layer=3))
    encoder = EncoderFromDecoder.from_pretrained(tmp_path / "out")
    assert encoder.exit_layer == 3
    lora = {int(n.split(".")[1]) for n, _ in encoder.decoder.named_parameters() if "lora_" in n}
    assert lora == {0, 1, 2}  # the layer above the exit never runs, so it has no adapter


# ------------------------------------------------------------------ serving: chat from the base, embeddings tuned


def _post(running, path, body):
    conn = http.client.HTTPConnection(running.host, running.port, timeout=120)
    conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    data = json.loads(response.read())
    conn.close()
    assert response.status == 200, data
    return data


def test_serve_answers_chat_from_the_base_and_embeddings_through_the_adapter_on_one_copy(base, texts_file, tmp_path):
    from nosink.serve import ServerThread, create_app, load_model

    finetune(base, SPEC, texts_file, tmp_path / "out", options(steps=1))
    weights = tmp_path / "out" / "adapter" / "adapter_model.safetensors"
    state = load_file(str(weights))  # a strong adapter, so that it would change chat's greedy answer
    torch.manual_seed(0)
    save_file({k: torch.randn_like(v) * 0.5 if "lora_B" in k else v for k, v in state.items()}, str(weights))
    model, tok = load_model(tmp_path / "out")
    app = create_app(model, tok, SPEC, name="m")
    encoder, engine = app.state.encoder, app.state.engine
    assert encoder.decoder is model.model and engine.adapters == adapter_layers(model)
    model_ptrs = {p.data_ptr() for p in model.parameters()}
    assert {p.data_ptr() for p in encoder.parameters()} <= model_ptrs  # one copy of every weight
    plain_lm, _ = tiny_lm()
    prompt = tok.apply_chat_template([{"role": "user", "content": "the cat"}], add_generation_prompt=True,
                                     tokenize=False)  # fmt: skip
    ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])

    def greedy(lm):
        with torch.no_grad():
            out = lm.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
        return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)

    assert greedy(model) != greedy(plain_lm)  # the adapter, left on, would change the chat
    with ServerThread(app) as running:
        messages = [{"role": "user", "content": "the cat"}]
        chat = _post(running, "/v1/chat/completions", {"model": "m", "messages": messages, "max_tokens": 6,
                                                        "temperature": 0})  # fmt: skip
        vectors = _post(running, "/v1/embeddings", {"model": "m", "input": TEXTS[:3]})
    assert chat["choices"][0]["message"]["content"] == greedy(plain_lm)
    want = EncoderFromDecoder.from_pretrained(tmp_path / "out").encode(TEXTS[:3])
    got = torch.tensor([item["embedding"] for item in vectors["data"]])
    torch.testing.assert_close(got, torch.nn.functional.normalize(torch.tensor(want), dim=-1), atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------ losses go down, resume continues


@pytest.mark.parametrize("objective", ["simcse", "mntp", "mnrl"])
def test_a_training_step_lowers_the_loss_on_a_fixed_batch(objective):
    encoder, lm, tok = adapted(scale=0.0)
    pairs = list(zip(TEXTS[::2], TEXTS[1::2], strict=True))
    mask = mask_token_id(tok)

    def loss():
        if objective == "simcse":
            return simcse_loss(encoder, TEXTS, 0.05)
        if objective == "mnrl":
            return mnrl_loss(encoder, pairs, 0.05)
        generator = torch.Generator().manual_seed(3)  # the same masks every time
        return mntp_loss(encoder, lm.get_output_embeddings(), TEXTS, mask_id=mask, probability=0.3, generator=generator)

    params = [p for p in encoder.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-2)
    encoder.eval()  # no dropout: the loss of the batch is a function of the weights alone
    before = loss()
    optimizer.zero_grad()
    before.backward()
    optimizer.step()
    with torch.no_grad():
        after = loss()
    assert after.item() < before.item() - 1e-4


def test_mntp_masks_text_tokens_only_and_predicts_them_from_the_token_before(monkeypatch):
    encoder, lm, _ = adapted()
    seen = {}
    head = lm.get_output_embeddings()

    def spy(hidden):
        seen["rows"] = hidden.shape[0]
        return head(hidden)

    generator = torch.Generator().manual_seed(0)
    mntp_loss(encoder, spy, ["the cat"], mask_id=3, probability=0.99, instruction="what is ", generator=generator)
    assert seen["rows"] == 2  # both text tokens, never the sink token or the instruction's


def test_resume_continues_where_the_run_stopped(base, texts_file, tmp_path):
    whole = finetune(base, SPEC, texts_file, tmp_path / "a", options(steps=6, objectives=("mntp", "simcse")))
    first = finetune(base, SPEC, texts_file, tmp_path / "b", options(steps=3, objectives=("mntp", "simcse")))
    assert first.steps == 3
    rest = finetune(base, SPEC, texts_file, tmp_path / "b", options(steps=6, objectives=("mntp", "simcse")),
                    resume=True)  # fmt: skip
    assert rest.steps == 6 and rest.losses[:3] == first.losses
    assert rest.losses == pytest.approx(whole.losses, abs=1e-6)
    a = load_file(str(tmp_path / "a" / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "b" / "adapter" / "adapter_model.safetensors"))
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="other options or data"):
        finetune(base, SPEC, texts_file, tmp_path / "b", options(steps=8, seed=5), resume=True)


def test_resume_refuses_another_spec_or_base_before_loading_anything(base, texts_file, tmp_path):
    finetune(base, SPEC, texts_file, tmp_path / "b", options(steps=2, objectives=("mntp", "simcse")))
    nosink_json = (tmp_path / "b" / "nosink.json").read_text()
    again = options(steps=4, objectives=("mntp", "simcse"))
    with pytest.raises(ValueError, match=r"written by a run of .*'spec': 'F\* \| B\*2'.*resume with the same model"):
        finetune(base, "F* | B*2", texts_file, tmp_path / "b", again, resume=True)
    other = tmp_path / "other-base"
    shutil.copytree(base, other)  # the same shape and weights, another model as far as the run can tell
    with pytest.raises(ValueError, match=r"written by a run of .*resume with the same model and spec"):
        finetune(other, SPEC, texts_file, tmp_path / "b", again, resume=True)
    assert (tmp_path / "b" / "nosink.json").read_text() == nosink_json  # refused runs rewrite nothing


def test_a_minutes_budget_stops_the_run(base, texts_file, tmp_path):
    result = finetune(base, SPEC, texts_file, tmp_path / "out", options(steps=None, minutes=0.0001))
    assert result.steps == 1  # the first step already spends the budget


# ------------------------------------------------------------------ bad input


def test_bad_inputs_give_clear_errors_before_any_weights_load(base, texts_file, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(ValueError, match="holds no texts"):
        finetune(base, SPEC, empty, tmp_path / "o1", options())
    with pytest.raises(FileNotFoundError, match="no data file"):
        finetune(base, SPEC, tmp_path / "missing.txt", tmp_path / "o2", options())
    with pytest.raises(SpecError):
        finetune(base, "F* | Q*2", texts_file, tmp_path / "o3", options())
    with pytest.raises(SpecError):
        finetune(base, "F*3 | B*9", texts_file, tmp_path / "o3", options())  # 12 layers on a 4-layer decoder
    with pytest.raises(ValueError, match="not a pair"):
        finetune(base, SPEC, texts_file, tmp_path / "o4", options(objectives=("mnrl",)))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(FileExistsError, match="not empty"):
        finetune(base, SPEC, texts_file, tmp_path / "full", options())
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        finetune(base, SPEC, texts_file, tmp_path / "new", options(), resume=True)
    for bad in ({"objectives": ("mlm",)}, {"objectives": ("mnrl", "simcse")}, {"steps": None, "minutes": None},
                {"attention_dropout": 1.0}, {"batch_size": 1}, {"steps": 0}, {"temperature": 0}):  # fmt: skip
        with pytest.raises(ValueError):
            options(**bad)


def test_a_broken_adapter_folder_is_an_oserror(base, texts_file, tmp_path):
    finetune(base, SPEC, texts_file, tmp_path / "out", options(steps=1))
    (tmp_path / "out" / "adapter" / "adapter_model.safetensors").unlink()
    with pytest.raises(OSError, match=r"adapter_model\.safetensors"):
        EncoderFromDecoder.from_pretrained(tmp_path / "out")
    meta = json.loads((tmp_path / "out" / "nosink.json").read_text())
    (tmp_path / "out" / "nosink.json").write_text(json.dumps({**meta, "base": None}))
    with pytest.raises(OSError, match="'base'"):
        EncoderFromDecoder.from_pretrained(tmp_path / "out")
    (tmp_path / "out" / "nosink.json").write_text(json.dumps({**meta, "format": 3}))
    with pytest.raises(OSError, match="upgrade nosink"):
        EncoderFromDecoder.from_pretrained(tmp_path / "out")


def test_the_command_line_trains_and_reports(base, texts_file, tmp_path, capsys):
    from nosink.cli import main

    out = tmp_path / "cli-out"
    argv = ["finetune", str(base), "--spec", SPEC, "--data", str(texts_file), "--out", str(out), "--steps", "2",
            "--batch-size", "4", "--rank", "4", "--no-progress", "--objective", "mntp", "simcse"]  # fmt: skip
    assert main(argv) == 0
    assert "trained 2 steps" in capsys.readouterr().out
    assert main(argv) == 1  # the folder is not empty now
    assert "not empty" in capsys.readouterr().err
    assert main([*argv, "--steps", "3", "--resume"]) == 0  # the later --steps wins
    assert "trained 3 steps" in capsys.readouterr().out


def test_lora_on_the_converted_layers_only(base, texts_file, tmp_path):
    finetune(base, "F*2 | B | M0B", texts_file, tmp_path / "out", options(steps=1, lora_layers="converted"))
    encoder = EncoderFromDecoder.from_pretrained(tmp_path / "out")
    assert {int(n.split(".")[1]) for n, _ in encoder.decoder.named_parameters() if "lora_" in n} == {2, 3}
    with pytest.raises(ValueError, match="converts no layer"):
        finetune(base, "F*", texts_file, tmp_path / "o2", options(steps=1, lora_layers="converted"))


def test_autocast_runs_the_forward_in_bfloat16_and_keeps_the_adapter_float32(base, texts_file, tmp_path, monkeypatch):
    import nosink.finetune.loop as loop

    seen = []

    def spy(*args, **kwargs):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return simcse_loss(*args, **kwargs)

    monkeypatch.setattr(loop, "simcse_loss", spy)
    plain = finetune(base, SPEC, texts_file, tmp_path / "plain", options(steps=2))
    assert len(seen) == 2 and not any(on for on, _ in seen)
    seen.clear()
    mixed = finetune(base, SPEC, texts_file, tmp_path / "mixed", options(steps=2, autocast="bfloat16"))
    assert seen == [(True, torch.bfloat16)] * 2
    assert mixed.losses != plain.losses and mixed.losses == pytest.approx(plain.losses, rel=0.1)
    adapter = load_file(str(tmp_path / "mixed" / "adapter" / "adapter_model.safetensors"))
    assert adapter and all(t.dtype == torch.float32 for t in adapter.values())
    with pytest.raises(ValueError, match="other options or data"):  # a run resumes with the precision it began with
        finetune(base, SPEC, texts_file, tmp_path / "mixed", options(steps=3), resume=True)
    with pytest.raises(ValueError, match="autocast must be"):
        options(autocast="float16")


@pytest.mark.parametrize("family", ["qwen2", "gemma3_text", "phi3", "gpt2"])
def test_other_families_train_through_the_same_loop_with_attention_dropout(family):
    from tiny import tiny_decoder

    encoder = EncoderFromDecoder.from_model(tiny_decoder(family), "F* | B | M0B*2", tiny_tokenizer())
    for module in encoder.modules():  # GPT-2's config drops out embeddings and residuals too (0.1) in training mode
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    add_lora(encoder.decoder, list(range(encoder.depth)), rank=4, alpha=8, dropout=0.0)
    with torch.no_grad():
        for name, p in encoder.decoder.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    want = encoder.encode(TEXTS, convert_to_tensor=True)
    encoder.train()
    torch.testing.assert_close(embed(encoder, TEXTS).detach(), want, atol=1e-5, rtol=1e-5)
    with torch.no_grad(), attention_dropout(encoder.decoder, 0.3) as count:
        assert count == encoder.depth
        assert (embed(encoder, TEXTS) - embed(encoder, TEXTS)).abs().max() > 1e-3
