"""Parsing, printing and resolving specs; the table of invalid specs."""

import pickle

import pytest

from nosink.layerspec import Block, Fork, Kind, LayerStep, Merge, Segment, Spec, SpecError, parse_spec, resolve
from nosink.layerspec.plan import MAX_DEPTH, STEPS_PER_LAYER

F, B, R = Kind("F"), Kind("B"), Kind("R")


@pytest.mark.parametrize(
    "text, canonical",
    [
        ("F*12 | B*7 | M0B*3", "F*12 | B*7 | M0B*3"),
        ("f*12|b*7|m0b*3", "F*12 | B*7 | M0B*3"),
        ("FWD* | BIDIR*2 | BACK", "F* | B*2 | R"),
        ("fwd*|bidir*1", "F* | B"),
        ("  F *\t12\n| R * 3  ", "F*12 | R*3"),
        ("F*007", "F*7"),
        ("M12F*2 | m3b", "M12F*2 | M3B"),
        ("F* | inter(B*2 | R)", "F* | INTER(B*2 | R)"),
        ("F* | INTER(R) | INTER(R)", "F* | INTER(R) | INTER(R)"),
        ("Extra(R*3) | F*", "EXTRA(R*3) | F*"),
        ("F* | EXTEND(B*2)", "F* | EXTEND(B*2)"),
        ("INTER(B*)", "INTER(B*)"),
    ],
)
def test_parse_and_canonical_form(text, canonical):
    spec = parse_spec(text)
    assert str(spec) == canonical
    assert parse_spec(canonical) == spec
    assert eval(repr(spec)) == spec  # repr is valid Python


def test_parsed_values():
    assert parse_spec("F* | B*7 | M0B*3") == Spec((Segment(F, None), Segment(B, 7), Segment(Kind("B", sink=0), 3)))
    assert parse_spec("F*2 | INTER(R)") == Spec((Segment(F, 2), Block("INTER", (Segment(R, 1),))))
    assert hash(parse_spec("F*2")) == hash(parse_spec("fwd*2"))


# (spec, the start of the message, column or None, a fragment of what is expected)
INVALID = [
    ("F*12 | Q*7", "unknown layer kind 'Q'", 8, "one of F, B, R, M<n>F, M<n>B, INTER(, EXTRA(, EXTEND("),
    ("", "empty spec", 1, "at least one layer"),
    ("   ", "empty spec", 4, "at least one layer"),
    ("F*0", "layer count '0' is not positive", 3, "at least 1"),
    ("F*-3", "unexpected character '-'", 3, "whole number"),
    ("F*2.5", "unexpected character '.'", 4, "whole number"),
    ("F*5000", "layer count '5000' is too large", 3, "at most 4096"),
    ("F* | B*", "a second count-less segment", 6, "only one segment may fill"),
    ("F* | INTER(B*)", "a second count-less segment", 6, "only one segment may fill"),
    ("EXTEND(B) | F*", "EXTEND(...) must be the last item", 1, "nothing after EXTEND"),
    ("F* | EXTEND(B) | EXTRA(R)", "EXTEND(...) must be the last item", 6, "nothing after EXTEND"),
    ("F* | INTER(EXTRA(B))", "EXTRA(...) cannot be nested inside INTER(...)", 12, "one of F, B, R"),
    ("F* | EXTEND(INTER(B))", "INTER(...) cannot be nested inside EXTEND(...)", 13, "one of F, B, R"),
    ("F* | INTER()", "INTER() is empty", 12, "one of F, B, R"),
    ("F* | EXTRA(B*)", "a count-less segment cannot go inside EXTRA(...)", 12, "a count"),
    ("F* | EXTEND(R*)", "a count-less segment cannot go inside EXTEND(...)", 13, "a count"),
    ("F* | INTER B", "INTER must be followed by '('", 12, "'(' after INTER"),
    ("F* | INTER(B", "unexpected end of spec inside INTER(...)", 13, "'|' or ')'"),
    ("F* | INTER(B R)", "unexpected 'R' inside INTER(...)", 14, "'|' or ')'"),
    ("F*3 B", "unexpected 'B'", 5, "'|' between segments"),
    ("F*3 |", "missing layer kind", 6, "one of F, B, R"),
    ("| F", "missing layer kind", 1, "one of F, B, R"),
    ("F || B", "missing layer kind", 4, "one of F, B, R"),
    ("(F)", "unexpected '('", 1, "one of F, B, R"),
    ("F)", "unexpected ')'", 2, "'|' between segments"),
    ("F**2", "unexpected '*' after '*'", 3, "a count"),
    ("F*B", "unexpected 'B' after '*'", 3, "a count"),
    ("3*F", "unexpected '3'", 1, "one of F, B, R"),
    ("M0", "sink mask 'M0' needs F or B after the number", 1, "M<n>F or M<n>B"),
    ("M0R", "sink mask 'M0R' has unknown direction 'R'", 1, "M<n>F or M<n>B"),
    ("MB", "unknown layer kind 'MB'", 1, "one of F, B, R"),
    ("M9999999999B", "sink size '9999999999' is too large", 1, "at most 1000000"),
    ("F # comment", "unexpected character '#'", 3, "'|'"),
    ("F* | B*2 | é", "unexpected character 'é'", 12, "one of F, B, R"),
    ("INTER", "INTER must be followed by '('", 6, "'(' after INTER"),
    ("F* | FORWARD", "unknown layer kind 'FORWARD'", 6, "one of F, B, R"),
]


