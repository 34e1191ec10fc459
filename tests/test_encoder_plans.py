"""The encoder runs compiled plans: compiled once per call, windows from the plan, bad batches refused, and
attention weights computed without touching shared state (safe beside encode() in another thread)."""

import threading
import warnings

import pytest
import torch
from tiny import tiny_decoder, tiny_tokenizer

import nosink.layerspec.plan as plan_module
from nosink import EncoderFromDecoder, parse_spec

IDS = torch.randint(3, 90, (3, 8), generator=torch.Generator().manual_seed(1))
MASK = torch.tensor([[1] * 8, [1] * 5 + [0] * 3, [0] * 2 + [1] * 6])
TEXTS = ["the cat sat on the mat", "paris is the capital of france", "we love food", "a dog ran", "i eat", "bank"]


def test_encode_specs_compiles_each_spec_once_per_call_not_per_batch(monkeypatch):
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer())
    calls = []
    real = plan_module.resolve
    monkeypatch.setattr(plan_module, "resolve", lambda spec, *a, **k: calls.append(str(spec)) or real(spec, *a, **k))
    out = encoder.encode_specs(["F* | B", "F* | R*2"], TEXTS, batch_size=2)  # 3 batches
    assert sorted(calls) == ["F* | B", "F* | R*2"]
    assert out["F* | B"].shape == (6, 32)


def test_forward_specs_takes_plans_and_gives_what_strings_give():
    encoder = EncoderFromDecoder(tiny_decoder("mistral"), "F*")  # sliding windows on every layer
    plans = [parse_spec(s).resolve(encoder.depth, windows=encoder.parts.windows) for s in ("F* | B*2", "F*")]
    with torch.no_grad():
        from_plans = encoder.forward_specs(IDS, MASK, plans)
        from_text = encoder.forward_specs(IDS, MASK, ["F* | B*2", "F*"])
    assert list(from_plans) == ["F* | B*2", "F*"]
    for name in from_text:
        assert torch.equal(from_plans[name], from_text[name])


def test_a_plan_for_another_decoder_is_refused():
    encoder = EncoderFromDecoder(tiny_decoder("mistral"), "F*")
    with pytest.raises(ValueError, match="resolved for 4 layers and windows None, not for this decoder"):
        encoder.forward_specs(IDS, MASK, [parse_spec("F*").resolve(4)])  # no windows: not this decoder's plan
    with pytest.raises(ValueError, match="resolved for 3 layers"):
        encoder.forward_specs(IDS, MASK, [parse_spec("F*").resolve(3)])


def test_one_spec_instead_of_a_list_is_a_type_error():
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F*")
    with pytest.raises(TypeError, match="specs is a list of specs; got one str"):
        encoder.forward_specs(IDS, MASK, "F*")  # would be read as the specs 'F' and '*'


def test_the_loop_reads_windows_from_the_plan_only():
    model = tiny_decoder("gemma3_text")
    encoder = EncoderFromDecoder(model, "F* | B")
    assert [s.window for s in encoder.plan.layer_steps] == [3, 3, 3, None]  # sliding layers; B drops its window
    with torch.no_grad():
        before = encoder(IDS, MASK).last_hidden_state
        encoder.parts.windows = (None,) * encoder.depth  # the loop does not look here
        assert torch.equal(encoder(IDS, MASK).last_hidden_state, before)


def test_an_empty_batch_is_a_value_error():
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F* | B")
    with pytest.raises(ValueError, match=r"input_ids has no rows \(batch size 0\)"):
        encoder(torch.zeros(0, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"input_ids has no rows"):
        encoder.forward_specs(torch.zeros(0, 5, dtype=torch.long), None, ["F*"])


def test_rows_past_max_position_embeddings_warn_once_for_rotary_models():
    model = tiny_decoder("llama")
    model.config.max_position_embeddings = 6
    encoder = EncoderFromDecoder(model, "F*")
    left_padded = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1]])  # 8 columns, 6 positions: within range
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        encoder(IDS[:1], left_padded)
    with pytest.warns(UserWarning, match=r"past this model's max_position_embeddings \(6\)") as seen:
        with warnings.catch_warnings():
            warnings.simplefilter("default")  # Python's default: each message once per place
            encoder(IDS, MASK)
            encoder(IDS, MASK)
    assert len([w for w in seen if "max_position_embeddings" in str(w.message)]) == 1


# ---------------------------------------------------------------- attention weights beside other threads


def test_attention_weights_change_nothing_that_another_thread_sees():
    # While one thread is inside attention_weights(), another thread runs a whole forward pass on the same
    # modules (forced by a hook, so the interleaving is certain): it must run on the stock SDPA path and
    # see no capture, and the weights must be those of a call made alone.
    encoder = EncoderFromDecoder(tiny_decoder("llama", "sdpa"), "F* | M0B*2")
    with torch.no_grad():
        alone = encoder.attention_weights(IDS, MASK)
        reference = encoder(IDS, MASK).last_hidden_state
    seen, other = {}, {}
    inside, done = threading.Event(), threading.Event()

    def other_thread():
        inside.wait(30)
        seen["backend"] = encoder.parts.attn_implementation
        with torch.no_grad():
            other["out"] = encoder(IDS, MASK).last_hidden_state
        done.set()

    def pause_once(module, args, kwargs):
        if threading.current_thread() is main and not inside.is_set():
            inside.set()
            done.wait(30)

    main = threading.current_thread()
    worker = threading.Thread(target=other_thread)
    worker.start()
    hook = encoder.parts.layers[0].register_forward_pre_hook(pause_once, with_kwargs=True)
    try:
        together = encoder.attention_weights(IDS, MASK)
    finally:
        hook.remove()
        worker.join(30)
    assert done.is_set() and seen["backend"] == "sdpa"
    assert torch.allclose(other["out"], reference, atol=1e-6)
    assert [step for step, _ in together] == [step for step, _ in alone]
    for (_, a), (_, b) in zip(together, alone, strict=True):
        assert torch.equal(a, b)


def test_attention_weights_and_encode_in_two_threads_free_running():
    encoder = EncoderFromDecoder(tiny_decoder("qwen2", "sdpa"), "F* | B*2", tiny_tokenizer())
    expected = encoder.encode(TEXTS)
    errors: list[BaseException] = []
    stop = threading.Event()

    def encode_loop():
        try:
            while not stop.is_set():
                assert abs(encoder.encode(TEXTS) - expected).max() < 1e-5
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    worker = threading.Thread(target=encode_loop)
    worker.start()
    try:
        for _ in range(20):
            weights = encoder.attention_weights(IDS, MASK)
            assert len(weights) == len(encoder.plan.layer_steps)
    finally:
        stop.set()
        worker.join(60)
    assert not errors, errors
