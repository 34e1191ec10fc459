"""Every layer kind's mask as literal matrices, both padding sides (as in transformers' test_masking_utils)."""

import pytest
import torch

from nosink.layerspec import Kind, additive_mask, build_mask, parse_spec, relative_positions

RIGHT = torch.tensor([[1, 1, 1, 1, 0]])  # four real tokens, one pad after
LEFT = torch.tensor([[0, 1, 1, 1, 1]])  # four real tokens, one pad before


def mask_of(kind: str, attention_mask: torch.Tensor) -> list[list[list[int]]]:
    (segment,) = parse_spec(kind).segments
    return build_mask(segment.kind, attention_mask)[:, 0].int().tolist()


# fmt: off
CASES = {
    # kind: (right padding, left padding); a padding query attends only itself
    "F": (
        [[1, 0, 0, 0, 0],
         [1, 1, 0, 0, 0],
         [1, 1, 1, 0, 0],
         [1, 1, 1, 1, 0],
         [0, 0, 0, 0, 1]],
        [[1, 0, 0, 0, 0],
         [0, 1, 0, 0, 0],
         [0, 1, 1, 0, 0],
         [0, 1, 1, 1, 0],
         [0, 1, 1, 1, 1]],
    ),
    "B": (
        [[1, 1, 1, 1, 0],
         [1, 1, 1, 1, 0],
         [1, 1, 1, 1, 0],
         [1, 1, 1, 1, 0],
         [0, 0, 0, 0, 1]],
        [[1, 0, 0, 0, 0],
         [0, 1, 1, 1, 1],
         [0, 1, 1, 1, 1],
         [0, 1, 1, 1, 1],
         [0, 1, 1, 1, 1]],
    ),
    "R": (
        [[1, 1, 1, 1, 0],
         [0, 1, 1, 1, 0],
         [0, 0, 1, 1, 0],
         [0, 0, 0, 1, 0],
         [0, 0, 0, 0, 1]],
        [[1, 0, 0, 0, 0],
         [0, 1, 1, 1, 1],
         [0, 0, 1, 1, 1],
         [0, 0, 0, 1, 1],
         [0, 0, 0, 0, 1]],
    ),
    "M0F": (  # NoSink-Forward: causal, and the first token is hidden from every later query
        [[1, 0, 0, 0, 0],
         [0, 1, 0, 0, 0],
         [0, 1, 1, 0, 0],
         [0, 1, 1, 1, 0],
         [0, 0, 0, 0, 1]],
        [[1, 0, 0, 0, 0],
         [0, 1, 0, 0, 0],
         [0, 0, 1, 0, 0],
         [0, 0, 1, 1, 0],
         [0, 0, 1, 1, 1]],
    ),
    "M0B": (  # NoSink-Bidirectional (MASK0)
        [[1, 1, 1, 1, 0],
         [0, 1, 1, 1, 0],
         [0, 1, 1, 1, 0],
         [0, 1, 1, 1, 0],
         [0, 0, 0, 0, 1]],
        [[1, 0, 0, 0, 0],
         [0, 1, 1, 1, 1],
         [0, 0, 1, 1, 1],
         [0, 0, 1, 1, 1],
         [0, 0, 1, 1, 1]],
    ),
    "M1F": (  # the first two tokens hidden from later queries
        [[1, 0, 0, 0, 0],
         [0, 1, 0, 0, 0],
         [0, 0, 1, 0, 0],
         [0, 0, 1, 1, 0],
         [0, 0, 0, 0, 1]],
        [[1, 0, 0, 0, 0],
         [0, 1, 0, 0, 0],
         [0, 0, 1, 0, 0],
         [0, 0, 0, 1, 0],
         [0, 0, 0, 1, 1]],
    ),
    "M1B": (
        [[1, 1, 1, 1, 0],
         [0, 1, 1, 1, 0],
         [0, 0, 1, 1, 0],
         [0, 0, 1, 1, 0],
         [0, 0, 0, 0, 1]],
        [[1, 0, 0, 0, 0],
         [0, 1, 1, 1, 1],
         [0, 0, 1, 1, 1],
         [0, 0, 0, 1, 1],
         [0, 0, 0, 1, 1]],
    ),
}

# Appendix D, M_MASK0 for five tokens: 1 where the additive matrix has 0.
M_MASK0 = [[1, 1, 1, 1, 1],
           [0, 1, 1, 1, 1],
           [0, 1, 1, 1, 1],
           [0, 1, 1, 1, 1],
           [0, 1, 1, 1, 1]]

# Appendix D, M_BWD (the reverse causal mask) for five tokens.
M_BWD = [[1, 1, 1, 1, 1],
         [0, 1, 1, 1, 1],
         [0, 0, 1, 1, 1],
         [0, 0, 0, 1, 1],
         [0, 0, 0, 0, 1]]
# fmt: on


