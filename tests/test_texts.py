"""The text pipeline (nosink.models.texts and batching) and what encode() does with awkward texts."""

import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny import tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder, parse_spec
from nosink.models.batching import batches, pad, pad_id
from nosink.models.texts import Template, Tokenized, check_texts, sink_ids, tokenize
from nosink.models.words import first_tokens, join_words


def make(spec="F* | M0B*2", **kwargs):
    return EncoderFromDecoder(tiny_decoder("llama"), spec, tiny_tokenizer(), **kwargs)


def encode_quietly(encoder, texts, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return encoder.encode(texts, **kwargs)


# ---------------------------------------------------------------- padding and batching

TOKENS = Tokenized(prefix_ids=[[1, 9], [1], [1, 9]], text_ids=[[5, 6], [7, 8, 4], []])


# fmt: off
def test_right_padding_literal():
    ids, attention, text = pad(TOKENS, [0, 1, 2], pad_id=0, side="right")
    assert ids.tolist() == [
        [1, 9, 5, 6],
        [1, 7, 8, 4],
        [1, 9, 0, 0],  # no text tokens: only the prefix, then padding
    ]
    assert attention.tolist() == [
        [1, 1, 1, 1],
        [1, 1, 1, 1],
        [1, 1, 0, 0],
    ]
    assert text.int().tolist() == [
        [0, 0, 1, 1],
        [0, 1, 1, 1],
        [0, 0, 0, 0],
    ]
    assert ids.dtype == attention.dtype == torch.long and text.dtype == torch.bool


def test_left_padding_literal_and_row_selection():
    ids, attention, text = pad(TOKENS, [2, 0], pad_id=3, side="left")
    assert ids.tolist() == [
        [3, 3, 1, 9],
        [1, 9, 5, 6],
    ]
    assert attention.tolist() == [
        [0, 0, 1, 1],
        [1, 1, 1, 1],
    ]
    assert text.int().tolist() == [
        [0, 0, 0, 0],
        [0, 0, 1, 1],
    ]
# fmt: on


def test_an_all_empty_batch_has_one_padding_column():
    ids, attention, text = pad(Tokenized([[]], [[]]), [0], pad_id=0)
    assert ids.tolist() == [[0]] and attention.tolist() == [[0]] and text.tolist() == [[False]]
    with pytest.raises(ValueError, match="padding side must be 'right' or 'left', got 'middle'"):
        pad(TOKENS, [0], pad_id=0, side="middle")


def test_batches_are_longest_first_and_keep_input_order_on_ties():
    assert batches([2, 5, 3, 5, 1], batch_size=2) == [[1, 3], [2, 0], [4]]
    assert batches([], batch_size=4) == []
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        batches([1], 0)


def test_pad_id_falls_back_to_eos_then_zero():
    class Tok:
        pad_token_id, eos_token_id = None, 7

    assert pad_id(tiny_tokenizer()) == 0
    assert pad_id(Tok()) == 7
    Tok.eos_token_id = None
    assert pad_id(Tok()) == 0


# ---------------------------------------------------------------- tokenizing


def test_tokenize_splits_prefix_and_text_and_truncates():
    tok = tiny_tokenizer()
    ids = dict(
        zip(
            ["what", "is", "the", "cat", "sat"],
            tok.convert_tokens_to_ids(["what", "is", "the", "cat", "sat"]),
            strict=True,
        )
    )
    got = tokenize(tok, ["the cat sat", "", "cat"], "what is ", sink=[1], max_length=5)
    assert got.prefix_ids == [[1, ids["what"], ids["is"]]] * 3
    assert got.text_ids == [[ids["the"], ids["cat"]], [], [ids["cat"]]]
    assert got.truncated == [0] and got.empty == [1] and got.lengths == [5, 3, 4]
    assert got.offsets == [[(0, 3), (4, 7)], [], [(0, 3)]]  # characters of the text, not of instruction + text
    none = tokenize(tok, ["the cat sat"])
    assert none.prefix_ids == [[]] and none.text_ids == [[ids["the"], ids["cat"], ids["sat"]]] and not none.truncated


def test_tokenize_makes_one_batch_call():
    tok = tiny_tokenizer()
    calls = []

    class Counting:
        is_fast = True

        def __call__(self, texts, **kwargs):
            calls.append(texts)
            return tok(texts, **kwargs)

    got = tokenize(Counting(), ["the cat", "a dog ran", "i"], "what is ")
    assert calls == [["what is the cat", "what is a dog ran", "what is i"]]
    assert got.text_ids == [tok(t, add_special_tokens=False)["input_ids"] for t in ["the cat", "a dog ran", "i"]]


def test_no_room_for_text_is_an_error_naming_the_fix():
    with pytest.raises(ValueError, match=r"text 0 needs at least 5 tokens, one of its own after the 4 .* "
                                         r"max_length=4 \(1 of 2 texts affected\): raise max_length or shorten the "
                                         r"instruction"):  # fmt: skip
        tokenize(tiny_tokenizer(), ["the cat", ""], "what is the ", sink=[1], max_length=4)
    # An empty text has nothing to pool, whatever the room: no error, and its input stays within max_length.
    got = tokenize(tiny_tokenizer(), [""], "what is the", sink=[1], max_length=2)
    assert got.lengths == [2] and got.empty == [0]
    with pytest.raises(ValueError, match="max_length must be a positive integer, got 0"):
        tokenize(tiny_tokenizer(), ["the"], max_length=0)
    with pytest.raises(TypeError, match="instruction must be a string or None, got int"):
        tokenize(tiny_tokenizer(), ["the"], 3)


def test_sink_ids_of_a_tokenizer():
    tok = tiny_tokenizer()
    assert sink_ids(tok) == [1] and sink_ids(tok, "none") == [] and sink_ids(tok, "</s>") == [2]
    assert sink_ids(tiny_tokenizer(bos=False)) == []
    with pytest.raises(ValueError, match=r"sink_token '<nope\\x1b>' is not a token"):
        sink_ids(tok, "<nope\x1b>")
    with pytest.raises(TypeError, match="sink_token must be 'auto', 'none' or a token of the tokenizer, got NoneType"):
        sink_ids(tok, None)


def test_first_subtoken_of_each_word():
    # "EU rejects" tokenized as [EU][ rej][ects]: words start at tokens 0 and 1
    assert first_tokens([(0, 2), (2, 6), (6, 10)], [(0, 2), (3, 10)]) == [0, 1]
    assert first_tokens([(0, 2)], [(0, 2), (3, 10)]) == [0, None]  # the second word was cut off


def test_words_are_joined_with_their_spans():
    text, spans = join_words(["paris", "is", "big"])
    assert text == "paris is big" and spans == [(0, 5), (6, 8), (9, 12)]
    assert [text[a:b] for a, b in spans] == ["paris", "is", "big"]
    assert join_words([]) == ("", [])


def test_check_texts():
    assert check_texts("a b") == (["a b"], True)
    assert check_texts(("a", "b")) == (["a", "b"], False)
    texts, single = check_texts(np.array(["a", "bb"]))
    assert texts == ["a", "bb"] and not single and all(type(t) is str for t in texts)
    with pytest.raises(TypeError, match="got NoneType"):
        check_texts(None)
    with pytest.raises(TypeError, match=r"got bytes: decode it first"):
        check_texts(b"abc")
    with pytest.raises(TypeError, match="got int"):
        check_texts(3)
    with pytest.raises(ValueError, match=r"sentences\[1\] is a bytes, not a string: decode it first"):
        check_texts(["a", b"b"])
    with pytest.raises(ValueError, match=r"sentences\[2\] holds a lone surrogate \(U\+DC80\) at character 3"):
        check_texts(["a", "b", "abc\udc80"])
    with pytest.raises(ValueError, match=r"^texts holds a lone surrogate \(U\+D800\) at character 0"):
        check_texts("\ud800", "texts")
    assert check_texts(["\U0001f600 ok"]) == (["\U0001f600 ok"], False)  # a real astral character is fine


def test_lone_surrogates_are_named_wherever_encode_takes_text():
    # The tokenizer's own error (TypeError: TextEncodeInput must be ...) names neither the input nor the problem.
    encoder = make()
    with pytest.raises(ValueError, match=r"sentences\[1\] holds a lone surrogate \(U\+D800\) at character 1"):
        encoder.encode(["fine", "a\ud800b"])
    with pytest.raises(ValueError, match=r"^instruction holds a lone surrogate \(U\+DFFF\)"):
        encoder.encode(["fine"], instruction="Query:\udfff ")
    with pytest.raises(ValueError, match=r"template prompt .* holds a lone surrogate"):
        encoder.encode(["fine"], template=Template("\ud800 {text}", target="last"))


# ---------------------------------------------------------------- encode() on awkward input


def test_empty_texts_give_zero_vectors_and_one_warning():
    encoder = make()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = encoder.encode(["", "the cat", "", "a dog"], normalize_embeddings=True)
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert messages == [
        "encode(): 2 of 4 texts have no tokens (indices 0, 2); a text without tokens gets a zero vector, "
        "also with normalize_embeddings=True"
    ]
    assert caught[0].filename == __file__  # the warning points at the caller's line, not at nosink
    np.testing.assert_array_equal(out[[0, 2]], 0.0)
    np.testing.assert_allclose(np.linalg.norm(out[[1, 3]], axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(out[1], encoder.encode("the cat", normalize_embeddings=True), atol=1e-6)


def test_truncation_is_reported_once_per_call_with_a_count():
    encoder = make()
    texts = ["the cat sat on the mat", "a dog", "we love very good food"]
    with pytest.warns(UserWarning) as caught:
        cut = encoder.encode(texts, max_length=3)
    assert [str(w.message) for w in caught] == [
        "encode(): 2 of 3 texts were cut to max_length=3 tokens, sink token and instruction included "
        "(indices 0, 2); raise max_length to keep more of them"
    ]
    # The cut texts are encoded as their first two words (the sink token takes the third place).
    whole = encode_quietly(encoder, ["the cat", "a dog", "we love"])
    np.testing.assert_allclose(cut, whole, atol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        encoder.encode(texts, max_length=7)  # nothing cut, nothing empty: no warning


def test_the_instruction_is_counted_with_each_text():
    encoder = make()
    with pytest.raises(ValueError, match="leaving no room for text within max_length=4"):
        encoder.encode(["a dog", "the cat"], instruction="what is the ", max_length=4)
    # One token of room: the first text token only, pooled alone.
    got = encode_quietly(encoder, ["the cat sat"], instruction="what is ", max_length=4, pooling="mean")
    np.testing.assert_allclose(got, encode_quietly(encoder, ["the"], instruction="what is "), atol=1e-6)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda e: e.encode(None), "sentences must be a string or a list of strings, got NoneType"),
        (lambda e: e.encode(b"the cat"), r"got bytes: decode it first, e\.g\. data\.decode\('utf-8'\)"),
        (lambda e: e.encode_specs("F*", ["the cat"]), r"specs must be a list of specs, got one str \('F\*'\): write"),
        (lambda e: e.encode_specs(parse_spec("F*"), ["the cat"]), "specs must be a list of specs, got one Spec"),
        (lambda e: e.encode(["the cat"], instruction=["what"]), "instruction must be a string or None, got list"),
    ],
    ids=["None", "bytes", "spec string", "Spec", "instruction list"],
)
def test_bad_sentences_and_specs_are_refused_with_the_fix(call, message):
    with pytest.raises(TypeError, match=message):
        call(make())


def test_numpy_arrays_and_tuples_of_strings_still_work():
    encoder = make()
    texts = ["the cat sat", "a dog ran"]
    expected = encoder.encode(texts)
    np.testing.assert_array_equal(encoder.encode(tuple(texts)), expected)
    np.testing.assert_array_equal(encoder.encode(np.array(texts)), expected)
    np.testing.assert_array_equal(encoder.encode(np.str_("the cat sat")), expected[0])
    together = encoder.encode_specs(("F* | M0B*2", "F*"), np.array(texts))
    np.testing.assert_array_equal(together["F* | M0B*2"], expected)


# ---------------------------------------------------------------- a real tokenizer


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_path)


