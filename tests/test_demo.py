"""The demo's ranking (nosink.evals.demo), which `nosink demo` prints."""

import numpy as np
import pytest
from tiny import tiny_decoder, tiny_tokenizer

from nosink import EncoderFromDecoder
from nosink.evals.demo import DEMO_PAIRS, pair_ranking, run_demo


def test_pair_ranking_compares_each_pair_with_every_other_row():
    # fmt: off
    sims = np.array([
        [1.0, 0.9, 0.2, 0.3],   # pair 0-1: 0.9 against at most 0.3 (row 0) and 0.95 (row 1, with row 3)
        [0.9, 1.0, 0.1, 0.95],
        [0.2, 0.1, 1.0, 0.8],   # pair 2-3: 0.8 against 0.95 (row 3, with row 1)
        [0.3, 0.95, 0.8, 1.0],
    ])
    # fmt: on
    first, second = pair_ranking(sims)
    assert (first.a, first.b, first.similarity, first.closest_unrelated, first.closer) == (0, 1, 0.9, 0.95, False)
    assert (second.a, second.b, second.similarity, second.closest_unrelated) == (2, 3, 0.8, 0.95)
    sims[1, 3] = sims[3, 1] = 0.25
    first, second = pair_ranking(sims)
    assert first.closer and second.closer and first.closest_unrelated == 0.3


def test_pair_ranking_refuses_a_matrix_without_two_pairs():
    with pytest.raises(ValueError, match="at least two pairs"):
        pair_ranking(np.eye(2))
    with pytest.raises(ValueError, match="square"):
        pair_ranking(np.ones((4, 3)))


def test_run_demo_encodes_the_pairs_normalised():
    encoder = EncoderFromDecoder(tiny_decoder("llama"), "F* | M0B*2", tiny_tokenizer())
    result = run_demo(encoder)
    assert result.texts == [t for pair in DEMO_PAIRS for t in pair]
    np.testing.assert_allclose(np.diag(result.similarities), 1.0, atol=1e-5)
    assert len(result.pairs) == len(DEMO_PAIRS) and result.held == sum(p.closer for p in result.pairs)