@pytest.mark.parametrize("text, problem, column, expected", INVALID)
def test_invalid_specs(text, problem, column, expected):
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    err = info.value
    assert err.problem.startswith(problem), err.problem
    assert err.column == column
    assert expected in (err.expected or "")
    message = str(err)
    assert f"at column {column}" in message
    # The caret sits under the column, after the two-space indent.
    spec_line, caret_line = message.splitlines()[1:3]
    assert caret_line == "  " + " " * (column - 1) + "^"
    assert spec_line.startswith("  ")


def test_error_message_reads_as_documented():
    with pytest.raises(SpecError) as info:
        parse_spec("F*12 | Q*7")
    assert str(info.value) == (
        "unknown layer kind 'Q' at column 8; expected one of F, B, R, M<n>F, M<n>B, INTER(, EXTRA(, EXTEND(\n"
        "  F*12 | Q*7\n"
        "         ^"
    )


def test_long_spec_is_shown_as_a_window_around_the_column():
    text = " | ".join(["F*2"] * 40) + " | Q"
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    spec_line, caret_line = str(info.value).splitlines()[1:3]
    assert len(spec_line) < 90
    assert spec_line.startswith("  ...")
    assert spec_line[caret_line.index("^")] == "Q"


def test_error_pickles_with_its_fields():
    with pytest.raises(SpecError) as info:
        parse_spec("F | Q")
    again = pickle.loads(pickle.dumps(info.value))
    assert (again.problem, again.column, str(again)) == (info.value.problem, 5, str(info.value))