def test_instruction_and_text_are_tokenized_together(smollm2_tokenizer):
    # Apart, "Query: " would end in a lone space token and the text would start with "A" rather than " A".
    got = tokenize(smollm2_tokenizer, ["A man is playing"], "Instruct: Retrieve semantically similar text.\nQuery: ")
    head, body = got.prefix_ids[0], got.text_ids[0]
    tok = smollm2_tokenizer
    assert tok.convert_ids_to_tokens(body)[:2] == ["ĠA", "Ġman"]
    assert tok.decode(head).endswith("Query:")


@pytest.mark.parametrize("instruction", ["Query: \n", "Instruct: Retrieve semantically similar text.\nQuery: ", "Q:  "])
@pytest.mark.parametrize("max_length", [4, 6, 9, 12, 20])
def test_every_input_fits_max_length_or_is_refused(smollm2_tokenizer, instruction, max_length):
    texts = ["hello world again", "A man is playing a guitar.", "x", "\n\n spaced   out "]
    try:
        got = tokenize(smollm2_tokenizer, texts, instruction, sink=[1], max_length=max_length)
    except ValueError as err:
        assert "leaving no room for text" in str(err)
        return
    assert all(n <= max_length for n in got.lengths)
    assert not got.empty  # every text keeps at least one token
    whole = tokenize(smollm2_tokenizer, texts, instruction, sink=[1])
    for i in range(len(texts)):
        assert got.prefix_ids[i] == whole.prefix_ids[i]  # the prefix is never cut into
        assert whole.text_ids[i][: len(got.text_ids[i])] == got.text_ids[i]  # the text keeps its first tokens
        assert (len(got.text_ids[i]) < len(whole.text_ids[i])) == (i in got.truncated)


