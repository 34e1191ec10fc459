"""Prompt templates: each vector against one computed by hand from the tokenizer and forward()."""

import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tiny import tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder, parse_spec
from nosink.models import templates
from nosink.models.templates import ECHO, METAEOL, PROMPT_EOL, as_template, by_name
from nosink.models.texts import Template, tokenize

SPEC = "F* | M0B*2"
TEXTS = ["the cat sat on the mat", "dog", "i like food and the city of paris"]
# A prompt in the tiny tokenizer's words, so that every token is a real one.
TINY = Template("what is {text} and what is {text} of", copy=2)


def tiny_encoder(spec=SPEC):
    return EncoderFromDecoder(tiny_decoder("llama"), spec, tiny_tokenizer())


def forward_states(encoder, ids):
    """Final hidden states of one unpadded row, by hand."""
    with torch.inference_mode():
        return encoder(torch.tensor([ids])).last_hidden_state[0]


def sublist_starts(row, part):
    return [i for i in range(len(row) - len(part) + 1) if row[i : i + len(part)] == part]


# ---------------------------------------------------------------- exactness on the tiny model


def test_last_token_pooling_is_the_prompts_last_state():
    encoder = tiny_encoder()
    template = Template("i like {text} what", target="last")
    got = encoder.encode(TEXTS, template=template)
    for text, vector in zip(TEXTS, got, strict=True):
        ids = [1, *encoder.tokenizer(f"i like {text} what", add_special_tokens=False)["input_ids"]]
        np.testing.assert_allclose(vector, forward_states(encoder, ids)[-1].numpy(), atol=1e-5)


def test_second_copy_pooling_is_the_mean_over_its_positions():
    encoder = tiny_encoder()
    tok = encoder.tokenizer
    got = encoder.encode(TEXTS, template=TINY)
    tokens = encoder.encode(TEXTS, template=TINY, output_value="token_embeddings")
    for text, vector, states in zip(TEXTS, got, tokens, strict=True):
        row = [1, *tok(f"what is {text} and what is {text} of", add_special_tokens=False)["input_ids"]]
        body = tok(text, add_special_tokens=False)["input_ids"]
        second = sublist_starts(row, body)[-1]  # the text's last occurrence: the second copy
        hidden = forward_states(encoder, row)[second : second + len(body)]
        np.testing.assert_allclose(vector, hidden.mean(0).numpy(), atol=1e-5)
        np.testing.assert_allclose(states, hidden.numpy(), atol=1e-5)  # token embeddings: the second copy's


def test_several_prompts_give_the_mean_of_their_vectors_normalised_after():
    encoder = tiny_encoder()
    formats = ("i like {text} what", "{text} is good", "how is {text}")
    both = Template(formats, target="last")
    apart = [encoder.encode(TEXTS, template=Template(f, target="last")) for f in formats]
    np.testing.assert_allclose(encoder.encode(TEXTS, template=both), np.mean(apart, axis=0), atol=1e-5)
    mean = np.mean(apart, axis=0)
    unit = mean / np.linalg.norm(mean, axis=1, keepdims=True)
    np.testing.assert_allclose(encoder.encode(TEXTS, template=both, normalize_embeddings=True), unit, atol=1e-5)


@pytest.mark.parametrize("template", [TINY, Template("i like {text} what", target="last")], ids=["text", "last"])
def test_padding_side_and_batching_do_not_change_the_vectors(template):
    encoder = tiny_encoder()
    right = encoder.encode(TEXTS, template=template, batch_size=3)
    left = encoder.encode(TEXTS, template=template, batch_size=3, padding_side="left")
    alone = np.stack([encoder.encode(t, template=template) for t in TEXTS])
    np.testing.assert_allclose(left, right, atol=1e-5)
    np.testing.assert_allclose(alone, right, atol=1e-5)


def test_instruction_goes_before_the_prompt():
    encoder = tiny_encoder()
    template = Template("i like {text} what", target="last")
    got = encoder.encode("the dog ran", "we love ", template=template)
    ids = [1, *encoder.tokenizer("we love i like the dog ran what", add_special_tokens=False)["input_ids"]]
    np.testing.assert_allclose(got, forward_states(encoder, ids)[-1].numpy(), atol=1e-5)


