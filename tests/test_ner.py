"""The NER probe end to end on sentences built here, with a tiny random model."""

import random

import pytest
from seqeval.metrics import f1_score
from tiny import tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder
from nosink.evals.ner import NERConfig, Sentence, evaluate_ner, read_conll_lines

pytest.importorskip("seqeval")  # the eval extra

CITIES, PEOPLE = ["paris", "london", "france", "england"], ["i", "you", "we"]
FILLER = ["the", "cat", "sat", "on", "mat", "is", "very", "good"]


def make_sentences(n: int, seed: int = 0) -> list[Sentence]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words, tags = [], []
        for _ in range(rng.randint(2, 7)):
            r = rng.random()
            word, tag = (
                (rng.choice(CITIES), "B-LOC") if r < 0.3 else (rng.choice(PEOPLE), "B-PER") if r < 0.5
                else (rng.choice(FILLER), "O")
            )  # fmt: skip
            words.append(word)
            tags.append(tag)
        out.append(Sentence(tuple(words), tuple(tags)))
    return out


@pytest.fixture(scope="module")
def encoder():
    return EncoderFromDecoder(tiny_decoder("llama"), "F* | M0B*2", tiny_tokenizer())


def test_seqeval_scores_constructed_taggers():
    gold = [["B-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "O"]]
    assert f1_score(gold, gold) == 1.0
    shuffled = [["B-LOC", "O", "B-PER"], ["O", "B-ORG", "I-ORG"]]
    assert f1_score(gold, shuffled) == 0.0


def test_conll_reader():
    lines = ["-DOCSTART- -X- -X- O", "", "EU NNP B-NP B-ORG", "rejects VBZ B-VP O", "", "", "Peter NNP B-NP B-PER"]
    assert read_conll_lines(lines) == [Sentence(("EU", "rejects"), ("B-ORG", "O")), Sentence(("Peter",), ("B-PER",))]
    with pytest.raises(ValueError, match=r"line 1: expected 'WORD \.\.\. TAG'"):
        read_conll_lines(["lonely"])


def test_probe_learns_a_learnable_task_and_not_shuffled_labels(encoder):
    train = make_sentences(120, seed=1)
    evaluation = make_sentences(60, seed=2)
    config = NERConfig(lr=5e-2, epochs=40)
    (good,) = evaluate_ner(encoder, train, evaluation, config=config, show_progress_bar=False)
    assert good.f1 > 0.9, good
    rng = random.Random(3)
    shuffled_train = [Sentence(s.words, tuple(rng.sample(s.tags, len(s.tags)))) for s in train]
    (bad,) = evaluate_ner(encoder, shuffled_train, evaluation, config=config, show_progress_bar=False)
    assert bad.f1 < good.f1 - 0.2, (bad, good)


def test_sweep_of_specs_in_one_pass(encoder):
    train, evaluation = make_sentences(40, seed=4), make_sentences(20, seed=5)
    specs = ["F*", "F* | B*2", "F* | M0B*2"]
    results = evaluate_ner(encoder, train, evaluation, specs=specs, show_progress_bar=False)
    assert [r.spec for r in results] == specs
    assert all(r.n_train == 40 and r.n_eval == 20 for r in results)
    for r in results:  # each equals the probe run alone, on an encoder built for that spec only
        alone = EncoderFromDecoder(encoder.decoder, r.spec, encoder.tokenizer)
        (one,) = evaluate_ner(alone, train, evaluation, show_progress_bar=False)
        assert (r.f1, r.precision, r.recall) == pytest.approx((one.f1, one.precision, one.recall), abs=1e-9)
    assert len({r.f1 for r in results}) > 1  # the specs give different features, and different scores


def test_truncated_words_are_predicted_outside(encoder):
    train, evaluation = make_sentences(40, seed=6), make_sentences(20, seed=7)
    (full,) = evaluate_ner(encoder, train, evaluation, show_progress_bar=False)
    (cut,) = evaluate_ner(encoder, train, evaluation, config=NERConfig(max_length=3), show_progress_bar=False)
    assert full.truncated_words == 0
    assert cut.truncated_words == sum(max(0, len(s.words) - 2) for s in evaluation)  # sink + 2 words fit
    assert cut.recall < full.recall or full.recall == 0


def test_unseen_evaluation_tags_are_an_error(encoder):
    train = [Sentence(("paris",), ("B-LOC",))]
    evaluation = [Sentence(("i",), ("B-PER",))]
    with pytest.raises(ValueError, match=r"evaluation tags \['B-PER'\] never occur"):
        evaluate_ner(encoder, train, evaluation, show_progress_bar=False)


def test_baseline_encoder_through_the_same_probe(tmp_path):
    import transformers as tf

    from nosink.evals.baselines import TokenFeatures

    config = tf.BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=48)  # fmt: skip
    tf.BertModel(config).save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    features = TokenFeatures(tmp_path, name="tiny-bert")
    train, evaluation = make_sentences(40, seed=8), make_sentences(20, seed=9)
    (result,) = evaluate_ner(features, train, evaluation, specs=[features.spec], show_progress_bar=False)
    assert result.spec == "tiny-bert" and 0.0 <= result.f1 <= 1.0


class OneHotWords:
    """A fake encoder whose token states are one-hot token ids: a perfect tagger is linearly separable."""

    spec = "one-hot"

    def __init__(self):
        self.tokenizer = tiny_tokenizer()

    def sink_ids(self):
        return []

    def forward_specs(self, ids, mask, names):
        import torch

        return dict.fromkeys(names, torch.nn.functional.one_hot(ids, 96).float())


def test_known_scores_through_the_probe():
    # Tags are a function of the word: a linear probe on one-hot words can be perfect, and is.
    train, evaluation = make_sentences(200, seed=10), make_sentences(50, seed=11)
    config = NERConfig(lr=0.1, epochs=30)
    (perfect,) = evaluate_ner(OneHotWords(), train, evaluation, ["one-hot"], config, show_progress_bar=False)
    assert perfect.f1 == 1.0 and perfect.precision == 1.0 and perfect.recall == 1.0
    rng = random.Random(12)
    shuffled = [Sentence(s.words, tuple(rng.choice(["O", "B-LOC", "B-PER"]) for _ in s.words)) for s in train]
    (noise,) = evaluate_ner(OneHotWords(), shuffled, evaluation, ["one-hot"], config, show_progress_bar=False)
    assert noise.f1 < 0.7


def test_max_length_without_room_for_words_is_an_error(encoder):
    with pytest.raises(ValueError, match="leaves no room for words"):
        evaluate_ner(encoder, make_sentences(5), make_sentences(5), config=NERConfig(max_length=1),
                     show_progress_bar=False)  # fmt: skip


def test_scores_equal_seqeval_on_hand_made_predictions():
    # One-hot word features and a training set where each word always has one tag: the probe learns that
    # map, so its predictions are known by hand. The evaluation gold disagrees on purpose in places, so the
    # expected scores are neither 0 nor 1; they are computed here with seqeval on the hand-made predictions.
    from seqeval.metrics import precision_score, recall_score

    tag_of = {w: "B-LOC" for w in CITIES} | {w: "B-PER" for w in PEOPLE} | {w: "O" for w in FILLER}
    rng = random.Random(13)
    train = []
    for _ in range(200):
        words = tuple(rng.choice(sorted(tag_of)) for _ in range(rng.randint(2, 6)))
        train.append(Sentence(words, tuple(tag_of[w] for w in words)))
    evaluation = [
        Sentence(("paris", "is", "good"), ("B-LOC", "O", "O")),
        Sentence(("london", "we", "sat"), ("B-PER", "B-PER", "O")),  # london tagged PER: a wrong prediction
        Sentence(("the", "cat", "i"), ("O", "B-LOC", "B-PER")),  # a missed entity
        Sentence(("france", "england", "you"), ("B-LOC", "B-LOC", "B-PER")),
    ]
    predicted = [[tag_of[w] for w in s.words] for s in evaluation]
    gold = [list(s.tags) for s in evaluation]
    config = NERConfig(lr=0.1, epochs=30)
    (result,) = evaluate_ner(OneHotWords(), train, evaluation, ["one-hot"], config, show_progress_bar=False)
    expected = (f1_score(gold, predicted), precision_score(gold, predicted), recall_score(gold, predicted))
    assert 0 < expected[0] < 1 and expected[1] != expected[2]
    assert (result.f1, result.precision, result.recall) == pytest.approx(expected, abs=1e-12)
