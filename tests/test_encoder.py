"""EncoderFromDecoder against references: the stock model, appendix-D matrices, shared parameters."""

import pytest
import torch
from tiny import CONFIGS, tiny_decoder

from nosink import EncoderFromDecoder, SpecError, UnsupportedModelError, parse_spec
from nosink.layerspec.masks import relative_positions

FAMILIES = sorted(CONFIGS)
ATTN = ["sdpa", "eager"]

IDS = torch.randint(3, 90, (3, 8), generator=torch.Generator().manual_seed(1))
# a full row, a right-padded row and a left-padded row
MASK = torch.tensor([[1] * 8, [1] * 5 + [0] * 3, [0] * 2 + [1] * 6])
REAL = MASK.bool()
POS = relative_positions(MASK).clamp(min=0)


def stock(model, mask4=None, hooks=None):
    """The stock model's last hidden state, positions counted from each row's first token."""
    handles = []
    for layer, fn in (hooks or {}).items():
        handles.append(layer.register_forward_pre_hook(fn, with_kwargs=True))
    try:
        with torch.no_grad():
            return model(input_ids=IDS, attention_mask=MASK if mask4 is None else mask4, position_ids=POS)[0]
    finally:
        for h in handles:
            h.remove()


def encoded(model, spec):
    with torch.no_grad():
        return EncoderFromDecoder(model, spec)(IDS, MASK).last_hidden_state


@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("family", FAMILIES)
def test_all_forward_reproduces_the_stock_model(family, attn):
    model = tiny_decoder(family, attn)
    diff = (encoded(model, "F*") - stock(model))[REAL].abs().max()
    assert diff <= 1e-5


@pytest.mark.parametrize("family", ["mistral", "qwen2", "gemma3_text"])
def test_sliding_windows_are_kept_on_forward_layers_and_matter(family):
    model = tiny_decoder(family)
    parts = EncoderFromDecoder(model, "F*").parts
    assert any(w is not None for w in parts.windows)
    # The stock sliding window changes the result on these 8-token rows, so the equality above is not vacuous.
    unwindowed = EncoderFromDecoder(model, "F*")
    unwindowed.plan = parse_spec("F*").resolve(unwindowed.depth)  # resolved without the decoder's windows
    assert any(s.window is not None for s in EncoderFromDecoder(model, "F*").plan.layer_steps)
    with torch.no_grad():
        assert (unwindowed(IDS, MASK).last_hidden_state - stock(model))[REAL].abs().max() > 1e-4


def bidirectional_padding_mask(attn):
    # Written from scratch: every query sees every real key of its row.
    mask = MASK[:, None, None, :].bool().expand(-1, 1, MASK.shape[1], -1)
    return mask if attn == "sdpa" else torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("family", FAMILIES)
def test_all_bidirectional_equals_the_stock_model_without_causal_mask(family, attn):
    model = tiny_decoder(family, attn)
    diff = (encoded(model, "B*") - stock(model, bidirectional_padding_mask(attn)))[REAL].abs().max()
    assert diff <= 1e-5


# Appendix D's matrices, for one row of T real tokens starting at column `start` (additive, eager).
def appendix_d(kind: str, T: int, width: int, start: int) -> torch.Tensor:
    inf = torch.finfo(torch.float32).min
    body = torch.zeros(T, T)
    if kind == "FWD":
        body = torch.triu(torch.full((T, T), inf), diagonal=1)
    elif kind == "BWD":
        body = torch.tril(torch.full((T, T), inf), diagonal=-1)
    elif kind == "MASK0":
        body[1:, 0] = inf
    full = torch.full((width, width), inf)
    full.fill_diagonal_(0)  # padding queries: themselves only
    full[start : start + T, start : start + T] = body
    return full


def appendix_d_batch(kind: str) -> torch.Tensor:
    rows = []
    for row in MASK:
        idx = row.nonzero().flatten()
        rows.append(appendix_d(kind, len(idx), len(row), int(idx[0])))
    return torch.stack(rows)[:, None]  # (B, 1, T, T)