def test_templates_go_through_encode_specs_like_separate_encoders():
    specs = ["F*", "F* | B*2", "F* | M0B*1"]
    together = tiny_encoder().encode_specs(specs, TEXTS, template=TINY)
    for spec in specs:
        alone = tiny_encoder(spec).encode(TEXTS, template=TINY)
        np.testing.assert_allclose(together[str(parse_spec(spec))], alone, atol=1e-5)


def test_no_template_is_the_plain_pipeline_and_a_bare_text_template_equals_it():
    encoder = tiny_encoder()
    plain = encoder.encode(TEXTS)
    np.testing.assert_array_equal(encoder.encode(TEXTS, template=None), plain)
    np.testing.assert_allclose(encoder.encode(TEXTS, template=Template("{text}")), plain, atol=1e-6)


def test_a_text_without_tokens_gets_a_zero_vector_with_any_template():
    encoder = tiny_encoder()
    with pytest.warns(UserWarning, match="1 of 2 texts has no tokens"):
        out = encoder.encode(["", "dog"], template=Template("i like {text} what", target="last"))
    assert np.abs(out[0]).max() == 0 and np.abs(out[1]).max() > 0


# ---------------------------------------------------------------- tokenization and truncation


def test_tokenize_cuts_rows_into_prefix_pooled_tokens_and_suffix():
    tok = tiny_tokenizer()
    got = tokenize(tok, ["the cat", ""], "we ", sink=[1], template="what is {text} and {text} of", copy=2)
    ids = tok.convert_tokens_to_ids
    assert got.prefix_ids[0] == [1, *ids(["we", "what", "is", "the", "cat", "and"])]
    assert got.text_ids[0] == ids(["the", "cat"]) and got.suffix_ids[0] == ids(["of"])
    assert got.offsets[0] == [(0, 3), (4, 7)]  # characters in the text, not in the prompt
    assert got.text_ids[1] == [] and got.empty == [1]
    last = tokenize(tok, ["the cat"], sink=[1], template="what is {text} of", target="last")
    assert last.text_ids == [ids(["of"])] and last.suffix_ids == [[]] and last.offsets is None


@pytest.mark.parametrize("target", ["text", "last"])
def test_truncation_cuts_every_copy_of_the_text_and_keeps_the_prompts_end(target):
    tok = tiny_tokenizer()
    text = "the cat sat on the mat and the dog ran in the park"  # 13 tokens
    template = "what is {text} and {text} of"
    for max_length in (8, 11, 20):
        got = tokenize(tok, [text], sink=[1], max_length=max_length, template=template, target=target, copy=2)
        row = got.prefix_ids[0] + got.text_ids[0] + got.suffix_ids[0]
        assert len(row) <= max_length and got.truncated == [0]
        kept = len(row) - 1 - 4  # the sink and the prompt's four words
        assert kept % 2 == 0  # both copies keep the same number of tokens
        words = text.split()[: kept // 2]
        expected = ["what", "is", *words, "and", *words, "of"]
        assert row == [1, *tok.convert_tokens_to_ids(expected)]


def test_a_prompt_that_leaves_no_room_is_refused_naming_the_fix():
    # The sink token and "what is ... of" take 4 tokens: max_length=5 leaves one for the text, 4 none.
    args = dict(sink=[1], template="what is {text} of", target="last")
    assert tokenize(tiny_tokenizer(), ["the cat"], max_length=5, **args).truncated == [0]
    needs = r"text 0 needs at least 5 tokens with the sink token, instruction and template around one token of it"
    with pytest.raises(ValueError, match=needs + r", leaving no room for text within max_length=4"):
        tokenize(tiny_tokenizer(), ["the cat"], max_length=4, **args)


def test_encode_warns_once_for_texts_cut_by_any_prompt():
    encoder = tiny_encoder()
    long = " ".join(["the cat sat"] * 10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = encoder.encode([long, "dog"], template=Template(("{text} is good", "how is {text}"), target="last"),
                             max_length=12)  # fmt: skip
    cut = [w for w in caught if "cut to max_length" in str(w.message)]
    assert len(cut) == 1 and "1 of 2 texts was cut" in str(cut[0].message)
    assert np.isfinite(out).all()


def test_slow_tokenizers_tokenize_the_pieces_apart():
    class Slow:
        is_fast = False
        bos_token_id = 1

        def __init__(self):
            self.fast = tiny_tokenizer()

        def __call__(self, text, add_special_tokens=False):
            return self.fast(text, add_special_tokens=add_special_tokens)

    got = tokenize(Slow(), ["the cat sat"], sink=[1], max_length=8, template="what is {text} and {text} of", copy=2)
    ids = tiny_tokenizer().convert_tokens_to_ids
    assert got.prefix_ids[0] == [1, *ids(["what", "is", "the", "and"])]
    assert got.text_ids[0] == ids(["the"]) and got.suffix_ids[0] == ids(["of"]) and got.truncated == [0]


# ---------------------------------------------------------------- the Template value and its refusals


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"formats": "no placeholder"}, ValueError, r"has no \{text\}: write where the text goes"),
        ({"formats": ("{text} ok", "missing")}, ValueError, r"'missing' has no \{text\}"),
        ({"formats": "{text} and {text}"}, ValueError, r"holds \{text\} 2 times: say which copy is pooled"),
        ({"formats": "{text} and {text}", "copy": 3}, ValueError, r"copy=3 but the template prompt"),
        ({"formats": "{text}", "copy": 0}, ValueError, r"copy must be a positive integer, got 0"),
        ({"formats": "{text}", "target": "last", "copy": 1}, ValueError, r"target='last' pools the prompt's last"),
        ({"formats": "{text}", "target": "first"}, ValueError, r"target must be 'text' or 'last', got 'first'"),
        ({"formats": ()}, ValueError, r"needs at least one prompt"),
        ({"formats": (b"{text}",)}, TypeError, r"must be strings, got bytes"),
    ],
)
def test_malformed_templates_are_refused_with_a_clear_error(kwargs, error, message):
    with pytest.raises(error, match=message):
        Template(**kwargs)


