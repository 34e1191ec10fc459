"""INTER, EXTRA and EXTEND against hand-run references, on every family and both attention backends.

The reference never reads the encoder or a resolved plan: it records how the stock model calls each of
its layers (one stock forward, hooks on the layers), then calls the layers itself in the order the
paper's combinators describe, with masks from ``build_mask`` and positions counted here from each row's
first real token. Each spec below is written out by hand as a composition of layer runs.
"""

import functools
import inspect

import pytest
import torch
from tiny import CONFIGS, tiny_decoder

from nosink import EncoderFromDecoder, parse_spec
from nosink.layerspec import build_mask

FAMILIES = sorted(CONFIGS)
ATTN = ["sdpa", "eager"]

IDS = torch.randint(3, 90, (4, 8), generator=torch.Generator().manual_seed(7))
# a full row, a right-padded row, a left-padded row and a short left-padded row
MASK = torch.tensor([[1] * 8, [1] * 5 + [0] * 3, [0] * 2 + [1] * 6, [0] * 5 + [1] * 3])
REAL = MASK.bool()
POS = (MASK.cumsum(-1) - 1).clamp(min=0)  # counted from each row's first real token, written here


class HandRun:
    """Calls a stock decoder's layers one at a time, as its own forward calls them."""

    def __init__(self, model: torch.nn.Module, attn: str) -> None:
        self.model, self.attn = model, attn
        self.layers = model.layers if hasattr(model, "layers") else model.h
        self.final_norm = model.norm if hasattr(model, "norm") else model.ln_f
        self.calls: dict[int, dict] = {}

        def record(i, module, args, kwargs):
            bound = inspect.signature(module.forward).bind(*args, **kwargs)
            self.calls[i] = dict(bound.arguments)
            return None

        hooks = [
            layer.register_forward_pre_hook(functools.partial(record, i), with_kwargs=True)
            for i, layer in enumerate(self.layers)
        ]
        try:
            with torch.no_grad():
                model(input_ids=IDS, attention_mask=MASK, position_ids=POS, use_cache=False)
        finally:
            for h in hooks:
                h.remove()
        self.embeddings = self.calls[0]["hidden_states"]  # what the stock model feeds its first layer
        config = model.config
        window = getattr(config, "sliding_window", None)
        types = getattr(config, "layer_types", None)
        self.windows = [window if (types is None or types[i] == "sliding_attention") else None for i in range(4)]

    def mask(self, kind: str, layer: int) -> torch.Tensor:
        k = parse_spec(kind).segments[0].kind
        boolean = build_mask(k, MASK, sliding_window=self.windows[layer] if k.is_causal else None)
        if self.attn == "sdpa":
            return boolean
        return torch.zeros(boolean.shape).masked_fill(~boolean, torch.finfo(torch.float32).min)

    def run(self, h: torch.Tensor, kinds: str, layers: list[int]) -> torch.Tensor:
        """Run ``layers`` on ``h``, layer ``layers[i]`` with the mask of kind ``kinds.split()[i]``."""
        for kind, i in zip(kinds.split(), layers, strict=True):
            arguments = dict(self.calls[i])
            extra = arguments.pop("kwargs", {})
            arguments["hidden_states"] = h
            arguments["attention_mask"] = self.mask(kind, i)
            with torch.no_grad():
                out = self.layers[i](**arguments, **extra)
            h = out[0] if isinstance(out, tuple) else out
        return h


# Each reference returns the main stream before the final norm, written as the paper describes it.
def forward_only(r, e):
    return r.run(e, "F F F F", [0, 1, 2, 3])


def inter_back(r, e):
    # F*2 | INTER(R*2): both streams start from the same input and are summed once, after the block.
    x = r.run(e, "F F", [0, 1])
    return r.run(x, "F F", [2, 3]) + r.run(x, "R R", [2, 3])


def two_inters_with_m0b(r, e):
    # INTER(B) | F | INTER(M0B*2): two blocks, a sink mask inside the second.
    x = r.run(e, "F", [0]) + r.run(e, "B", [0])
    x = r.run(x, "F", [1])
    return r.run(x, "F F", [2, 3]) + r.run(x, "M0B M0B", [2, 3])


def two_extras(r, e):
    # F* | EXTRA(B*2) | EXTRA(M0B | R): two branches from the embeddings, each added before the final norm.
    return r.run(e, "F F F F", [0, 1, 2, 3]) + r.run(e, "B B", [0, 1]) + r.run(e, "M0B R", [0, 1])


def extra_under_converted_stack(r, e):
    # EXTRA(M1F*3) | F | INTER(B*2) | R
    x = r.run(e, "F", [0])
    x = r.run(x, "F F", [1, 2]) + r.run(x, "B B", [1, 2])
    return r.run(x, "R", [3]) + r.run(e, "M1F M1F M1F", [0, 1, 2])