def test_non_string_is_a_type_error():
    with pytest.raises(TypeError, match="a layer spec is a string"):
        parse_spec(12)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Kind("X"), "unknown layer direction"),
        (lambda: Kind("R", sink=0), "not R"),
        (lambda: Kind("B", sink=-1), "sink size -1"),
        (lambda: Segment(F, 0), "layer count 0"),
        (lambda: Segment(F, True), "layer count True"),
        (lambda: Block("INTER", ()), "INTER() is empty"),
        (lambda: Block("LOOP", (Segment(F),)), "unknown combinator"),
        (lambda: Block("EXTRA", (Segment(F, None),)), "count-less segment cannot go inside EXTRA"),
        (lambda: Spec(()), "empty spec"),
        (lambda: Spec((Segment(F, None), Segment(B, None))), "a second count-less segment"),
        (lambda: Spec((Block("EXTEND", (Segment(B),)), Segment(F))), "EXTEND(...) must be the last"),
    ],
)
def test_values_built_directly_are_checked_too(build, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


# ---------------------------------------------------------------- resolving


def kinds(text: str, depth: int) -> list[str]:
    return [str(k) for k in parse_spec(text).resolve(depth).stack]


def test_resolve_inplace():
    assert kinds("F* | B*2 | M0B", 5) == ["F", "F", "B", "B", "M0B"]
    assert kinds("F*2 | B* | R", 5) == ["F", "F", "B", "B", "R"]
    assert kinds("F* | B*5", 5) == ["B"] * 5  # the fill may be empty


def test_resolve_inter_runs_both_streams_and_sums_once():
    plan = parse_spec("F* | INTER(B | R)").resolve(4)
    assert plan.steps == (
        LayerStep(0, F, "main", "stack"),
        LayerStep(1, F, "main", "stack"),
        Fork("main", "inter"),
        LayerStep(2, F, "main", "stack"),
        LayerStep(3, F, "main", "stack"),
        LayerStep(2, B, "inter", "inter"),
        LayerStep(3, R, "inter", "inter"),
        Merge("inter", "main"),
    )


def test_resolve_two_inters_sum_after_each():
    plan = parse_spec("F*2 | INTER(R) | INTER(R)").resolve(4)
    assert [type(s).__name__ for s in plan.steps].count("Merge") == 2


def test_resolve_extra_and_extend():
    plan = parse_spec("F* | EXTRA(R*2) | EXTEND(B*2)").resolve(3)
    assert plan.steps == (
        Fork("main", "extra0"),
        LayerStep(0, R, "extra0", "extra"),
        LayerStep(1, R, "extra0", "extra"),
        LayerStep(0, F, "main", "stack"),
        LayerStep(1, F, "main", "stack"),
        LayerStep(2, F, "main", "stack"),
        LayerStep(2, B, "main", "extend"),
        LayerStep(2, B, "main", "extend"),
        Merge("extra0", "main"),
    )
    assert not hasattr(plan, "kinds")  # removed: nothing read it


@pytest.mark.parametrize(
    "text, depth, message",
    [
        ("F*12 | B*7", 22, "spec adds up to 19 layers but the model has 22"),
        ("F*12 | B*7", 18, "spec adds up to 19 layers but the model has 18"),
        ("F* | B*30", 22, "spec needs at least 30 layers besides its fill segment but the model has 22"),
        ("F* | EXTRA(B*30)", 22, "EXTRA(B*30) runs the decoder's first 30 layers but the model has 22"),
        ("F*", 0, "model depth must be a positive integer"),
    ],
)
def test_depth_mismatch(text, depth, message):
    with pytest.raises(SpecError) as info:
        parse_spec(text).resolve(depth)
    assert info.value.problem.startswith(message)
    assert info.value.spec == (str(parse_spec(text)) if depth else "")


def test_plan_table_is_readable():
    table = parse_spec("F* | M0B").resolve(2).table()
    assert table.splitlines() == [
        "step  stream  layer  kind  role",
        "   0  main        0  F     stack",
        "   1  main        1  M0B   stack",
    ]


# ---------------------------------------------------------------- one rule, one place


def test_the_parser_reports_the_value_classes_rules_at_their_column():
    # The value classes own the rule (range and wording); the parser quotes the text as typed and adds the column.
    for text, value_error, column in [
        ("F | B*0", lambda: Segment(B, 0), 7),
        ("F | B*5000", lambda: Segment(B, 5000), 7),
        ("M2000000B | F", lambda: Kind("B", sink=2_000_000), 1),
        ("F* | EXTEND(B | R*)", lambda: Block("EXTEND", (Segment(B), Segment(R, None))), 17),
    ]:
        with pytest.raises(SpecError) as parsed:
            parse_spec(text)
        with pytest.raises(SpecError) as built:
            value_error()
        assert parsed.value.column == column and built.value.column is None
        assert parsed.value.expected == built.value.expected
        words = lambda problem: problem.replace("'", "").split()  # noqa: E731  the parser quotes the digits
        assert words(parsed.value.problem) == words(built.value.problem)


def test_a_count_beyond_int_range_is_quoted_as_typed():
    with pytest.raises(SpecError) as info:
        parse_spec("F*" + "9" * 30)
    assert info.value.problem == f"layer count '{'9' * 24}...' is too large" and info.value.expected == "at most 4096"


# ---------------------------------------------------------------- bounds (issue 10, item 3)


def test_a_huge_depth_fails_fast_naming_the_limit():
    with pytest.raises(SpecError) as info:
        resolve(parse_spec("F*"), 1_000_000_000)
    assert info.value.problem == "model depth 1000000000 is more than nosink supports"
    assert info.value.expected == f"at most {MAX_DEPTH} layers" == "at most 4096 layers"
    assert len(parse_spec("F*").resolve(MAX_DEPTH).steps) == MAX_DEPTH  # the limit itself is accepted


def test_a_huge_extend_is_refused_before_its_steps_are_built():
    spec = parse_spec("F* | EXTEND(" + " | ".join(["B*4096"] * 200) + ")")
    with pytest.raises(SpecError) as info:
        spec.resolve(30)
    assert info.value.problem == "spec takes 819230 steps on a model of 30 layers, more than nosink runs"
    assert info.value.expected == f"at most {STEPS_PER_LAYER} steps per layer (960 here)"


def test_the_step_limit_counts_every_step_and_admits_the_paper_configurations():
    # 1 layer, 31 extended: 32 steps is the limit, 33 is over it.
    assert len(parse_spec("F | EXTEND(B*31)").resolve(1).steps) == STEPS_PER_LAYER
    with pytest.raises(SpecError, match="spec takes 33 steps on a model of 1 layers"):
        parse_spec("F | EXTEND(B*32)").resolve(1)
    # INTER's fork and merge count: F | INTER(...) on 2 layers is 1 + 1 + 1 + 1 + 1 = 5 steps.
    assert len(parse_spec("F | INTER(R)").resolve(2).steps) == 5
    deep = parse_spec("F* | EXTRA(B*22) | INTER(B*22) | EXTEND(R*5)").resolve(22)
    assert len(deep.steps) == 22 + 24 + 24 + 5


# ---------------------------------------------------------------- sliding windows in the plan


def test_forward_steps_keep_their_layer_window_and_converted_steps_drop_it():
    plan = parse_spec("EXTRA(F | R) | F | M0F | INTER(B | F) | EXTEND(F | B)").resolve(4, windows=(3, None, 5, 7))
    assert [(s.layer, str(s.kind), s.role, s.window) for s in plan.layer_steps] == [
        (0, "F", "extra", 3),
        (1, "R", "extra", None),
        (0, "F", "stack", 3),
        (1, "M0F", "stack", None),  # a sink mask converts the layer: no window
        (2, "F", "stack", 5),  # INTER's forward copy is the stock layer
        (3, "F", "stack", 7),
        (2, "B", "inter", None),
        (3, "F", "inter", 7),
        (3, "F", "extend", 7),  # EXTEND reuses the last layer, window included
        (3, "B", "extend", None),
    ]
    assert all(s.window is None for s in parse_spec("EXTRA(F) | F*").resolve(4).layer_steps)


def test_plan_table_shows_windows_only_when_there_are_some():
    windowed = parse_spec("F* | B").resolve(2, windows=(4096, None)).table()
    assert windowed.splitlines() == [
        "step  stream  layer  kind  role   window",
        "   0  main        0  F     stack  4096",
        "   1  main        1  B     stack  -",
    ]
    assert parse_spec("F* | B").resolve(2, windows=(None, None)).table() == parse_spec("F* | B").resolve(2).table()


@pytest.mark.parametrize(
    "windows, message",
    [((3,), "windows has 1 entries for a model of 2 layers"), ((3, 0), "a sliding window must be a positive")],
)
def test_bad_windows_are_value_errors(windows, message):
    with pytest.raises(ValueError, match=message):
        parse_spec("F*").resolve(2, windows=windows)


# ---------------------------------------------------------------- terminal escapes (issue 10, item 12)


def test_control_characters_are_escaped_in_messages_and_the_caret_stays_under_its_character():
    with pytest.raises(SpecError) as info:
        parse_spec("F* | \x1b]0;pwned\x07")
    message = str(info.value)
    assert "\x1b" not in message and "\x07" not in message
    assert message.splitlines() == [
        "unexpected character '\\x1b' at column 6; expected one of F, B, R, M<n>F, M<n>B, INTER(, EXTRA(, "
        "EXTEND(, '|', '*' or a count",
        "  F* | \\x1b]0;pwned\\x07",
        "       ^",
    ]


def test_escapes_before_the_column_move_the_caret_with_them():
    # A value error placed after control characters (as from a spec read out of a file).
    err = SpecError("bad", "\x1b\x07 Q", 4)
    spec_line, caret_line = str(err).splitlines()[1:]
    assert spec_line == "  \\x1b\\x07 Q"
    assert spec_line[caret_line.index("^")] == "Q"
    long = SpecError("bad", "\x1b" * 80 + " Q", 82)  # shown as a window: the caret still finds the Q
    spec_line, caret_line = str(long).splitlines()[1:]
    assert "\x1b" not in str(long) and spec_line[caret_line.index("^")] == "Q"
