"""Attention-sink diagnostics (paper section 3.4, appendices C and F) and spec suggestion.

- :func:`attention_maps`: the mean attention map of each layer step (heads and texts averaged).
- :func:`sink_profile`: per layer step, the share of attention that falls on each of the first
  positions; a layer is an attention-sink layer when the share on the first token passes a threshold.
- :func:`suggest_spec`: a MASK0&BIDIR spec proposed from a model's sink profile, to be confirmed
  with a small sweep over its neighbours (:func:`neighbours`) rather than a full grid.
- :func:`candidate_specs` and :func:`select_spec`: a second, cheap stage: a few specs read off the
  profile, scored on a small sample of a task's choosing split in one pass, the best one kept.
- :func:`choose_sink_token`: which first token the model treats as its sink (a BOS token usually, not always).
- :func:`plot_attention_grid` and :func:`plot_sink_profiles`: the figures.

:func:`attention_maps` cuts the texts to a common length (the shortest text's, at most
``max_tokens``) so that maps of different texts line up position by position, as in the paper's
figures. :func:`sink_profile` reads each text at its own length (at most ``max_tokens``; shorter
texts padded and masked) and averages the per-text shares, so that its answer does not hang on the
shortest text profiled.
"""

from __future__ import annotations

import csv
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nosink.layerspec import Spec, as_spec, presets
from nosink.models import EncoderFromDecoder
from nosink.models.texts import check_texts, sink_ids, tokenize