def test_two_copies_are_allowed_with_a_copy_or_last_token_pooling():
    assert Template("{text} and {text}", copy=1).copy == 1
    assert Template("{text} and {text}", target="last").formats == ("{text} and {text}",)


def test_names_resolve_to_presets_and_prompts_are_told_to_become_templates():
    assert by_name("prompt-eol") is PROMPT_EOL and as_template("echo") is ECHO and as_template(None) is None
    with pytest.raises(ValueError, match=r"unknown template 'EOL'; the presets are PromptEOL, PretendedCoT"):
        as_template("EOL")
    with pytest.raises(ValueError, match=r"is a prompt, not a preset name: pass Template\(prompt"):
        tiny_encoder().encode("dog", template='This "{text}" means')
    with pytest.raises(ValueError, match=r"template MetaEOL averages several prompts: it has no token embeddings"):
        tiny_encoder().encode("dog", template=METAEOL, output_value="token_embeddings")
    with pytest.raises(TypeError, match=r"template must be a Template, a preset name or None, got int"):
        tiny_encoder().encode("dog", template=3)


def test_a_text_holding_the_placeholder_is_text_like_any_other():
    assert Template("<{text}>").render("{text}") == ["<{text}>"]
    assert PROMPT_EOL.render("x") == ['This sentence : "x" means in one word:"']


# ---------------------------------------------------------------- the published wordings

