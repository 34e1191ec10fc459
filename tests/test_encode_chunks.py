"""encode() on CUDA's path: tokenizing in chunks between batches, and a batch step that never reads the device.

The GPU path cannot run here; what it relies on is checked on the CPU: the batch step runs on the ``meta``
device, where any read of a device tensor on the host (``.tolist()``, ``int()``, ``bool()``, ``.cpu()``,
``nonzero``) raises, and encode() with chunked tokenization forced gives the vectors, warnings and errors of
the usual path.
"""

import warnings

import numpy as np
import pytest
from tiny import WORDS, tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder
from nosink.models import batching as _batching
from nosink.models import texts as _texts

# 23 texts from 1 to 23 words (one empty), in a shuffled order: encode() with batches of 2 makes chunks of 2, 4, 8
# and 9 texts.
TEXTS = [" ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range((i * 5) % 23)) for i in range(23)]


def make(family="llama", **kwargs):
    return EncoderFromDecoder(tiny_decoder(family), "F* | M0B*2", tiny_tokenizer(True), **kwargs)


@pytest.mark.parametrize("family", ["llama", "gpt2", "qwen2"])
@pytest.mark.parametrize(("fast", "pack"), [(True, True), (True, False), (False, None)])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize(("pooling", "token_embeddings"), [("mean", False), ("last", False), ("mean", True)])
def test_the_batch_step_reads_nothing_back_from_the_device(family, fast, pack, side, pooling, token_embeddings):
    encoder = make(family, fast_attention=fast, pack_padding=pack)
    tokens = _texts.tokenize(encoder.tokenizer, ["the cat sat on the mat", "a dog", ""], sink=encoder.sink_ids())
    encoder.to("meta")  # a host read of a meta tensor raises: none may happen between padding and pooling
    out, counts = encoder.encode_batch(tokens, [0, 1, 2], [encoder.plan], pooling, side, token_embeddings)
    assert out.device.type == "meta"
    assert out.shape == (1, sum(counts), 32) if token_embeddings else (1, 3, 32)
    assert counts == ([len(t) for t in tokens.text_ids] if token_embeddings else None)


def test_the_device_check_catches_a_host_read():
    # The check above means something: the public forward on a device batch reads the row lengths back.
    encoder = make(fast_attention=True, pack_padding=True)
    tokens = _texts.tokenize(encoder.tokenizer, ["the cat sat on the mat", "a dog"], sink=encoder.sink_ids())
    ids, attention, _ = _batching.pad(tokens, [0, 1], 0)
    encoder.to("meta")
    with pytest.raises((RuntimeError, NotImplementedError)):
        encoder.forward_specs(ids.to("meta"), attention.to("meta"), [encoder.plan])


def encode_both(monkeypatch, encoder, *args, **kwargs):
    """encode_specs' result and warnings with all texts tokenized first, then tokenized in chunks."""
    results = []
    for chunked in (False, True):
        monkeypatch.setattr(EncoderFromDecoder, "_tokenizes_in_chunks", lambda self, device, c=chunked: c)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = encoder.encode_specs(["F* | M0B*2", "F*"], *args, **kwargs)
        results.append((out, [str(w.message) for w in caught]))
    return results


@pytest.mark.parametrize(
    "kwargs",
    [
        {"normalize_embeddings": True, "max_length": 12},
        {"instruction": "Represent this: ", "pooling": "weighted_mean", "padding_side": "left", "max_length": 12},
        {"template": "MetaEOL", "normalize_embeddings": True, "max_length": 95},  # several prompts: their mean
        {"template": "Echo", "output_value": "token_embeddings", "max_length": 40},
        {"output_value": "token_embeddings", "convert_to_tensor": True, "max_length": 12},
    ],
)
def test_tokenizing_in_chunks_gives_the_same_results_and_warnings(monkeypatch, kwargs):
    encoder = make(fast_attention=True)
    (plain, plain_warnings), (chunked, chunked_warnings) = encode_both(
        monkeypatch, encoder, TEXTS, batch_size=2, **kwargs
    )
    assert chunked_warnings == plain_warnings  # one per kind for the whole call, with the call's indices
    assert any(f"cut to max_length={kwargs['max_length']}" in w for w in plain_warnings)
    assert any("1 of 23 texts has no tokens" in w for w in plain_warnings)
    assert chunked.keys() == plain.keys()
    for name in plain:
        a, b = plain[name], chunked[name]
        if kwargs.get("output_value") == "token_embeddings":
            assert len(a) == len(b) == len(TEXTS)
            for x, y in zip(a, b, strict=True):
                np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-5)
        else:
            assert a.shape == b.shape == (len(TEXTS), 32)
            np.testing.assert_allclose(a, b, atol=1e-5)
            assert np.abs(a).max() > 0.1  # not all zeros


def test_chunks_join_up_to_the_whole_tokenization():
    tokenizer = tiny_tokenizer(True)
    whole = _texts.tokenize(tokenizer, TEXTS, "Represent this: ", sink=[1], max_length=12)
    chunks = _batching.Chunks(tokenizer, TEXTS, "Represent this: ", sink=[1], max_length=12, first=2, size=8)
    assert chunks.sizes == [2, 4, 8, 8, 1]  # doubling from first up to size
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parts = list(chunks)
    assert len([w for w in caught if "cut to max_length" in str(w.message)]) == 1
    assert [c.start for c in parts] == [0, 2, 6, 14, 22]
    assert [ids for c in parts for ids in c.prompts[0].prefix_ids] == whole.prefix_ids
    assert [ids for c in parts for ids in c.prompts[0].text_ids] == whole.text_ids
    assert [span for c in parts for span in c.prompts[0].offsets] == whole.offsets
    assert sorted(c.start + i for c in parts for i in c.prompts[0].truncated) == whole.truncated


def test_an_error_in_a_later_chunk_is_the_whole_calls_error():
    tokenizer = tiny_tokenizer(True)
    texts = ["", "", "a dog", "the cat", "we love very good food"]  # the empty texts need no room
    instruction = "the cat sat on the mat "
    full = len(_texts.tokenize(tokenizer, ["a"], instruction, sink=[1]).prefix_ids[0])  # leaves texts no room
    with pytest.raises(ValueError, match=r"text 2 .* \(3 of 5 texts affected\)") as whole:
        _texts.tokenize(tokenizer, texts, instruction, sink=[1], max_length=full)
    with pytest.raises(ValueError) as chunked:
        list(_batching.Chunks(tokenizer, texts, instruction, sink=[1], max_length=full, first=1, size=1))
    assert str(chunked.value) == str(whole.value)