def extend_back_bidir(r, e):
    # M0B* | EXTEND(R | B): two more layers on top, both with the last layer's weights.
    return r.run(e, "M0B M0B M0B M0B R B", [0, 1, 2, 3, 3, 3])


def inter_then_extend(r, e):
    # F*2 | INTER(M0B*2) | EXTEND(M0F)
    x = r.run(e, "F F", [0, 1])
    x = r.run(x, "F F", [2, 3]) + r.run(x, "M0B M0B", [2, 3])
    return r.run(x, "M0F", [3])


REFERENCES = {
    "F*": forward_only,
    "F*2 | INTER(R*2)": inter_back,
    "INTER(B) | F | INTER(M0B*2)": two_inters_with_m0b,
    "F* | EXTRA(B*2) | EXTRA(M0B | R)": two_extras,
    "EXTRA(M1F*3) | F | INTER(B*2) | R": extra_under_converted_stack,
    "M0B* | EXTEND(R | B)": extend_back_bidir,
    "F*2 | INTER(M0B*2) | EXTEND(M0F)": inter_then_extend,
}


@functools.cache
def setup(family: str, attn: str) -> tuple[torch.nn.Module, HandRun]:
    model = tiny_decoder(family, attn)
    return model, HandRun(model, attn)


def close(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach()[REAL].abs().max())


@pytest.mark.parametrize("spec", list(REFERENCES))
@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("family", FAMILIES)
def test_forward_equals_the_hand_run_reference(family, attn, spec):
    model, ref = setup(family, attn)
    with torch.no_grad():
        expected = ref.final_norm(REFERENCES[spec](ref, ref.embeddings))
        got = EncoderFromDecoder(model, spec)(IDS, MASK).last_hidden_state
    assert close(got, expected) <= 2e-5, (family, attn, spec)
    if spec != "F*":  # the spec made a difference, so the equality is not vacuous
        assert close(got, ref.final_norm(forward_only(ref, ref.embeddings))) > 1e-4


@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma3_text"])
def test_forward_specs_equal_the_hand_run_references(family, attn):
    # The prefix-tree route: every spec at once, each against its own reference.
    model, ref = setup(family, attn)
    encoder = EncoderFromDecoder(model, "F*")
    with torch.no_grad():
        got = encoder.forward_specs(IDS, MASK, list(REFERENCES))
        for spec, reference in REFERENCES.items():
            expected = ref.final_norm(reference(ref, ref.embeddings))
            assert close(got[str(parse_spec(spec))], expected) <= 2e-5, spec


@pytest.mark.parametrize(
    "spec, streams",
    [
        # the main stream after each step on it and after each merge into it (the hidden_states contract)
        (
            "F*2 | INTER(R*2)",
            lambda r, e: [
                e,
                a := r.run(e, "F", [0]),
                b := r.run(a, "F", [1]),
                c := r.run(b, "F", [2]),
                d := r.run(c, "F", [3]),
                d + r.run(b, "R R", [2, 3]),
            ],
        ),
        (
            "F*3 | EXTRA(B*2) | EXTRA(M0B) | R",
            lambda r, e: [
                e,
                a := r.run(e, "F", [0]),
                b := r.run(a, "F", [1]),
                c := r.run(b, "F", [2]),
                d := r.run(c, "R", [3]),
                f := d + r.run(e, "B B", [0, 1]),
                f + r.run(e, "M0B", [0]),
            ],
        ),
        (
            "INTER(M0B) | F*3 | EXTEND(B)",
            lambda r, e: [
                e,
                a := r.run(e, "F", [0]),
                b := a + r.run(e, "M0B", [0]),
                c := r.run(b, "F", [1]),
                d := r.run(c, "F", [2]),
                f := r.run(d, "F", [3]),
                r.run(f, "B", [3]),
            ],
        ),
    ],
)
@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("family", ["llama", "qwen3", "gpt2"])
def test_hidden_states_follow_the_main_stream_through_merges(family, attn, spec, streams):
    model, ref = setup(family, attn)
    with torch.no_grad():
        out = EncoderFromDecoder(model, spec)(IDS, MASK, output_hidden_states=True)
        expected = streams(ref, ref.embeddings)
    assert len(out.hidden_states) == len(expected)
    for i, (got, want) in enumerate(zip(out.hidden_states, expected, strict=True)):
        assert close(got, want) <= 2e-5, (spec, i)
    with torch.no_grad():
        assert close(ref.final_norm(out.hidden_states[-1]), out.last_hidden_state) <= 1e-6