# Copied from the authors' released code, in its own notation (*sent 0* / *sent_0* where the text goes):
#   Jiang et al. 2023 (PromptEOL): kongds/scaling_sentemb, README.md (run with '_' read as ' ', evaluation.py).
#   Zhang et al. 2024 (Pretended CoT, Knowledge Enhancement): ZBWpro/PretCoTandKE, settings.py (eb97d55).
#   Lei et al. 2024 (MetaEOL): Yibin-Lei/MetaEOL, evaluation.py (c62096d), task_prompts of "metaeol".
#   Springer et al. 2024 (Echo): jakespringer/echo-embeddings, example.py, the 'document' template.
PUBLISHED_PROMPT_EOL = 'This_sentence_:_"*sent_0*"_means_in_one_word:"'.replace("_", " ").replace("*sent 0*", "{text}")
PUBLISHED_PRETENDED_COT = 'After thinking step by step , this sentence : "*sent_0*" means in one word:"'
PUBLISHED_KNOWLEDGE = 'The essence of a sentence is often captured by its main subjects and actions, while descriptive terms provide additional but less central details. With this in mind , this sentence : "*sent_0*" means in one word:"'  # noqa: E501
PUBLISHED_METAEOL = [
    "In this task, you're presented with a text excerpt. Your task is to categorize the excerpt into a broad category such as 'Education', 'Technology', 'Health', 'Business', 'Environment', 'Politics', or 'Culture'. These categories help in organizing content for better accessibility and targeting. For this task, this sentence : \"*sent 0*\" should be classified under one general category in one word:\"",  # noqa: E501
    "In this task, you're given a statement and you need to determine whether it's presenting an 'Opinion' or a 'Fact'. This distinction is vital for information verification, educational purposes, and content analysis. For this task, this sentence : \"*sent 0*\" discriminates between opinion and fact in one word:\"",  # noqa: E501
    "In this task, you're given a review from an online platform. Your task is to generate a rating for the product based on the review on a scale of 1-5, where 1 means 'extremely negative' and 5 means 'extremely positive'. For this task, this sentence : \"*sent 0*\" reflects the sentiment in one word:\"",  # noqa: E501
    'In this task, you\'re reading a personal diary entry. Your task is to identify the predominant emotion expressed, such as joy, sadness, anger, fear, or love. For this task, this sentence : "*sent 0*" conveys the emotion in one word:"',  # noqa: E501
    "In this task, you're presented with two sentences. Your task is to assess whether the sentences convey the same meaning. Use 'identical', 'similar', 'different', or 'unrelated' to describe the relationship. To enhance the performance of this task, this sentence : \"*sent 0*\" means in one word:\"",  # noqa: E501
    "In this task, you're given a sentence and a phrase. Your task is to determine if the phrase can be a contextual synonym within the given sentence. Options include 'yes', 'no', or 'partially'. To enhance the performance of this task, this sentence : \"*sent 0*\" means in one word:\"",  # noqa: E501
    'In this task, you\'re examining a news article. Your task is to extract the most critical fact from the article. For this task, this sentence : "*sent 0*" encapsulates the key fact in one word:"',  # noqa: E501
    'In this task, you\'re reviewing a scientific abstract. Your task is to identify the main entities (e.g., proteins, diseases) and their relations (e.g., causes, treats). For this task, this sentence : "*sent 0*" highlights the primary entity or relation in one word:"',  # noqa: E501
]
PUBLISHED_ECHO = "<s>Document:{!%%text%%}\nDocument again:{%%text%%}{</s>}"


def test_presets_carry_the_published_wording():
    def ours(text):
        return text.replace("*sent_0*", "{text}").replace("*sent 0*", "{text}")

    assert PROMPT_EOL.formats == (PUBLISHED_PROMPT_EOL,)
    assert templates.PRETENDED_COT.formats == (ours(PUBLISHED_PRETENDED_COT),)
    assert templates.KNOWLEDGE_ENHANCEMENT.formats == (ours(PUBLISHED_KNOWLEDGE),)
    assert METAEOL.formats == tuple(ours(p) for p in PUBLISHED_METAEOL)
    # Echo's template language: <s> is our sink token, {!...} is read but not pooled, {...} is pooled.
    echo = PUBLISHED_ECHO.removeprefix("<s>").replace("{!%%text%%}", "{text}").replace("{%%text%%}", "{text}")
    assert ECHO.formats == (echo.removesuffix("{</s>}"),) and ECHO.copy == 2 and ECHO.target == "text"
    for preset in (PROMPT_EOL, templates.PRETENDED_COT, templates.KNOWLEDGE_ENHANCEMENT, METAEOL):
        assert preset.target == "last" and preset.citation
    assert list(templates.PRESETS) == ["PromptEOL", "PretendedCoT", "KnowledgeEnhancement", "MetaEOL", "Echo"]


# ---------------------------------------------------------------- the real SmolLM2 tokenizer and model


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    return EncoderFromDecoder.from_pretrained(smollm2_path, "F* | M0B*8")


SENTENCES = ['A man is playing a guitar, "loudly".', "Someone strums?"]


def test_prompt_eol_on_smollm2_is_the_last_prompt_tokens_state(smollm2):
    got = smollm2.encode(SENTENCES, template="PromptEOL")
    for text, vector in zip(SENTENCES, got, strict=True):
        prompt = f'This sentence : "{text}" means in one word:"'
        ids = smollm2.sink_ids() + smollm2.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        np.testing.assert_allclose(vector, forward_states(smollm2, ids)[-1].numpy(), atol=1e-4)