def per_layer_hooks(model, kinds):
    layers = EncoderFromDecoder(model, "F*").parts.layers
    hooks = {}
    for layer, kind in zip(layers, kinds, strict=True):
        matrix = appendix_d_batch(kind)

        def hook(module, args, kwargs, matrix=matrix):
            if "attention_mask" in kwargs:
                return args, {**kwargs, "attention_mask": matrix}
            return (*args[:2], matrix, *args[3:]), kwargs  # GPT-2 passes (hidden, cache, mask) by position

        hooks[layer] = hook
    return hooks


@pytest.mark.parametrize(
    "spec, kinds",
    [
        ("M0B*", ["MASK0"] * 4),
        ("R*", ["BWD"] * 4),
        ("F*2 | M0B*2", ["FWD", "FWD", "MASK0", "MASK0"]),
        ("F | R | B | M0B", ["FWD", "BWD", "BIDIR", "MASK0"]),
    ],
)
@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2", "phi3"])
def test_mask0_and_back_layers_equal_an_eager_reference_with_appendix_d_matrices(family, spec, kinds):
    model = tiny_decoder(family, "eager")
    if family == "qwen2":  # the reference has no sliding windows
        model.config.layer_types = ["full_attention"] * 4
    reference = stock(model, hooks=per_layer_hooks(model, kinds))
    diff = (encoded(model, spec) - reference)[REAL].abs().max()
    assert diff <= 1e-5
    assert (encoded(model, "F*") - reference)[REAL].abs().max() > 1e-4  # the masks made a difference


def run_layers(model, h, kinds, layer_ids, attn="eager"):
    """Hand-written loop over stock layers with appendix-D masks (for the combinators)."""
    parts = EncoderFromDecoder(model, "F*").parts
    rope = parts.rotary(h, position_ids=POS)
    for kind, i in zip(kinds, layer_ids, strict=True):
        out = parts.layers[i](h, attention_mask=appendix_d_batch(kind), position_embeddings=rope, position_ids=POS)
        h = out[0] if isinstance(out, tuple) else out
    return h


def inter_reference(m, emb):
    # INTER: both streams from the same input, summed once after the block.
    x = run_layers(m, emb, ["FWD"] * 2, [0, 1])
    return run_layers(m, x, ["FWD"] * 2, [2, 3]) + run_layers(m, x, ["BWD"] * 2, [2, 3])


def extra_reference(m, emb):
    # EXTRA: a branch from the embeddings through the first layers, added before the final norm.
    return run_layers(m, emb, ["FWD"] * 4, [0, 1, 2, 3]) + run_layers(m, emb, ["BIDIR"] * 2, [0, 1])


def extend_reference(m, emb):
    # EXTEND: the last layer's weights again on top.
    return run_layers(m, emb, ["FWD"] * 4 + ["BWD"] * 2, [0, 1, 2, 3, 3, 3])


@pytest.mark.parametrize(
    "spec, reference",
    [
        ("F*2 | INTER(R*2)", inter_reference),
        ("F* | EXTRA(B*2)", extra_reference),
        ("F* | EXTEND(R*2)", extend_reference),
    ],
)
def test_combinators_equal_hand_written_references(spec, reference):
    model = tiny_decoder("llama", "eager")
    with torch.no_grad():
        emb = model.embed_tokens(IDS)
        expected = model.norm(reference(model, emb))
    assert (encoded(model, spec) - expected)[REAL].abs().max() <= 1e-5


@pytest.mark.parametrize(
    "spec", ["F*", "F* | B*2", "F* | INTER(R*2)", "F* | EXTRA(B*3)", "F* | EXTEND(B*2)", "M0B* | EXTEND(R)"]
)
def test_parameters_are_the_decoders_tensors(spec):
    model = tiny_decoder("llama")
    encoder = EncoderFromDecoder.from_model(model, spec)
    ours = {name: p.data_ptr() for name, p in encoder.named_parameters()}
    theirs = {"decoder." + name: p.data_ptr() for name, p in model.named_parameters()}
    assert ours == theirs
    assert sum(p.numel() for p in encoder.parameters()) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", ["F* | INTER(R*2)", "F* | EXTRA(B*3)", "F* | EXTEND(B*2)"])
