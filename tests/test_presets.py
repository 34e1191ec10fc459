"""The paper's configurations by name, and the official code's arguments, as specs."""

import pytest

from nosink.layerspec import SpecError, parse_spec, presets

# LAYERSPEC.md section 3, with n = depth written as the fill.
TABLE = [
    ("BASELINE", {}, "F*"),
    ("INPLACE-BIDIR", {"k": 4}, "F* | B*4"),
    ("INPLACE-BACK", {"k": 4}, "F* | R*4"),
    ("INTER-BIDIR", {"k": 4}, "F* | INTER(B*4)"),
    ("INTER-BACK", {"k": 4}, "F* | INTER(R*4)"),
    ("EXTRA-BIDIR", {"k": 4}, "F* | EXTRA(B*4)"),
    ("EXTRA-BACK", {"k": 4}, "F* | EXTRA(R*4)"),
    ("EXTEND-BIDIR", {"k": 4}, "F* | EXTEND(B*4)"),
    ("EXTEND-BACK", {"k": 4}, "F* | EXTEND(R*4)"),
    ("MASK0-FOR", {"k": 4}, "F* | M0F*4"),
    ("MASK0-BIDIR", {"k": 10}, "F* | M0B*10"),
    ("MASK0-ALL", {}, "M0B*"),
    ("MASK0&BIDIR", {"k": 10, "k0": 3}, "F* | B*7 | M0B*3"),
]


@pytest.mark.parametrize("name, params, text", TABLE)
def test_preset_by_paper_name(name, params, text):
    assert presets.by_name(name, **params) == parse_spec(text)
    assert presets.by_name(name.lower().replace("0", "O"), **params) == parse_spec(text)  # MASKO as in the PDF


def test_presets_resolve_on_a_22_layer_model():
    plan = presets.mask0_and_bidir(k=10, k0=3).resolve(22)
    assert [str(k) for k in plan.stack] == ["F"] * 12 + ["B"] * 7 + ["M0B"] * 3
    assert [str(k) for k in presets.mask0_all().resolve(3).stack] == ["M0B"] * 3


def test_mask0_and_bidir_edges():
    assert presets.mask0_and_bidir(k=5, k0=5) == presets.mask0_bidir(5)
    assert presets.mask0_and_bidir(k=5, k0=0) == presets.inplace_bidir(5)
    with pytest.raises(SpecError, match="k0 must be an integer from 0 to k=5"):
        presets.mask0_and_bidir(k=5, k0=6)


def test_sink_mask_family():
    assert presets.sink_mask(3, k=2) == parse_spec("F* | M3B*2")
    assert presets.sink_mask(5, k=2, direction="F") == parse_spec("F* | M5F*2")
    with pytest.raises(SpecError, match="F or B"):
        presets.sink_mask(3, k=2, direction="R")


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_bad_k_is_a_spec_error(bad):
    with pytest.raises(SpecError, match="k must be a positive integer"):
        presets.inplace_bidir(bad)


def test_unknown_name_and_parameters():
    with pytest.raises(SpecError, match="unknown configuration 'MASK1-BIDIR'"):
        presets.by_name("MASK1-BIDIR", k=3)
    with pytest.raises(SpecError, match="BASELINE does not take"):
        presets.by_name("baseline", k=3)


@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"architecture": "INPLACE", "mask_type": "MASK0", "num_unsink_layers": 10}, "F* | M0B*10"),
        (
            {"architecture": "inplace", "mask_type": "MASK0", "num_unsink_layers": 3, "num_bidir_layers": 7},
            "F* | B*7 | M0B*3",
        ),
        ({"architecture": "INPLACE", "mask_type": "BACK", "num_unsink_layers": 5}, "F* | R*5"),
        ({"architecture": "INPLACE", "num_bidir_layers": 5}, "F* | B*5"),
        ({"architecture": "INTER", "mask_type": "BACK", "num_unsink_layers": 4}, "F* | INTER(R*4)"),
        ({"architecture": "EXTRA", "mask_type": "BACK", "num_unsink_layers": 4}, "F* | EXTRA(R*4)"),
        ({"architecture": "EXTEND", "num_bidir_layers": 2}, "F* | EXTEND(B*2)"),
        (
            {"architecture": "INTER", "num_bidir_layers": 2, "mask_type": "BACK", "num_unsink_layers": 1},
            "F* | INTER(B*2 | R)",
        ),
        ({"architecture": "INPLACE"}, "F*"),
        ({"architecture": "none", "num_unsink_layers": 4, "num_bidir_layers": 2}, "F*"),
        ({"unsink_layers": [4, 5], "bidir_layers": [2, 3], "num_layers": 6}, "F*2 | B*2 | M0B*2"),
        ({"unsink_layers": [0], "mask_type": "BACK", "num_layers": 3}, "R | F*2"),
        # The official scripts pass empty lists by default: they mean "not given", not "no layers".
        (
            {"num_unsink_layers": 2, "num_bidir_layers": 15, "unsink_layers": [], "bidir_layers": []},
            "F* | B*15 | M0B*2",
        ),
        ({"unsink_layers": [], "bidir_layers": [], "num_layers": 22}, "F*"),
    ],
)
def test_from_official_arguments(kwargs, text):
    assert presets.from_official(**kwargs) == parse_spec(text)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"architecture": "SIDEWAYS"}, "unknown architecture"),
        ({"mask_type": "MASK3"}, "unknown mask_type"),
        ({"num_unsink_layers": -1}, "num_unsink_layers must be a non-negative integer"),
        ({"unsink_layers": [1]}, "need num_layers"),
        ({"unsink_layers": [1], "bidir_layers": [1], "num_layers": 4}, "layer 1 is in both"),
        ({"unsink_layers": [4], "num_layers": 4}, "not a layer index from 0 to 3"),
        ({"architecture": "INTER", "unsink_layers": [1], "num_layers": 4}, "INPLACE only"),
        ({"num_unsink_layers": 3, "unsink_layers": [5], "num_layers": 8}, "both layer counts"),
    ],
)
def test_from_official_rejects_bad_arguments(kwargs, message):
    with pytest.raises(SpecError, match=message):
        presets.from_official(**kwargs)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: presets.by_name(None), "a configuration name must be a string, got NoneType"),
        (lambda: presets.by_name(b"INTER-BACK", k=2), "a configuration name must be a string, got bytes"),
        (lambda: presets.from_official(architecture=None), "architecture must be a string, got NoneType"),
        (lambda: presets.from_official(mask_type=0), "mask_type must be a string, got int"),
    ],
)
def test_names_that_are_not_strings_are_type_errors(call, message):
    with pytest.raises(TypeError) as info:
        call()
    assert str(info.value) == message