def test_metaeol_on_smollm2_is_the_mean_of_its_prompts(smollm2):
    got = smollm2.encode(SENTENCES, template=METAEOL, batch_size=4)
    apart = [smollm2.encode(SENTENCES, template=Template(f, target="last")) for f in METAEOL.formats]
    np.testing.assert_allclose(got, np.mean(apart, axis=0), atol=1e-4)


def test_echo_on_smollm2_pools_the_second_copy(smollm2):
    tok = smollm2.tokenizer
    got = smollm2.encode(SENTENCES, template=ECHO, padding_side="left")
    for text, vector in zip(SENTENCES, got, strict=True):
        row = smollm2.sink_ids() + tok(f"Document:{text}\nDocument again:{text}", add_special_tokens=False)["input_ids"]
        body = tok(text, add_special_tokens=False)["input_ids"]
        starts = sublist_starts(row, body)
        assert len(starts) == 2  # both copies tokenize as the text alone here
        hidden = forward_states(smollm2, row)[starts[1] : starts[1] + len(body)]
        np.testing.assert_allclose(vector, hidden.mean(0).numpy(), atol=1e-4)


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_path)


def test_a_refusal_says_how_many_tokens_a_text_needs(smollm2_tokenizer):
    # Around an empty text the prompt merges into 12 tokens; around one token of a text it takes 13, so 14 in all.
    args = dict(sink=[1], template=PROMPT_EOL.formats[0], target=PROMPT_EOL.target)
    with pytest.raises(ValueError, match=r"text 0 needs at least 14 tokens .* within max_length=13"):
        tokenize(smollm2_tokenizer, ["hello world again"], "Q: ", max_length=13, **args)
    assert tokenize(smollm2_tokenizer, ["hello world again"], "Q: ", max_length=14, **args).lengths == [14]


any_text = st.text(st.characters(codec="utf-8"), max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(any_text, min_size=1, max_size=3),
    st.one_of(st.none(), any_text),
    st.sampled_from([PROMPT_EOL, ECHO, Template('Q: "{text}"'), Template("{text}{text}", copy=1)]),
    st.one_of(st.none(), st.integers(1, 40)),
)
@example(["\x06\x80"], None, ECHO, 7)  # found by CI: the cut text merged into the prompt, nothing left to pool
@example(["\x06:0"], None, ECHO, 6)  # the one-token cut merges: the needed length is a longer cut's
def test_fuzzed_templated_rows_lose_nothing_and_fit(smollm2_tokenizer, texts, instruction, template, max_length):
    tok = smollm2_tokenizer
    args = dict(sink=[1], template=template.formats[0], target=template.target, copy=template.copy or 1)
    try:
        got = tokenize(tok, texts, instruction, max_length=max_length, **args)
    except ValueError as err:
        assert "leaving no room for text" in str(err)
        i, needs = map(int, re.search(r"text (\d+) needs at least (\d+) tokens", str(err)).groups())
        assert tokenize(tok, [texts[i]], instruction, max_length=needs, **args).lengths == [needs]  # and fits
        return
    for i, text in enumerate(texts):
        row = got.prefix_ids[i] + got.text_ids[i] + got.suffix_ids[i]
        whole = [1, *tok((instruction or "") + template.render(text)[0], add_special_tokens=False)["input_ids"]]
        if max_length is None or len(whole) <= max_length:  # tokenized in one piece, split without loss
            assert row == whole and i not in got.truncated
        else:  # a text was cut, or one with nothing to pool lost the prompt's end
            assert (i in got.truncated) != (got.text_ids[i] == [])
        if max_length is not None:
            assert len(row) <= max_length
        if got.text_ids[i] and template.target == "text":
            assert all(0 <= a <= b <= len(text) for a, b in got.offsets[i])


# ---------------------------------------------------------------- the MTEB adapter

mteb = pytest.importorskip("mteb")