@pytest.mark.parametrize("kind", sorted(CASES))
def test_literal_masks_right_padding(kind):
    assert mask_of(kind, RIGHT) == [CASES[kind][0]]


@pytest.mark.parametrize("kind", sorted(CASES))
def test_literal_masks_left_padding(kind):
    assert mask_of(kind, LEFT) == [CASES[kind][1]]


@pytest.mark.parametrize("kind", sorted(CASES))
def test_batch_of_both_padding_sides_is_row_by_row(kind):
    both = torch.cat([RIGHT, LEFT])
    assert mask_of(kind, both) == [CASES[kind][0], CASES[kind][1]]


def test_m0b_is_appendix_d_mask0():
    assert mask_of("M0B", torch.ones(1, 5, dtype=torch.long)) == [M_MASK0]


def test_large_sink_mask_is_reverse_causal():
    # Appendix F.2: with 10 tokens, MASK9 is the reverse causal mask.
    ten = torch.ones(1, 10, dtype=torch.long)
    assert mask_of("M9B", ten) == mask_of("R", ten)
    # M<n> hides n + 1 tokens; from n = T - 2 on, the last query has nothing before it left to see.
    assert mask_of("M8B", ten) == mask_of("R", ten)
    assert mask_of("M7B", ten) != mask_of("R", ten)
    assert mask_of("M4B", torch.ones(1, 5, dtype=torch.long)) == [M_BWD]
    # For a forward layer the same limit leaves each token only itself.
    assert mask_of("M9F", ten) == [torch.eye(10, dtype=torch.int).tolist()]


def test_mixed_lengths_and_all_padding_row():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    # fmt: off
    assert mask_of("M0B", mask) == [
        [[1, 1, 0],
         [0, 1, 0],
         [0, 0, 1]],
        [[1, 0, 0],
         [0, 1, 0],
         [0, 0, 1]],
        [[1, 0, 0],  # a row of padding only: each query keeps itself
         [0, 1, 0],
         [0, 0, 1]],
    ]
    # fmt: on


def test_relative_positions_count_from_first_real_token():
    # fmt: off
    assert relative_positions(torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0]])).tolist() == [
        [-1, -1, 0, 1, 2],
        [0, 1, 2, -1, -1],
    ]
    # fmt: on


def test_sliding_window_limits_how_far_back():
    mask = build_mask(Kind("F"), torch.ones(1, 4, dtype=torch.long), sliding_window=2)
    # fmt: off
    assert mask[0, 0].int().tolist() == [
        [1, 0, 0, 0],
        [1, 1, 0, 0],
        [0, 1, 1, 0],
        [0, 0, 1, 1],
    ]
    # fmt: on


def test_additive_form():
    mask = build_mask(Kind("F"), torch.tensor([[1, 1, 0]]))
    add = additive_mask(mask, torch.float16)
    low = torch.finfo(torch.float16).min
    assert add.dtype == torch.float16
    assert add[0, 0].tolist() == [[0, low, low], [0, 0, low], [low, low, 0]]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("kind", [Kind("F"), Kind("R"), Kind("B", sink=0), Kind("F", sink=1)])
def test_additive_masks_give_finite_attention_in_their_own_dtype(kind, dtype):
    # Scores in the mask's own dtype, mostly negative so that forbidden entries overflow to -inf in
    # float16: a row is NaN only if every key is forbidden, which the mask must never allow (a padding
    # query attends itself). Rows 0 and 1 hold padding queries; forbidden keys must get no weight.
    attention_mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    allowed = build_mask(kind, attention_mask)
    add = additive_mask(allowed, dtype)
    assert add.dtype == dtype
    scores = (torch.randn(3, 2, 5, 5, generator=torch.Generator().manual_seed(0)) * 10 - 40).to(dtype)
    probs = torch.softmax(scores + add, dim=-1)
    assert probs.dtype == dtype
    assert torch.isfinite(probs).all()
    assert (probs.float().sum(-1) - 1).abs().max() <= 1e-2
    assert (probs.float() * ~allowed).abs().max() == 0


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.ones(5, dtype=torch.long), "must be \\(batch, seq\\)"),
        (torch.ones(1, 1, 5), "must be \\(batch, seq\\)"),
        (torch.full((1, 3), 2), "only 0 \\(padding\\) and 1"),
        (torch.ones(1, 3, dtype=torch.float32), "integers or booleans"),
        ([[1, 1]], "must be a torch.Tensor"),
    ],
)
def test_malformed_attention_mask_is_a_clear_error(bad, message):
    with pytest.raises(ValueError, match=message):
        build_mask(Kind("F"), bad)


def test_additive_mask_rejects_bad_input():
    with pytest.raises(ValueError, match="boolean mask"):
        additive_mask(torch.ones(1, 1, 2, 2), torch.float32)
    with pytest.raises(ValueError, match="floating-point"):
        additive_mask(torch.ones(1, 1, 2, 2, dtype=torch.bool), torch.int64)
