"""The pictures say what the code does: mask cells are build_mask's, plan boxes are the plan's steps."""

import re
import xml.etree.ElementTree as ET

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nosink.layerspec import Fork, Kind, Merge, build_mask, parse_spec
from nosink.layerspec.draw import kind_colour, mask_svg, plan_svg

SVG = "{http://www.w3.org/2000/svg}"
kinds = st.builds(Kind, st.sampled_from("FB"), st.none() | st.integers(0, 6)) | st.builds(Kind, st.just("R"))


def cells(svg: str) -> list[list[bool]]:
    rects = [r for r in ET.fromstring(svg).iter(f"{SVG}rect") if r.get("class") in ("attend", "blocked")]
    n = int(len(rects) ** 0.5)
    assert n * n == len(rects)
    xs = sorted({float(r.get("x")) for r in rects})
    ys = sorted({float(r.get("y")) for r in rects})
    grid = [[False] * n for _ in range(n)]
    for r in rects:
        grid[ys.index(float(r.get("y")))][xs.index(float(r.get("x")))] = r.get("class") == "attend"
    return grid


@settings(max_examples=60, deadline=None)
@given(kind=kinds, row=st.lists(st.booleans(), min_size=1, max_size=9), window=st.none() | st.integers(1, 4))
def test_mask_cells_are_build_masks_matrix(kind, row, window):
    svg = mask_svg(kind, attention_mask=[int(v) for v in row], sliding_window=window)
    expected = build_mask(kind, torch.tensor([row], dtype=torch.long), window)[0, 0].tolist()
    assert cells(svg) == expected


def test_mask_by_name_equals_mask_by_kind_and_is_labelled():
    svg = mask_svg("m0b", tokens=["<s>", "A", "b"])
    assert svg == mask_svg(Kind("B", sink=0), tokens=["<s>", "A", "b"])
    assert "&lt;s&gt;" in svg and "<title>M0B mask</title>" in svg
    assert kind_colour(Kind("B", sink=0)) in svg


@pytest.mark.parametrize("bad", ["M0B | B", "F | B", "INTER(B)"])
def test_mask_svg_refuses_more_than_one_kind(bad):
    with pytest.raises(ValueError, match="one layer kind"):
        mask_svg(bad)


def test_mask_svg_refuses_labels_that_do_not_fit():
    with pytest.raises(ValueError, match="3 token labels for 4 positions"):
        mask_svg("F", attention_mask=[1, 1, 1, 0], tokens=["a", "b", "c"])


@pytest.mark.parametrize(
    ("spec", "depth"),
    [
        ("F* | B*2", 6),
        ("F* | INTER(B*2)", 6),
        ("F* | INTER(R) | INTER(R)", 6),
        ("F* | EXTRA(B*2)", 4),
        ("F* | EXTEND(R*2)", 4),
        ("EXTRA(M0B*2) | F* | INTER(R*2) | EXTEND(B)", 8),
    ],
)
def test_plan_boxes_are_the_plans_layer_steps(spec, depth):
    plan = parse_spec(spec).resolve(depth)
    root = ET.fromstring(plan_svg(plan))
    labels = [
        t.text for t in root.iter(f"{SVG}text") if t.text and re.fullmatch(r"L\d+ \S+( \(again\))?", t.text.strip())
    ]
    expected = [f"L{s.layer} {s.kind}" + (" (again)" if s.role == "extend" else "") for s in plan.layer_steps]
    assert sorted(labels) == sorted(expected)
    merges = [c for c in root.iter(f"{SVG}circle") if c.get("class") == "merge"]
    assert len(merges) == sum(isinstance(s, Merge) for s in plan.steps)
    streams = {s.target for s in plan.steps if isinstance(s, Fork)} | {"main"}
    names = {t.text for t in root.iter(f"{SVG}text")}
    assert streams <= names