def test_mteb_adapter_encodes_through_the_template_instead_of_the_instruction(tmp_path):
    from scipy.stats import spearmanr
    from test_mteb import write_data

    from nosink.evals.mteb_run import run_mteb

    data = write_data(tmp_path / "data")
    encoder = tiny_encoder()
    summary = run_mteb(encoder, ["STSBenchmark"], tmp_path / "data", tmp_path / "out", template="PromptEOL")
    entry = summary["tasks"]["STSBenchmark"]
    pairs = data["sts"]
    a = encoder.encode([p[0] for p in pairs], template=PROMPT_EOL, normalize_embeddings=True)
    b = encoder.encode([p[1] for p in pairs], template=PROMPT_EOL, normalize_embeddings=True)
    expected = spearmanr([p[2] for p in pairs], (a * b).sum(1))[0]
    assert entry["scores"][SPEC] == pytest.approx(expected, abs=1e-6)  # no instruction before the prompt
    assert summary["template"] == "PromptEOL" and "PromptEOL" in entry["files"][SPEC]

    sweep = run_mteb(encoder, ["STSBenchmark"], tmp_path / "data", tmp_path / "out2", specs=[SPEC, "F*"], template=ECHO)
    a = encoder.encode([p[0] for p in pairs], template=ECHO, normalize_embeddings=True)
    b = encoder.encode([p[1] for p in pairs], template=ECHO, normalize_embeddings=True)
    expected = spearmanr([p[2] for p in pairs], (a * b).sum(1))[0]
    assert sweep["tasks"]["STSBenchmark"]["scores"][SPEC] == pytest.approx(expected, abs=1e-6)


def test_mteb_adapter_refuses_a_cache_of_another_template():
    from nosink.evals.mteb_model import NosinkMTEBEncoder, SpecSweepCache

    encoder = tiny_encoder()
    cache = SpecSweepCache(encoder, [SPEC], template="Echo")
    with pytest.raises(ValueError, match="the cache encodes with template Echo, not PromptEOL"):
        NosinkMTEBEncoder(encoder, SPEC, cache=cache, template="PromptEOL")
    model = NosinkMTEBEncoder(encoder, SPEC, cache=cache, template=ECHO)
    assert model.experiment_kwargs["template"] == "Echo" and model.experiment_kwargs["pooling"] == "mean"
    assert model.instruction(mteb.get_task("SciFact").metadata, "query") is None
    assert NosinkMTEBEncoder(encoder, template="MetaEOL").experiment_kwargs["pooling"] == "last"


def test_an_unnamed_template_is_filed_under_a_short_hash():
    import hashlib

    from nosink.evals.mteb_model import template_name

    mine = Template('Say "{text}" in one word:"\n', target="last")
    expected = hashlib.sha256(repr((mine.formats, "last", None)).encode()).hexdigest()[:12]
    assert template_name(mine) == f"template-{expected}" and template_name(METAEOL) == "MetaEOL"
    assert template_name(Template(mine.formats)) != template_name(mine)  # the target counts


def test_an_mteb_sweep_runs_every_spec_through_the_template(tmp_path):
    import json

    from test_mteb import write_data

    from nosink.evals.mteb_run import run_mteb
    from nosink.evals.run_sweeps import mteb_sweep

    write_data(tmp_path / "data")
    encoder = tiny_encoder("F*")
    cs = mteb_sweep(encoder, "STSBenchmark", ["MASK0-BIDIR"], tmp_path / "out", tmp_path / "data", ks=[2],
                    template="MetaEOL")  # fmt: skip
    alone = run_mteb(tiny_encoder("F* | M0B*2"), ["STSBenchmark"], tmp_path / "data", tmp_path / "o", template=METAEOL)
    assert cs[-1].scores["cosine_spearman"] == pytest.approx(alone["tasks"]["STSBenchmark"]["scores"][SPEC], abs=1e-6)
    assert json.loads((tmp_path / "out" / "mteb_sweep.json").read_text())["meta"]["template"] == "MetaEOL"


@given(st.text(st.sampled_from("ab .\"?'!"), max_size=8))
def test_senteval_edit_is_the_published_batchers_edit(s):
    # The sentence edit of the authors' SentEval batchers (kongds/scaling_sentemb, Yibin-Lei/MetaEOL), verbatim.
    text = s
    if len(s) > 0 and s[-1] not in ".?\"'":
        s += "."
    s = s.replace('"', "'")
    if len(s) > 0 and "?" == s[-1]:
        s = s[:-1] + "."
    assert templates.senteval_edit(text) == s