# ---------------------------------------------------------------- fuzzed texts

any_text = st.text(st.characters(codec="utf-8"), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(any_text, max_size=4), st.one_of(st.none(), any_text), st.integers(1, 24))
def test_fuzzed_texts_split_without_losing_a_token(smollm2_tokenizer, texts, instruction, max_length):
    tok = smollm2_tokenizer
    try:
        got = tokenize(tok, texts, instruction, sink=[1], max_length=max_length)
    except ValueError as err:
        assert "leaving no room for text" in str(err)
        i, needs = map(int, re.search(r"text (\d+) needs at least (\d+) tokens", str(err)).groups())
        assert tokenize(tok, [texts[i]], instruction, sink=[1], max_length=needs).lengths == [needs]  # and fits
        return
    whole = tokenize(tok, texts, instruction, sink=[1])
    for i, text in enumerate(texts):
        joint = tok((instruction or "") + text, add_special_tokens=False)["input_ids"]
        assert whole.prefix_ids[i] + whole.text_ids[i] == [1, *joint]  # the split loses and adds nothing
        assert got.lengths[i] <= max_length
        assert got.text_ids[i] == whole.text_ids[i][: len(got.text_ids[i])]
        assert (i in got.truncated) == (len(got.text_ids[i]) < len(whole.text_ids[i]))
        assert all(0 <= a <= b <= len(text) for a, b in got.offsets[i])


@pytest.mark.filterwarnings(r"ignore:encode\(\). .*:UserWarning")
@settings(max_examples=20, deadline=None)
@given(st.lists(any_text, min_size=1, max_size=4), st.integers(2, 8), st.booleans())
def test_fuzzed_texts_encode_to_finite_vectors_zero_exactly_when_empty(texts, max_length, normalize):
    encoder = make()
    out = encoder.encode(texts, max_length=max_length, normalize_embeddings=normalize)
    empty = set(tokenize(encoder.tokenizer, texts).empty)
    assert out.shape == (len(texts), 32) and np.isfinite(out).all()
    for i in range(len(texts)):
        assert (np.abs(out[i]).max() == 0) == (i in empty)
