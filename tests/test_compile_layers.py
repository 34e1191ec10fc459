"""``compile=``: decoder layers run through one compiled function, with the uncompiled results.

One compiled function takes the layer as an argument, so every layer of a class reuses the graphs the
first one made: a whole forward pass makes as many graphs as a one-layer model (dynamo's
``unique_graphs`` counter), and later batches of other lengths compile nothing new (checked with
``torch._dynamo.config.error_on_recompile``, which raises on any recompilation). Most tests use the
``aot_eager`` backend (the same graph capture, no code generation: seconds on CPU); one runs inductor,
which works on this CPU with its C++ compiler.
"""

import pytest
import torch
from test_fast_attention import TOL, batch, padding
from tiny import tiny_decoder

from nosink import EncoderFromDecoder

BATCHES = [("right", 11), ("left", 13), ("right", 17), ("both", 9)]  # padded, of several lengths


def outputs(encoder, batches):
    with torch.inference_mode():
        return [encoder(*batch(side, seq=seq)).last_hidden_state for side, seq in batches]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize(
    "options",
    [
        {"fast_attention": True, "pack_padding": True},
        {"fast_attention": True, "pack_padding": False},
        {"fast_attention": False},
    ],
    ids=["packed", "fast-padded", "dense"],
)
@pytest.mark.parametrize("spec", ["F* | M0B*2", "R | B | M1F | F | EXTEND(B*2)"])
def test_compiled_layers_equal_uncompiled_without_recompiling(spec, options):
    from torch._dynamo.utils import counters

    model = tiny_decoder("llama", seed=1)
    plain = EncoderFromDecoder(model, spec, **options)
    compiled = EncoderFromDecoder(model, spec, compile={"backend": "aot_eager"}, **options)
    want = outputs(plain, BATCHES)
    counters.clear()
    got = outputs(compiled, BATCHES[:1])
    graphs = counters["stats"]["unique_graphs"]
    with torch._dynamo.config.patch(error_on_recompile=True):
        got += outputs(compiled, BATCHES[1:])  # other lengths and paddings: any recompilation raises
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=TOL, rtol=0)
    # The whole first pass (up to 6 layer steps of several kinds) made the graphs of one layer step.
    torch._dynamo.reset()
    counters.clear()
    outputs(EncoderFromDecoder(model, "F", exit_layer=1, compile={"backend": "aot_eager"}, **options), BATCHES[:1])
    assert counters["stats"]["unique_graphs"] == graphs > 0


def test_gemma3_layer_types_and_gpt2_compile():
    for family in ("gemma3_text", "gpt2"):
        model = tiny_decoder(family)
        plain = EncoderFromDecoder(model, "F* | M0B*2", fast_attention=True)
        compiled = EncoderFromDecoder(model, "F* | M0B*2", fast_attention=True, compile={"backend": "aot_eager"})
        for a, b in zip(outputs(compiled, BATCHES[:2]), outputs(plain, BATCHES[:2]), strict=True):
            torch.testing.assert_close(a, b, atol=TOL, rtol=0)


def test_inductor_compiles_the_packed_fast_path():
    model = tiny_decoder("qwen3")
    plain = EncoderFromDecoder(model, "F* | M0B*2", fast_attention=True)
    compiled = EncoderFromDecoder(model, "F* | M0B*2", fast_attention=True, compile=True)
    want = outputs(plain, BATCHES[:2])
    got = outputs(compiled, BATCHES[:1])
    with torch._dynamo.config.patch(error_on_recompile=True):
        got += outputs(compiled, BATCHES[1:2])
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=TOL, rtol=0)  # generated kernels round like eager to 1e-5


def test_compile_errors():
    model = tiny_decoder("llama")
    with pytest.raises(TypeError, match="compile must be True, False, None or a dict"):
        EncoderFromDecoder(model, "F*", compile="max-autotune")

    def broken(graph, example_inputs):
        raise RuntimeError("no compiler here")

    encoder = EncoderFromDecoder(model, "F*", compile={"backend": broken})
    ids, mask = batch("right")
    with pytest.raises(RuntimeError, match=r"(?s)could not compile layer 0.*compile=False"):
        encoder(ids, mask)


def test_compile_unavailable_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch._dynamo, "is_dynamo_supported", lambda: False)
    with pytest.raises(RuntimeError, match=r"torch.compile is not available.*compile=False"):
        EncoderFromDecoder(tiny_decoder("llama"), "F*", compile=True)


def test_from_pretrained_takes_the_options(tmp_path):
    from tiny import tiny_tokenizer

    model = tiny_decoder("llama")
    EncoderFromDecoder(model, "F*", tiny_tokenizer()).save_pretrained(tmp_path / "enc")
    encoder = EncoderFromDecoder.from_pretrained(
        tmp_path / "enc", fast_attention=True, pack_padding=True, compile={"backend": "aot_eager"}
    )
    assert encoder.fast_attention is True and encoder.pack_padding is True and encoder.parts._compiled is not None
    mask = padding([5, 2], 5, "right")
    ids = torch.randint(3, 96, (2, 5))
    assert torch.isfinite(encoder(ids, mask).last_hidden_state).all()
