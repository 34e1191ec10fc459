"""save_pretrained / from_pretrained round trips, and clear errors for damaged folders."""

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from tiny import tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder

TEXTS = ["the cat sat on the mat", "paris is the capital of france"]


@pytest.mark.parametrize("family", ["llama", "gemma3_text", "gpt2"])
@pytest.mark.parametrize("spec", ["F* | M0B*2", "F* | INTER(R*2) | EXTEND(B)"])
def test_round_trip_gives_the_same_outputs(tmp_path, family, spec):
    encoder = EncoderFromDecoder(tiny_decoder(family), spec, tiny_tokenizer(), sink_token="none")
    encoder.save_pretrained(tmp_path)
    meta = json.loads((tmp_path / "nosink.json").read_text())
    assert meta["spec"] == str(encoder.spec) and meta["sink_token"] == "none"
    loaded = EncoderFromDecoder.from_pretrained(tmp_path)
    assert loaded.spec == encoder.spec and loaded.sink_token == "none"
    np.testing.assert_array_equal(loaded.encode(TEXTS), encoder.encode(TEXTS))


def test_weights_are_stored_once(tmp_path):
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F* | EXTEND(B*3)", tiny_tokenizer())
    encoder.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", framework="pt") as f:
        stored = sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys())
    assert stored == sum(p.numel() for p in encoder.decoder.parameters())


def test_spec_given_at_load_replaces_the_saved_one(tmp_path):
    EncoderFromDecoder(tiny_decoder("llama"), "F* | M0B*2", tiny_tokenizer()).save_pretrained(tmp_path)
    assert str(EncoderFromDecoder.from_pretrained(tmp_path, spec="B*").spec) == "B*"


def test_plain_decoder_folder_needs_a_spec(tmp_path):
    tiny_decoder("llama").save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="is a plain decoder: give a spec"):
        EncoderFromDecoder.from_pretrained(tmp_path)
    encoder = EncoderFromDecoder.from_pretrained(tmp_path, spec="F* | B")
    assert encoder.tokenizer is None  # none saved there; encode() would say so


def test_truncated_weights_are_a_clear_error(tmp_path):
    EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer()).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(OSError, match=r"model\.safetensors is corrupted or truncated"):
        EncoderFromDecoder.from_pretrained(tmp_path)


def test_garbage_weights_are_a_clear_error(tmp_path):
    EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer()).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(OSError, match="corrupted or truncated"):
        EncoderFromDecoder.from_pretrained(tmp_path)


def _edit_json(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("layers", [3, 6])
def test_config_depth_that_differs_from_the_saved_encoder_is_a_clear_error(tmp_path, layers):
    EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer()).save_pretrained(tmp_path)
    _edit_json(tmp_path / "config.json", num_hidden_layers=layers)
    with pytest.raises(OSError, match=f"says num_hidden_layers 4 but config.json has {layers}"):
        EncoderFromDecoder.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"num_hidden_layers": 3}, "unexpected_keys"),  # the file has a fourth layer the config lacks
        ({"num_hidden_layers": 6}, "missing_keys"),
        ({"intermediate_size": 40}, "do not match the model's config"),
    ],
)
def test_weights_that_do_not_match_the_config_are_a_clear_error(tmp_path, changes, message):
    EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer()).save_pretrained(tmp_path)
    _edit_json(tmp_path / "config.json", **changes)
    meta = json.loads((tmp_path / "nosink.json").read_text())
    del meta["num_hidden_layers"]  # as if written without it: the weights themselves must catch it
    (tmp_path / "nosink.json").write_text(json.dumps(meta))
    with pytest.raises(OSError, match=message):
        EncoderFromDecoder.from_pretrained(tmp_path)


def test_newer_format_is_refused(tmp_path):
    EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer()).save_pretrained(tmp_path)
    _edit_json(tmp_path / "nosink.json", format=99)
    with pytest.raises(OSError, match="has format 99; this version of nosink reads formats 1 and 2"):
        EncoderFromDecoder.from_pretrained(tmp_path)


def test_spec_and_family_errors_come_before_any_weights_load(tmp_path, monkeypatch):
    import transformers

    from nosink import SpecError

    EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer()).save_pretrained(tmp_path)
    loads = []
    real = transformers.AutoModel.from_pretrained
    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", lambda *a, **k: loads.append(a) or real(*a, **k))
    for bad in ("F*3 | Q", "F*99"):
        with pytest.raises(SpecError):
            EncoderFromDecoder.from_pretrained(tmp_path, spec=bad)
    assert loads == []
    with pytest.raises(OSError, match="no model folder at"):
        EncoderFromDecoder.from_pretrained(tmp_path / "missing", spec="F*")
    with pytest.raises(ValueError, match="unknown dtype 'bfloat'"):
        EncoderFromDecoder.from_pretrained(tmp_path, dtype="bfloat")


def test_broken_metadata_is_a_clear_error(tmp_path):
    EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer()).save_pretrained(tmp_path)
    (tmp_path / "nosink.json").write_text("{not json")
    with pytest.raises(OSError, match=r"nosink\.json is not valid JSON"):
        EncoderFromDecoder.from_pretrained(tmp_path)
    (tmp_path / "nosink.json").write_text('{"format": 1}')
    with pytest.raises(OSError, match="has no 'spec' string"):
        EncoderFromDecoder.from_pretrained(tmp_path)


def test_dtype_and_device_at_load(tmp_path):
    EncoderFromDecoder(tiny_decoder("llama"), "F*", tiny_tokenizer()).save_pretrained(tmp_path)
    encoder = EncoderFromDecoder.from_pretrained(tmp_path, dtype=torch.bfloat16, device="cpu")
    assert encoder.parts.embed_tokens.weight.dtype == torch.bfloat16
    assert not np.isnan(encoder.encode(TEXTS)).any()