def test_combinators_run_the_decoders_own_layer_modules(family, spec):
    # Parameters alone could be shared while a copy runs: count calls on the decoder's own layers,
    # and check that changing a weight of the decoder changes the encoder's output.
    model = tiny_decoder(family)
    encoder = EncoderFromDecoder(model, spec)
    calls = []
    layers = encoder.parts.layers
    hooks = [layer.register_forward_hook(lambda m, a, o, i=i: calls.append(i)) for i, layer in enumerate(layers)]
    before = encoder(IDS, MASK).last_hidden_state
    for h in hooks:
        h.remove()
    assert sorted(calls) == sorted(s.layer for s in encoder.plan.layer_steps)
    target = 3 if "EXTEND" in spec else 0  # EXTEND reuses the last layer; EXTRA starts at the first
    with torch.no_grad():
        # an MLP weight: attention projections can be normalised away (Gemma3's q/k norms)
        next(p for name, p in layers[target].named_parameters() if "mlp" in name).mul_(1.5)
    assert (encoder(IDS, MASK).last_hidden_state - before).abs().max() > 1e-4


def test_wraps_a_causal_lm_and_shares_its_tensors():
    import transformers as tf

    config = CONFIGS["llama"]()
    chat = tf.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    encoder = EncoderFromDecoder.from_model(chat, "F* | M0B*2")
    assert encoder.decoder is chat.model
    assert encoder.parts.embed_tokens.weight.data_ptr() == chat.model.embed_tokens.weight.data_ptr()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("spec", ["F*", "R*", "M0B*", "F*2 | M0F*2", "F* | INTER(R*2) | EXTEND(B)", "EXTRA(M3B) | B*"])
def test_half_precision_gives_no_nan(family, spec, dtype):
    for attn in ATTN:
        model = tiny_decoder(family, attn, dtype=dtype)
        encoder = EncoderFromDecoder(model, spec)
        ids = torch.tensor([[5, 0, 0], [5, 6, 7], [0, 0, 0]])
        mask = torch.tensor([[1, 0, 0], [1, 1, 1], [0, 0, 0]])  # one token, full, all padding
        with torch.no_grad():
            out = encoder(ids, mask).last_hidden_state
        assert out.dtype == dtype
        assert not torch.isnan(out).any(), (spec, attn)


def test_one_mask_per_kind_and_window_per_batch(monkeypatch):
    import nosink.models.batch as module

    calls = []
    real = module.build_mask
    monkeypatch.setattr(module, "build_mask", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F | R | M0B | M0B")
    encoder(IDS, MASK)
    assert sorted(map(str, calls)) == ["F", "M0B", "R"]


def test_depth_mismatch_fails_at_build_time_before_running():
    with pytest.raises(SpecError, match="spec adds up to 6 layers but the model has 4"):
        EncoderFromDecoder(tiny_decoder("llama"), "F*3 | B*3")


def test_unsupported_family_lists_the_supported_ones():
    import transformers as tf

    model = tf.AutoModel.from_config(tf.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2))
    with pytest.raises(UnsupportedModelError, match="model type 'bert' is not supported; supported families: Llama"):
        EncoderFromDecoder(model, "F*")


def test_flash_attention_is_refused_with_the_fix():
    model = tiny_decoder("llama")
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(UnsupportedModelError, match="attn_implementation='sdpa'"):
        EncoderFromDecoder(model, "F*")


def test_bad_inputs_are_clear_errors():
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F*")
    with pytest.raises(ValueError, match="input_ids must be a \\(batch, seq\\) tensor"):
        encoder(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="does not match input_ids"):
        encoder(IDS, MASK[:, :4])
    with pytest.raises(ValueError, match="no tokens"):
        encoder(torch.zeros(2, 0, dtype=torch.long))


def test_hidden_states_are_returned_per_main_step():
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F* | EXTEND(B)")
    out = encoder(IDS, MASK, output_hidden_states=True)
    assert len(out.hidden_states) == 1 + 5
    assert str(parse_spec("F* | EXTEND(B)")) in repr(encoder)
