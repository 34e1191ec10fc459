"""The text pipeline reads a fast tokenizer's Rust backend directly, and tokenizes the next chunk in a thread.

``tokenizer_backend.encode_fast`` must give exactly what ``tokenizer(strings, add_special_tokens=False,
return_offsets_mapping=True)`` gives (ids and character offsets), and fall back to that call wherever the
backend is not set as that call would set it; ``Chunks(prefetch=True)`` must give the chunks, warnings and
errors of ``Chunks(prefetch=False)``.
"""

import threading
import warnings

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tiny import WORDS, tiny_tokenizer

from nosink.models import batching as _batching
from nosink.models import texts as _texts
from nosink.models import tokenizer_backend as _backend
from nosink.models.loading import load_tokenizer

TEXTS = [" ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range((i * 5) % 23)) for i in range(23)]


def called(tokenizer, strings):
    enc = tokenizer(strings, add_special_tokens=False, return_offsets_mapping=True)
    return [list(ids) for ids in enc["input_ids"]], [[tuple(s) for s in spans] for spans in enc["offset_mapping"]]


def read(tokenizer, strings):
    ids, spans = _backend.encode_fast(tokenizer, strings)
    return [list(i) for i in ids], [[tuple(s) for s in row] for row in spans]


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_path):
    return load_tokenizer(smollm2_path)


# Text with what tokenizers treat specially: the special tokens' own strings, spaces and newlines, accents, emoji.
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<s>", "</s>", "<pad>", " ", "  ", "\n", "\t", "é", "🙂", "the"]
text = st.lists(st.one_of(st.sampled_from(SPECIAL + WORDS), st.text(max_size=6)), max_size=12).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(strings=st.lists(text, min_size=1, max_size=6))
@example(strings=["", " ", "<|endoftext|>hello<|im_start|>", "\n\n  spaced  ", "e\u0301 🙂"])
def test_the_backend_gives_what_the_tokenizer_call_gives(smollm2_tokenizer, strings):
    assert _backend.rust_backend(smollm2_tokenizer) is not None  # the direct route is the one tested
    assert read(smollm2_tokenizer, strings) == called(smollm2_tokenizer, strings)


@given(strings=st.lists(text, min_size=1, max_size=6))
def test_the_backend_gives_what_the_call_gives_for_a_word_level_tokenizer(strings):
    tokenizer = tiny_tokenizer(True)
    assert _backend.rust_backend(tokenizer) is not None
    assert read(tokenizer, strings) == called(tokenizer, strings)


def test_a_backend_set_to_truncate_is_not_read_directly():
    tokenizer = tiny_tokenizer(True)
    tokenizer.backend_tokenizer.enable_truncation(2)  # as a tokenizer.json with "truncation" set would load
    assert _backend.rust_backend(tokenizer) is None
    strings = ["the cat sat on the mat", "a dog"]
    ids, _ = read(tokenizer, strings)
    assert [len(i) for i in ids] == [6, 2]  # not cut: the tokenizer's own call turned truncation off
    assert _backend.rust_backend(tokenizer) is not None  # and from then on the backend is read directly
    assert read(tokenizer, strings) == called(tokenizer, strings)


def test_split_special_tokens_is_honoured():
    tokenizer = tiny_tokenizer(True)
    tokenizer.split_special_tokens = True  # "<s>" in a text is then two or more tokens, not the BOS token
    assert _backend.rust_backend(tokenizer) is None  # the backend still reads special tokens whole
    ids, _ = read(tokenizer, ["<s> the cat"])
    assert ids[0][0] != tokenizer.convert_tokens_to_ids("<s>")
    assert read(tokenizer, ["<s> the cat"]) == called(tokenizer, ["<s> the cat"])


def test_a_tokenizer_class_with_its_own_call_is_called():
    tokenizer = tiny_tokenizer(True)

    class Own(type(tokenizer)):
        def __call__(self, *args, **kwargs):
            out = super().__call__(*args, **kwargs)
            out["input_ids"] = [[9, *ids] for ids in out["input_ids"]]
            out["offset_mapping"] = [[(0, 0), *spans] for spans in out["offset_mapping"]]
            return out

    tokenizer.__class__ = Own
    assert _backend.rust_backend(tokenizer) is None
    ids, spans = read(tokenizer, ["the cat"])
    assert ids[0][0] == 9 and spans[0][0] == (0, 0)