__all__ = [
    "K0_SHARE",
    "MASS_SHARES",
    "LayerSinks",
    "START_TOKENS",
    "Selection",
    "SinkChoice",
    "Suggestion",
    "attention_maps",
    "candidate_specs",
    "choose_sink_token",
    "neighbours",
    "plot_attention_grid",
    "plot_sink_profiles",
    "select_spec",
    "sink_candidates",
    "sink_profile",
    "suggest_spec",
    "write_profile",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LayerSinks:
    """The sink statistics of one layer step."""

    step: int  # index among the plan's layer steps
    layer: int  # decoder layer
    kind: str
    role: str  # stack, inter, extra or extend
    shares: tuple[float, ...]  # share of attention on positions 0, 1, ..., m-1 (queries after them)
    is_sink: bool  # shares[0] >= threshold

    def row(self) -> dict[str, Any]:
        """A flat dict for CSV/JSON."""
        out = {k: v for k, v in asdict(self).items() if k != "shares"}
        out.update({f"share_pos{i}": round(s, 4) for i, s in enumerate(self.shares)})
        return out


def _rows(encoder: EncoderFromDecoder, texts: Sequence[str] | str) -> tuple[list[str], list[list[int]]]:
    texts, _ = check_texts(texts, "texts")
    if not texts:
        raise ValueError("attention diagnostics need at least one text")
    if encoder.tokenizer is None:
        raise ValueError("attention diagnostics need the encoder's tokenizer")
    tokens = tokenize(encoder.tokenizer, texts, sink=encoder.sink_ids())
    return texts, [p + t for p, t in zip(tokens.prefix_ids, tokens.text_ids, strict=True)]


def profile_ready(encoder: EncoderFromDecoder, texts: Sequence[str], positions: int = 3) -> list[str]:
    """The ``texts`` that :func:`sink_profile` can read at ``positions``: more than that many tokens with the sink
    token (a short NER sentence such as ``"Leeds )"`` has no query after the profiled positions)."""
    if not texts:
        return []
    kept, rows = _rows(encoder, texts)
    return [t for t, r in zip(kept, rows, strict=True) if len(r) > positions]


def _batch(encoder: EncoderFromDecoder, texts: Sequence[str] | str, max_tokens: int) -> torch.Tensor:
    texts, rows = _rows(encoder, texts)
    length = min(max_tokens, *(len(r) for r in rows))
    if length < 2:
        raise ValueError("each text needs at least two tokens (with the sink token) for attention maps")
    shortest = min(range(len(rows)), key=lambda i: len(rows[i]))
    if length < max_tokens:
        logger.info("texts cut to %d tokens, the length of text %d: %r", length, shortest, texts[shortest][:60])
    return torch.tensor([r[:length] for r in rows], dtype=torch.long)  # (N, T): same length, no padding


def attention_maps(
    encoder: EncoderFromDecoder, texts: Sequence[str], max_tokens: int = 32
) -> list[tuple[Any, np.ndarray]]:
    """Each layer step with its attention map averaged over heads and texts: ``(step, (T, T) array)``.

    Raises:
        ValueError: for no texts, no tokenizer, or texts under two tokens.
    """
    ids = _batch(encoder, texts, max_tokens)
    return [(step, w.float().mean(dim=(0, 1)).cpu().numpy()) for step, w in encoder.attention_weights(ids)]


def sink_profile(
    encoder: EncoderFromDecoder,
    texts: Sequence[str],
    positions: int = 3,
    threshold: float = 0.5,
    max_tokens: int = 32,
    *,
    batch_size: int = 32,
) -> list[LayerSinks]:
    """Per layer step, the share of attention on each of the first ``positions`` tokens.

    Each text is read at its own length (its first ``max_tokens`` tokens, the sink token included);
    texts of a batch are padded and masked, which changes nothing they attend to. For one text, the
    share on position p averages, over heads and over the queries after p, the weight that query puts
    on key p; the profile is the mean of the texts' shares, each text counting once. So the profile
    of a set of texts is the mean of their one-text profiles, and a short text joining the set does
    not cut the others. A step is a sink layer when its share on position 0 is at least ``threshold``.

    Args:
        encoder: the encoder whose plan is profiled (``F*`` for :func:`suggest_spec`).
        texts: the texts (a single string is one text).
        positions: how many first positions get a share (0 is the sink token where the model has one).
        threshold: the first-token share from which a step counts as a sink layer.
        max_tokens: at most this many tokens of each text.
        batch_size: texts per forward pass (memory only: the profile is the same for any value).

    Raises:
        ValueError: for no texts, no tokenizer, ``positions`` or ``batch_size`` under 1, or a text of
            at most ``positions`` tokens (it has no query after the last profiled position).
    """
    if positions < 1:
        raise ValueError(f"positions must be at least 1, got {positions}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    texts, rows = _rows(encoder, texts)
    rows = [r[:max_tokens] for r in rows]
    short = [i for i, r in enumerate(rows) if len(r) <= positions]
    if short:
        i = short[0]
        raise ValueError(
            f"{len(short)} text(s) have at most {positions} tokens with the sink token, e.g. text {i} "
            f"({len(rows[i])} tokens: {texts[i][:60]!r}); shares on the first {positions} positions need a "
            "query after them: drop such texts, or lower positions"
        )
    totals: torch.Tensor | None = None  # (steps, positions): per-text shares summed over texts
    steps: list[Any] = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        width = max(len(r) for r in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for b, r in enumerate(chunk):
            ids[b, : len(r)] = torch.tensor(r, dtype=torch.long)
            ids[b, len(r) :] = r[0]  # any valid id: masked out
            mask[b, : len(r)] = 1
        valid = mask.bool()
        sums = []
        weights = encoder.attention_weights(ids, mask)
        steps = [step for step, _ in weights]
        for _, w in weights:
            mean = w.float().mean(dim=1).cpu()  # (B, T, T), heads averaged
            per_pos = []
            for p in range(positions):
                queries = valid[:, p + 1 :]  # the real queries after p, per text
                on_p = torch.where(queries, mean[:, p + 1 :, p], 0.0).sum(1) / queries.sum(1)  # (B,)
                per_pos.append(on_p.sum())
            sums.append(torch.stack(per_pos))
        chunk_totals = torch.stack(sums).double()
        totals = chunk_totals if totals is None else totals + chunk_totals
    assert totals is not None
    out = []
    for i, step in enumerate(steps):
        shares = tuple(float(x) for x in totals[i] / len(rows))
        out.append(LayerSinks(i, step.layer, str(step.kind), step.role, shares, shares[0] >= threshold))
    return out


# Special tokens that start a text or a turn: candidates for the sink token beside the tokenizer's BOS and EOS.
START_TOKENS = ("<|im_start|>", "<start_of_turn>", "<|begin_of_text|>", "<|startoftext|>", "<s>", "<bos>")


@dataclass(frozen=True)
class SinkChoice:
    """Which first token a model treats as its attention sink (:func:`choose_sink_token`)."""

    sink_token: str  # the value for an encoder's ``sink_token``: ``"auto"`` when the tokenizer's BOS token won
    masses: dict[str, float]  # each candidate's sink mass: its share of attention, averaged over the layers
    texts: int  # texts profiled with each candidate


def sink_candidates(tokenizer: Any) -> list[str]:
    """The sink tokens :func:`choose_sink_token` tries: ``"auto"`` if the tokenizer has a BOS token, then those of
    :data:`START_TOKENS` that are special tokens of the tokenizer, then its EOS token (each once; the BOS token is
    ``"auto"``). A text that merely tokenizes to ``<s>`` is not a candidate: only the tokenizer's special tokens."""
    bos = getattr(tokenizer, "bos_token", None)
    special = set(getattr(tokenizer, "all_special_tokens", []))
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    special |= {str(added) for added in decoder.values() if getattr(added, "special", False)}
    out = ["auto"] if bos else []
    for token in (*START_TOKENS, getattr(tokenizer, "eos_token", None)):
        if isinstance(token, str) and token != bos and token in special and token not in out:
            out.append(token)
    return out


def choose_sink_token(
    encoder: EncoderFromDecoder,
    texts: Sequence[str],
    candidates: Sequence[str] | None = None,
    max_tokens: int = 32,
    tolerance: float = 0.02,
) -> SinkChoice:
    """The candidate first token on which the model puts the most attention: its attention sink.

    MASK0 hides the sink and Token Prepending puts its placeholder after it: both assume that the first token is
    one. A BOS token usually is, but not always: Qwen2.5-Coder-0.5B gives ``<|endoftext|>`` (the BOS token of its
    GGUF conversion) 4-24% of its attention in the middle layers and ``<|im_start|>`` 29-56%
    (``benchmarks/results/prepend/``). Each candidate is put first and the stock model (``F*``, over the same
    weights) profiled on ``texts`` (:func:`sink_profile`, the first position); a candidate's mass is its share
    averaged over the layers. The first candidate within ``tolerance`` of the largest mass wins: in the default
    order, the BOS token, then turn-start tokens, then the EOS token (on Qwen2.5-Coder-0.5B ``<|im_start|>``
    and ``<|im_end|>`` both take 0.468; a few texts do not tell such candidates apart).

    Args:
        encoder: an encoder of the model (its decoder and tokenizer are used; its spec and sink token are not).
        texts: the texts to profile, each of at least one token.
        candidates: ``sink_token`` values to try; by default :func:`sink_candidates` of the tokenizer. A value
            that gives no token (``"auto"`` for a tokenizer without BOS token, ``"none"``) is not tried: the first
            token of the text would be the sink.
        max_tokens: at most this many tokens of each text.
        tolerance: how far under the largest mass an earlier candidate may be and still win.

    Raises:
        ValueError: for no texts, no tokenizer, or no candidate (a tokenizer without BOS, EOS or turn-start
            token: pass ``sink_token`` yourself).
    """
    if encoder.tokenizer is None:
        raise ValueError("choosing a sink token needs the encoder's tokenizer")
    names = list(dict.fromkeys(candidates)) if candidates is not None else sink_candidates(encoder.tokenizer)
    names = [name for name in names if sink_ids(encoder.tokenizer, name)]  # "auto" without a BOS token: none
    if not names:
        raise ValueError(
            "no candidate sink token: the tokenizer has no BOS, EOS or turn-start token; pass sink_token yourself"
        )
    masses = {}
    for name in names:
        probe = EncoderFromDecoder.from_model(encoder.decoder, "F*", encoder.tokenizer, sink_token=name)
        profile = sink_profile(probe, texts, positions=1, max_tokens=max_tokens)
        masses[name] = sum(layer.shares[0] for layer in profile) / len(profile)
    best = next(name for name in names if masses[name] >= max(masses.values()) - tolerance)
    logger.info("sink token %r: attention share %s", best, {k: round(v, 3) for k, v in masses.items()})
    return SinkChoice(best, masses, len(texts))


def write_profile(profile: Sequence[LayerSinks], path: str | Path) -> Path:
    """Write a profile as CSV."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [p.row() for p in profile]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@dataclass(frozen=True)
class Suggestion:
    """A MASK0&BIDIR spec proposed from a sink profile, and why."""

    spec: Spec
    k: int
    k0: int
    reason: str


K0_SHARE = 0.2
"""The share of the converted layers that :func:`suggest_spec` has hide the sink (k0 = k / 5, rounded)."""


def suggest_spec(profile: Sequence[LayerSinks], depth: int, threshold: float = 0.5) -> Suggestion:
    """Propose ``F* | B*(k-k0) | M0B*k0`` from the stock model's (``F*``) sink profile.

    k: the layers that hold the upper half of the sink mass are converted. The sink mass of a layer
    is its share of attention on the first token; summed from layer 0 up, it passes half of its total
    at some layer m, and the k = depth - m layers from m up are converted. The layers below stay
    forward (the paper's Finding 1: the lowest layers carry dependencies that conversion breaks; at
    least one layer always stays forward). A model whose sink grows with depth converts fewer than half
    of its layers; a flat profile gives half. Unlike a threshold on single layers, m moves little with
    the texts profiled: with 16 or 64 STS-B train sentences or the 16 sentences of
    ``docs/results/sinks-profiles/texts.txt``, m is 18 on SmolLM2-135M (30 layers), 11-13 on
    Qwen2.5-Coder-0.5B (24) and 9 on gemma-3-270m (18), while the first layer over a 0.5 threshold
    moved from 3 to 7 on SmolLM2, did not exist on Qwen (every share under 0.5 there) and was layer 0
    on gemma (every layer converted: 0.37 Spearman on STS-B test against 0.65 for the best swept spec).
    With no attention on the first token at all, the top half is converted.

    k0: the top fifth of the converted layers hide the sink, ``max(1, round(k / 5))``
    (:data:`K0_SHARE`). The profile does not say in how many layers hiding the sink helps. On
    SmolLM2-135M's NER probe (docs/results) k0 = 1-4 scored 0.517-0.555 at k = 12-24 and every
    k0 >= 7 0.496-0.509; on STS-B dev (the study) k0 = 2 and 4 are within 0.004 of each other on
    all three models.

    Validated on held-out STS-B test pairs in docs/results/study.md ("suggest_spec, scored"): read
    it there before trusting it on another model or task.

    Args:
        profile: :func:`sink_profile` of the model under ``F*``.
        depth: the decoder's number of layers.
        threshold: the first-token share that makes a sink layer; it only counts them in ``reason``.

    Raises:
        ValueError: if the profile is not of a stock (all forward) plan of ``depth`` layers.
    """
    mass = _stock_mass(profile, depth, "suggest_spec()")
    sinks = sum(x >= threshold for x in mass)
    counted = f"{sinks} of {depth} layers put >= {threshold:.0%} of their attention on the first token"
    k = _mass_k(mass, 0.5)
    if sum(mass) <= 0.0:
        reason = "no attention on the first token; converting the top half"
    else:
        reason = (
            f"half the first-token attention (summed over layers) lies in layers {depth - k}..{depth - 1}; {counted}"
        )
    k0 = _k0(k)
    return Suggestion(presets.mask0_and_bidir(k, k0), k, k0, reason + f"; k={k}, no-sink top fifth k0={k0}")


def _stock_mass(profile: Sequence[LayerSinks], depth: int, caller: str) -> list[float]:
    """Each main-stack layer's share of attention on the first token (negative shares read as 0)."""
    stack = [p for p in profile if p.role == "stack"]
    if len(stack) != depth or any(p.kind != "F" for p in stack):
        raise ValueError(f"{caller} reads the sink profile of the unconverted model (spec 'F*')")
    return [max(0.0, p.shares[0]) for p in stack]


def _mass_k(mass: Sequence[float], upper: float) -> int:
    """k: the top layers that hold the upper ``upper`` share of the summed first-token attention.

    Summed from layer 0 up, the mass passes ``1 - upper`` of its total at a layer m; layers m and up
    are converted (k = depth - m), at least one layer kept forward. No mass at all: the top half.
    """
    depth, total = len(mass), sum(mass)
    if total <= 0.0:
        return max(1, depth // 2)
    running, m = 0.0, 0
    while m < depth - 1 and running + mass[m] <= total * (1.0 - upper):  # m: where the running sum passes it
        running += mass[m]
        m += 1
    return max(1, min(depth - m, depth - 1))


def _k0(k: int) -> int:
    return max(1, int(k * K0_SHARE + 0.5))


MASS_SHARES = (1 / 2, 2 / 3, 1 / 3)
"""The shares of the summed first-token attention whose layers :func:`candidate_specs` converts:
the midpoint rule's half first, then more layers (two thirds of the mass), then fewer (a third)."""


def candidate_specs(
    profile: Sequence[LayerSinks], depth: int, shares: Sequence[float] = MASS_SHARES
) -> list[Suggestion]:
    """A few MASK0&BIDIR specs read off the stock model's sink profile, for :func:`select_spec` to pick from.

    For each share s of ``shares``, k is the top layers that hold the upper s of the summed
    first-token attention (s = 1/2 is :func:`suggest_spec`'s k), and k0 a fifth of k, as there.
    The profile places the midpoint well on some models and a few layers off on others (on
    SmolLM2-135M the dev scores did not separate k = 12 from 15-20); the shares around it give
    the layers on either side where the model parks less or more of its sink, in the profile's
    own units, so the same shares fit a model whose sink grows with depth and one whose sink is flat.
    Specs that come out equal are kept once, the first time.

    Args:
        profile: :func:`sink_profile` of the model under ``F*``.
        depth: the decoder's number of layers.
        shares: the shares of the sink mass to convert, each strictly between 0 and 1, in the
            order of preference (:func:`select_spec` keeps the earlier of equal scores).

    Raises:
        ValueError: if the profile is not of a stock plan of ``depth`` layers, ``shares`` is empty,
            or a share is not strictly between 0 and 1.
    """
    if not shares:
        raise ValueError("candidate_specs() needs at least one share of the sink mass, e.g. (1/2, 2/3, 1/3)")
    bad = [s for s in shares if not 0.0 < s < 1.0]
    if bad:
        raise ValueError(f"each share of the sink mass must lie strictly between 0 and 1, got {bad[0]!r}")
    mass = _stock_mass(profile, depth, "candidate_specs()")
    out: list[Suggestion] = []
    for share in shares:
        k = _mass_k(mass, share)
        k0 = _k0(k)
        spec = presets.mask0_and_bidir(k, k0)
        if all(c.spec != spec for c in out):
            where = f"layers {depth - k}..{depth - 1}"
            reason = f"{share:.0%} of the first-token attention (summed over layers) lies in {where}; k={k}, k0={k0}"
            out.append(Suggestion(spec, k, k0, reason))
    return out


@dataclass(frozen=True)
class Selection:
    """The spec :func:`select_spec` kept, and every candidate's score on the sample.

    Attributes:
        spec: the candidate with the best score (the earliest of equal ones).
        scores: candidate spec (canonical string) -> score on the sample, in the candidates' order.
        texts_encoded: texts run through the encoder (once, for all candidates together).
        seconds: encoding and scoring time.
    """

    spec: Spec
    scores: dict[str, float]
    texts_encoded: int
    seconds: float

    @property
    def cost(self) -> int:
        """Text-spec encodings: ``texts_encoded`` times the number of candidates."""
        return self.texts_encoded * len(self.scores)


Vectors = Callable[[Sequence[str]], np.ndarray]


def select_spec(
    encoder: EncoderFromDecoder,
    candidates: Sequence[Spec | str | Suggestion],
    texts: Sequence[str],
    score: Callable[[Vectors], float],
    *,
    instruction: str | None = None,
    template: str | None = None,
    batch_size: int = 32,
    max_length: int = 512,
) -> Selection:
    """The candidate spec with the best ``score`` on a small sample, all candidates encoded in one pass.

    The texts are encoded once under every candidate with :meth:`EncoderFromDecoder.encode_specs`
    (the forward layers below the lowest converted one run once per batch); ``score`` is then called
    once per candidate with a function that returns that candidate's vectors for any of ``texts``,
    for example ``STSTask.choose_score`` of :mod:`nosink.evals.study` on a few dev pairs. Higher is
    better; of equal scores the earliest candidate wins (list them in the order of preference).

    Args:
        encoder: the decoder (its own spec does not matter).
        candidates: specs, spec strings, or :func:`candidate_specs`' suggestions.
        texts: every text ``score`` asks vectors for (repeats are encoded once).
        score: ``score(vectors) -> float``, ``vectors(texts)`` giving a ``(len(texts), D)`` array.
        instruction: as for :meth:`~EncoderFromDecoder.encode` (ignored with a ``template``).
        template: a prompt template's name, as for :meth:`~EncoderFromDecoder.encode`.
        batch_size: texts per forward pass.
        max_length: tokens per text at most.

    Raises:
        ValueError: for no candidates, a candidate given twice, no texts, a score that is not a finite
            number, or a text asked for that is not among ``texts``.
        SpecError: if a candidate does not fit the decoder.
    """
    specs = [c.spec if isinstance(c, Suggestion) else as_spec(c) for c in candidates]
    if not specs:
        raise ValueError("select_spec() needs at least one candidate spec, e.g. candidate_specs(profile, depth)")
    names = [str(s) for s in specs]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"candidate {repeated[0]!r} is given twice: list each spec once")
    unique, _ = check_texts(texts, "texts")
    unique = list(dict.fromkeys(unique))
    if not unique:
        raise ValueError("select_spec() needs the texts that score() embeds, got none")
    start = time.perf_counter()
    out = encoder.encode_specs(
        specs, unique, None if template is not None else instruction, template=template,
        batch_size=batch_size, max_length=max_length, show_progress_bar=False,
    )  # fmt: skip
    scores: dict[str, float] = {}
    for name in names:
        rows = {t: np.asarray(v) for t, v in zip(unique, out[name], strict=True)}

        def vectors(asked: Sequence[str], rows: dict[str, np.ndarray] = rows) -> np.ndarray:
            missing = [t for t in asked if t not in rows]
            if missing:
                raise ValueError(
                    f"score() asked for a text not among select_spec()'s texts: {missing[0][:60]!r}; "
                    "pass every text the score embeds"
                )
            return np.stack([rows[t] for t in asked])

        value = score(vectors)
        if not isinstance(value, (int, float, np.floating, np.integer)) or not math.isfinite(float(value)):
            raise ValueError(f"score() gave {value!r} for {name!r}: it must return a finite number")
        scores[name] = float(value)
    best = max(names, key=lambda n: scores[n])  # max keeps the first of equal keys
    logger.info("select_spec: %s from %s on %d texts", best, scores, len(unique))
    return Selection(specs[names.index(best)], scores, len(unique), time.perf_counter() - start)


def neighbours(suggestion: Suggestion, depth: int, step: int = 2) -> list[Spec]:
    """The suggestion and its neighbours in (k, k0): the small search that confirms or refines it."""
    out = []
    for dk in (-2 * step, 0, 2 * step):
        for dk0 in (-step, 0, step):
            k, k0 = suggestion.k + dk, suggestion.k0 + dk0
            if 1 <= k0 <= k <= depth:
                spec = presets.mask0_and_bidir(k, k0)
                if spec not in out:
                    out.append(spec)
    return out


def plot_attention_grid(
    maps: Sequence[tuple[Any, np.ndarray]], path: str | Path, layers: Sequence[int] | None = None, title: str = ""
) -> Path:
    """Heatmaps of mean attention maps, one per layer step, with layer and kind in each title (Figure 3 style)."""
    from .plotting import figure, save

    chosen = [(s, m) for i, (s, m) in enumerate(maps) if layers is None or i in layers]
    if not chosen:
        raise ValueError("no layer steps to draw")
    cols = min(4, len(chosen))
    rows = -(-len(chosen) // cols)
    fig, axes = figure(rows, cols, figsize=(3 * cols, 3 * rows), dpi=110, squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, (step, m) in zip(axes.flat, chosen, strict=False):
        ax.axis("on")
        ax.imshow(m, cmap="viridis", vmin=0, vmax=max(float(m.max()), 1e-6))
        ax.set_title(
            f"layer {step.layer}: {step.kind}" + ("" if step.role == "stack" else f" ({step.role})"), fontsize=9
        )
        ax.set_xlabel("key", fontsize=7)
        ax.set_ylabel("query", fontsize=7)
        ax.tick_params(labelsize=6)
    if title:
        fig.suptitle(title, fontsize=10)
    return save(fig, path, rect=(0, 0, 1, 0.97) if title else None)


def plot_sink_profiles(
    profiles: dict[str, Sequence[LayerSinks]], path: str | Path, threshold: float | None = None, title: str = ""
) -> Path:
    """Share of attention on positions 0 and 1 per main-stack layer, one pair of lines per profile."""
    from .plotting import figure, save

    fig, ax = figure(figsize=(8.5, 4), dpi=120)
    for label, profile in profiles.items():
        stack = [p for p in profile if p.role == "stack"]
        line = ax.plot([p.layer for p in stack], [p.shares[0] for p in stack], marker="o", markersize=3,
                       label=f"{label}: first token")[0]  # fmt: skip
        if len(stack[0].shares) > 1:
            ax.plot([p.layer for p in stack], [p.shares[1] for p in stack], linestyle="--", color=line.get_color(),
                    marker=".", label=f"{label}: second token")  # fmt: skip
    if threshold is not None:
        ax.axhline(threshold, color="grey", linewidth=0.8, linestyle=":", label=f"sink threshold {threshold}")
    ax.set_xlabel("layer")
    ax.set_ylabel("share of attention")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    # Outside the axes, on the right: inside, it would cover curves (they span the whole plot).
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
    if title:
        ax.set_title(title)
    return save(fig, path)  # tight_layout makes room for the legend
