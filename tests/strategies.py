"""Hypothesis strategies for layer specs and padded batches."""

from hypothesis import strategies as st

from nosink.layerspec import Block, Kind, Segment, Spec

kinds = st.one_of(
    st.sampled_from([Kind("F"), Kind("B"), Kind("R")]),
    st.builds(Kind, st.sampled_from(["F", "B"]), st.integers(0, 12)),
)
counts = st.integers(1, 6)
segments = st.builds(Segment, kinds, counts)


@st.composite
def specs(draw, allow_fill: bool = True) -> Spec:
    """Valid specs: plain segments, INTER/EXTRA blocks, an optional EXTEND last, at most one fill."""
    items: list = []
    for _ in range(draw(st.integers(1, 4))):
        what = draw(st.sampled_from(["plain", "plain", "inter", "extra"]))
        if what == "plain":
            items.append(draw(segments))
        else:
            op = "INTER" if what == "inter" else "EXTRA"
            items.append(Block(op, tuple(draw(st.lists(segments, min_size=1, max_size=3)))))
    if allow_fill and draw(st.booleans()):
        # Put the one fill segment in a plain position or inside an INTER block.
        where = draw(st.integers(0, len(items)))
        fill = Segment(draw(kinds), None)
        target = items[where] if where < len(items) else None
        if isinstance(target, Block) and target.op == "INTER" and draw(st.booleans()):
            items[where] = Block("INTER", (*target.segments, fill))
        else:
            items.insert(where, fill)
    if draw(st.booleans()):
        items.append(Block("EXTEND", tuple(draw(st.lists(segments, min_size=1, max_size=2)))))
    return Spec(tuple(items))


@st.composite
def specs_with_depth(draw):
    """A valid spec and a depth it resolves against."""
    spec = draw(specs())
    placed = sum(
        seg.count or 0
        for item in spec.items
        if not (isinstance(item, Block) and item.op in ("EXTRA", "EXTEND"))
        for seg in (item.segments if isinstance(item, Block) else (item,))
    )
    extra = max(
        (sum(s.count for s in item.segments) for item in spec.items if isinstance(item, Block) and item.op == "EXTRA"),
        default=0,
    )
    has_fill = any(seg.is_fill for seg in spec.segments)
    depth = max(placed, extra, 1)
    if has_fill:
        depth += draw(st.integers(0, 5))
    elif depth != placed:  # only EXTRA is deeper than the stack: pad the stack with forward layers
        spec = Spec((Segment(Kind("F"), depth - placed), *spec.items))
    return spec, depth


_NAMES = {"F": ["F", "FWD"], "B": ["B", "BIDIR"], "R": ["R", "BACK"]}
_SPACES = st.sampled_from(["", "", " ", "  ", "\t", "\n"])


@st.composite
def _cased(draw, name: str) -> str:
    """``name`` with each letter's case drawn (names are case-insensitive)."""
    return "".join(ch.lower() if draw(st.booleans()) else ch for ch in name)


@st.composite
def printed(draw, spec: Spec) -> str:
    """Valid text for ``spec``, printed in any of its spellings: aliases (FWD, BIDIR, BACK), any case,
    any spacing between tokens, ``X`` or ``X*1`` for one layer, ``X*`` for a fill."""

    def sp() -> str:
        return draw(_SPACES)

    def kind(k: Kind) -> str:
        name = draw(st.sampled_from(_NAMES[k.direction])) if k.sink is None else f"M{k.sink}{k.direction}"
        return draw(_cased(name))

    def segment(seg: Segment) -> str:
        if seg.count is None:
            return kind(seg.kind) + sp() + "*"
        if seg.count == 1 and draw(st.booleans()):
            return kind(seg.kind)
        return kind(seg.kind) + sp() + "*" + sp() + str(seg.count)

    def segments(segs) -> str:
        return (sp() + "|" + sp()).join(segment(s) for s in segs)

    def item(it) -> str:
        if isinstance(it, Segment):
            return segment(it)
        return draw(_cased(it.op)) + sp() + "(" + sp() + segments(it.segments) + sp() + ")"

    return sp() + (sp() + "|" + sp()).join(item(it) for it in spec.items) + sp()


@st.composite
def spec_texts(draw) -> tuple[Spec, str]:
    """A valid spec and one valid text that spells it."""
    spec = draw(specs())
    return spec, draw(printed(spec))


@st.composite
def spec_texts_with_depth(draw) -> tuple[Spec, str, int]:
    """A valid spec, a text that spells it, and a depth it resolves against."""
    spec, depth = draw(specs_with_depth())
    return spec, draw(printed(spec)), depth


# Spec-like text: tokens of the language and a few that do not belong, glued with random spacing. Almost
# none of it parses (about 1 in 100): it tests malformed input; spec_texts gives valid text.
_TOKENS = [
    "F",
    "B",
    "R",
    "f",
    "fwd",
    "BIDIR",
    "back",
    "M0B",
    "M3F",
    "m1b",
    "M",
    "M0",
    "M2R",
    "Q",
    "MX",
    "*",
    "|",
    "(",
    ")",
    "INTER",
    "EXTRA",
    "extend",
    "0",
    "1",
    "7",
    "12",
    "99999",
    "-",
    ".",
    "#",
    "é",
    "\t",
    "\n",
]
spec_like_text = st.lists(st.tuples(st.sampled_from(_TOKENS), st.sampled_from(["", "", " ", "  "])), max_size=12).map(
    lambda parts: "".join(tok + space for tok, space in parts)
)


@st.composite
def padded_rows(draw, max_len: int = 7):
    """A batch of rows (lengths >= 0), a padding side and a padded length."""
    lengths = draw(st.lists(st.integers(0, max_len), min_size=1, max_size=4))
    extra = draw(st.integers(0, 3))
    side = draw(st.sampled_from(["left", "right"]))
    return lengths, max(lengths) + extra, side