def chunk_fields(chunks):
    return [
        (c.start, [(p.prefix_ids, p.text_ids, p.suffix_ids, p.offsets, p.truncated) for p in c.prompts]) for c in chunks
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_length": 12},
        {"instruction": "Represent this: ", "max_length": 12},
        {"template": "MetaEOL", "max_length": 95},  # several prompts, each tokenized ahead
        {"template": "Echo", "max_length": 40},
        {"template": "PromptEOL", "instruction": "Query: "},
    ],
)
def test_prefetched_chunks_equal_the_plain_ones(monkeypatch, kwargs):
    from nosink.models.templates import by_name as preset

    tokenizer = tiny_tokenizer(True)
    if "template" in kwargs:
        kwargs = kwargs | {"template": preset(kwargs["template"])}
    backend = _backend.rust_backend(tokenizer)
    assert backend is not None
    encoded, read = [], []  # the threads that ran the Rust tokenizer, and those that turned its output into lists

    class Recording:  # the backend, recording where encode_batch runs
        def __getattr__(self, name):
            return getattr(backend, name)

        def encode_batch(self, *args, **kw):
            encoded.append(threading.current_thread().name)
            return backend.encode_batch(*args, **kw)

    reader = _backend.read_encodings

    def reading(*args):
        read.append(threading.current_thread().name)
        return reader(*args)

    for module in (_backend, _batching):  # the plain route (encode_fast) and the prefetching one (Chunks)
        monkeypatch.setattr(module, "rust_backend", lambda tok: Recording())
        monkeypatch.setattr(module, "read_encodings", reading)
    results = []
    for prefetch in (False, True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            chunks = list(_batching.Chunks(tokenizer, TEXTS, sink=[1], first=2, size=8, prefetch=prefetch, **kwargs))
        results.append((chunk_fields(chunks), [str(w.message) for w in caught]))
    assert results[1] == results[0]
    assert [len(c.prompts[0]) for c in chunks] == [2, 4, 8, 8, 1]
    prompts = len(chunks[0].prompts)
    here = threading.current_thread().name
    # without prefetch every chunk is tokenized here; with it the four after the first in the thread (texts cut to
    # fit max_length under a template are tokenized again here, in both runs)
    thread = "nosink-tokenize_0"
    assert thread not in encoded[: len(encoded) // 2]
    assert encoded.count(thread) == 4 * prompts
    assert set(read) == {here}  # lists are always made on the caller's thread


def test_a_prefetched_error_is_the_whole_calls_error():
    tokenizer = tiny_tokenizer(True)
    texts = ["", "", "a dog", "the cat", "we love very good food"]
    instruction = "the cat sat on the mat "
    full = len(_texts.tokenize(tokenizer, ["a"], instruction, sink=[1]).prefix_ids[0])
    with pytest.raises(ValueError) as whole:
        _texts.tokenize(tokenizer, texts, instruction, sink=[1], max_length=full)
    with pytest.raises(ValueError) as chunked:
        list(_batching.Chunks(tokenizer, texts, instruction, sink=[1], max_length=full, first=1, size=1, prefetch=True))
    assert str(chunked.value) == str(whole.value)


def test_leaving_a_prefetching_iteration_early_stops_its_thread():
    tokenizer = tiny_tokenizer(True)
    chunks = iter(_batching.Chunks(tokenizer, TEXTS * 20, sink=[1], first=2, size=8, prefetch=True))
    next(chunks)
    chunks.close()  # what a loop that breaks or raises leaves to the garbage collector
    assert not any(t.name.startswith("nosink-tokenize") for t in threading.enumerate())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(strings=st.lists(text, min_size=1, max_size=6))
def test_reading_only_the_leading_empty_spans_splits_rows_as_all_offsets_do(smollm2_tokenizer, strings):
    encodings = _backend.rust_backend(smollm2_tokenizer).encode_batch(strings, add_special_tokens=False)
    ids, lead = _backend.read_encodings(encodings, lead=True)
    full_ids, full = _backend.read_encodings(encodings)
    assert ids == full_ids
    assert lead == [[(0, 0)] * spans.count((0, 0)) for spans in full]
    whole = _texts.tokenize(smollm2_tokenizer, strings, sink=[7], max_length=9)
    light = _texts.tokenize_framed(smollm2_tokenizer, strings, _texts.Framing(None, [7], 9), keep_offsets=False)
    assert (light.prefix_ids, light.text_ids, light.truncated) == (whole.prefix_ids, whole.text_ids, whole.truncated)
    assert light.offsets is None


class Encoding:
    """What the backend returns, for rows the real tokenizers here never produce: leading (0, 0) spans."""

    def __init__(self, ids, offsets):
        self.ids, self.offsets = ids, offsets

    def __len__(self):
        return len(self.ids)

    def token_to_chars(self, i):
        return self.offsets[i]


def test_leading_empty_spans_are_read_and_split_off_as_prefix():
    rows = [Encoding([5, 6, 7], [(0, 0), (0, 0), (0, 3)]), Encoding([8], [(0, 2)]), Encoding([], [])]
    assert _backend.read_encodings(rows, lead=True) == ([[5, 6, 7], [8], []], [[(0, 0), (0, 0)], [], []])
    fast = type("Fast", (), {"is_fast": True})()  # never called: the rows are given
    encoded = _backend.read_encodings(rows, lead=True)
    framing = _texts.Framing(None, [1], None)
    tokens = _texts.tokenize_framed(fast, ["abc", "de", ""], framing, encoded, keep_offsets=False)
    assert tokens.prefix_ids == [[1, 5, 6], [1], [1]]
    assert tokens.text_ids == [[7], [8], []]


@pytest.mark.parametrize(
    ("kwargs", "kept"),
    [({}, False), ({"instruction": "Represent this: "}, True), ({"template": "Echo"}, True)],
)
def test_chunks_without_offsets_equal_those_with(kwargs, kept):
    from nosink.models.templates import by_name

    tokenizer = tiny_tokenizer(True)
    kwargs = kwargs | ({"template": by_name(kwargs["template"])} if "template" in kwargs else {})
    runs = [
        list(
            _batching.Chunks(
                tokenizer, TEXTS, sink=[1], max_length=12, first=2, size=8, prefetch=True, offsets=o, **kwargs
            )
        )
        for o in (True, False)
    ]
    with_offsets, without = ([f[:3] + f[4:] for c in run for f in chunk_fields([c])[0][1]] for run in runs)
    assert without == with_offsets
    assert all((p.offsets is not None) == kept for c in runs[1] for p in c.prompts)
