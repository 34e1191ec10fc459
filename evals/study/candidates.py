"""The candidate grid: the paper's configurations as specs, one candidate type, one rule for each config's best.

Both the study and the sweeps (:mod:`nosink.evals.sweeps`) draw their specs from here. A config is one of
the paper's names (:data:`CONFIGS`, the presets that take only k, and MASK0-ALL and MASK0&BIDIR), a
candidate is a config's spec, possibly cut after an exit layer, and :func:`best_by_config` keeps each
config's best candidate, the earliest of equal scores in the order given.

>>> [c.name for c in grid(8, ks=[4], k0s=[1, 2])]
['F*', 'F* | B*4', 'F* | B*3 | M0B', 'F* | B*2 | M0B*2']
>>> choose_by_config({Candidate("F*", "F*"): 0.3, Candidate("INPLACE-BIDIR", "F* | B*4"): 0.5})["INPLACE-BIDIR"].name
'F* | B*4'
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from nosink.layerspec import Kind, Plan, Spec, SpecError, as_spec, presets
from nosink.models import EncoderFromDecoder

__all__ = [
    "CONFIGS",
    "DEFAULT_CONFIGS",
    "EXIT_CONFIGS",
    "EXTEND_MAX_K",
    "GRID_CONFIGS",
    "NO_TEMPLATE",
    "Candidate",
    "best_by_config",
    "choose_by_config",
    "converted_configs",
    "converted_layers",
    "exit_candidates",
    "exit_configs_of",
    "grid",
]

NO_TEMPLATE = "instruction"
"""The name of the configuration without a template: mean pooling over the text, the task's instruction before it."""

# The sweepable configurations: paper name -> spec for k converted layers, i.e. every preset whose only
# parameter is k (BASELINE and MASK0-ALL take none; MASK0&BIDIR takes k and k0 and is swept on its own grid).
CONFIGS: dict[str, Callable[[int], Spec]] = {
    name: preset for name, preset in presets.PRESETS.items() if list(inspect.signature(preset).parameters) == ["k"]
}
EXTEND_MAX_K = 5  # the paper stops EXTEND at 5 extra layers

DEFAULT_CONFIGS = ("F*", "INPLACE-BIDIR", "MASK0&BIDIR")
"""The configs of the default grid, in the order tables show them."""

GRID_CONFIGS = ("INPLACE-BIDIR", "INPLACE-BACK", "MASK0-FOR", "MASK0-BIDIR", "MASK0-ALL", "MASK0&BIDIR")
"""The paper's configs :func:`grid` can sweep beside ``F*`` (their presets in :mod:`nosink.layerspec.presets`):
the top k layers bidirectional, backward, forward without the sink, bidirectional without the sink; every
layer bidirectional without the sink (one spec, ``M0B*``); and ``F* | B*(k-k0) | M0B*k0``."""


@dataclass(frozen=True)
class Candidate:
    """One spec of the study, possibly cut after an exit layer.

    Attributes:
        config: ``F*``, one of :data:`GRID_CONFIGS`, or ``SUGGESTED``.
        spec: the canonical spec string.
        exit_layer: the decoder cut after this many layers, or ``None`` for all of them.
    """

    config: str
    spec: str
    exit_layer: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", str(as_spec(self.spec)))

    @property
    def name(self) -> str:
        """The name :meth:`EncoderFromDecoder.encode_specs` gives its plan (``Plan.name``)."""
        return self.spec if self.exit_layer is None else f"{self.spec} @ exit {self.exit_layer}"

    def plan(self, encoder: EncoderFromDecoder) -> Plan:
        """This candidate compiled for ``encoder`` (``exit_layer`` ``None``: the encoder's own exit, all layers
        for an encoder loaded without one)."""
        return encoder.plan_for(self.spec, exit_layer=self.exit_layer)

    def row(self) -> dict[str, Any]:
        """A flat dict for JSON."""
        # "family": the key of the committed results (docs/results/study), which tables and tests read back
        return {"family": self.config, "spec": self.spec, "exit_layer": self.exit_layer, "name": self.name}


def grid(
    depth: int,
    ks: Sequence[int] | None = None,
    k0s: Sequence[int] = (1, 2, 4),
    configs: Sequence[str] = DEFAULT_CONFIGS[1:],
) -> list[Candidate]:
    """The study's grid: ``F*``, then each config of ``configs`` at each k (MASK0&BIDIR at each k0 < k).

    Args:
        depth: the decoder's number of layers.
        ks: the numbers of converted layers; by default a quarter, half and two thirds of the depth.
        k0s: the numbers of top layers that also hide the sink (MASK0&BIDIR).
        configs: some of :data:`GRID_CONFIGS`, in the order the grid lists them; MASK0-ALL takes no k
            (one spec, ``M0B*``).

    Raises:
        ValueError: for a k outside 1..depth, a k0 below 1, or a config not in :data:`GRID_CONFIGS`.

    >>> [c.name for c in grid(8, ks=[2], configs=["INPLACE-BACK", "MASK0-BIDIR", "MASK0-ALL"])]
    ['F*', 'F* | R*2', 'F* | M0B*2', 'M0B*']
    """
    ks = sorted({max(1, depth // 4), max(1, depth // 2), max(1, 2 * depth // 3)}) if ks is None else list(ks)
    if any(not 1 <= k <= depth for k in ks) or any(k0 < 1 for k0 in k0s):
        raise ValueError(f"need 1 <= k <= {depth} and k0 >= 1, got ks={ks}, k0s={list(k0s)}")
    unknown = [f for f in configs if f not in GRID_CONFIGS]
    if unknown:
        raise ValueError(f"unknown configs {unknown}; expected some of {list(GRID_CONFIGS)}")
    out = [Candidate("F*", "F*")]
    for config in dict.fromkeys(configs):
        if config == "MASK0-ALL":
            out.append(Candidate(config, str(presets.mask0_all())))
        elif config == "MASK0&BIDIR":
            out += [Candidate(config, str(presets.mask0_and_bidir(k, k0))) for k in ks for k0 in k0s if k0 < k]
        else:
            out += [Candidate(config, str(CONFIGS[config](k))) for k in ks]
    return out


def converted_layers(spec: str, depth: int) -> int:
    """How many layer runs of ``spec`` on ``depth`` layers use a mask other than plain forward: the paper's k
    (for INTER and EXTRA the layers of the converted stream, for EXTEND the layers added on top).

    >>> converted_layers("F* | B*3 | M0B*2", 8), converted_layers("M0B*", 8), converted_layers("F* | INTER(B*2)", 8)
    (5, 8, 2)
    """
    return sum(step.kind != Kind("F") for step in as_spec(spec).resolve(depth).layer_steps)


def exit_candidates(candidate: Candidate, depth: int, exits: Sequence[int]) -> list[Candidate]:
    """``candidate`` cut after each layer of ``exits`` below ``depth`` where its spec fits the cut decoder.

    The spec is resolved against the first m layers (``F* | B*8`` at exit 20 converts layers 12-19),
    so a converted spec at an exit runs its converted layers again above the shared forward ones.
    """
    out = []
    for m in sorted(set(exits)):
        if not 1 <= m < depth:
            continue
        try:
            as_spec(candidate.spec).resolve(depth, exit_layer=m)
        except SpecError:
            continue
        out.append(Candidate(candidate.config, candidate.spec, m))
    return out


class _Configured(Protocol):
    @property
    def config(self) -> str: ...


C = TypeVar("C", bound=_Configured)


def best_by_config(scored: Iterable[tuple[C, float]]) -> dict[str, C]:
    """Each config's best candidate among ``(candidate, score)`` pairs: the first of equal scores, in order.

    The one choice rule of the study (:func:`choose_by_config`) and the sweeps (:func:`nosink.evals.sweeps.best`).

    >>> best_by_config([(Candidate("F*", "F*"), 0.4), (Candidate("F*", "F*", 3), 0.4)])["F*"].exit_layer is None
    True
    """
    best: dict[str, tuple[C, float]] = {}
    for candidate, score in scored:
        if candidate.config not in best or score > best[candidate.config][1]:
            best[candidate.config] = candidate, score
    return {config: candidate for config, (candidate, _) in best.items()}


def choose_by_config(scores: Mapping[Candidate, float], full_depth_only: bool = True) -> dict[str, Candidate]:
    """Each config's best candidate by ``scores`` (the first of equal scores, in the mapping's order).

    Args:
        scores: candidate -> score on the choosing split.
        full_depth_only: leave early-exit candidates out (they are chosen separately).
    """
    return best_by_config((c, s) for c, s in scores.items() if not (full_depth_only and c.exit_layer is not None))


EXIT_CONFIGS = ("F*", "best", *GRID_CONFIGS)
"""What ``exit_configs`` may name: a config of the grid, or ``"best"`` (see :func:`exit_configs_of`)."""


def converted_configs(configs: Iterable[str]) -> list[str]:
    """The converted configs among ``configs`` (not ``F*``, not the suggestion), in order."""
    return [f for f in configs if f not in ("F*", "SUGGESTED")]


def exit_configs_of(
    configs: Sequence[str], chosen: Mapping[str, Candidate], choose_scores: Mapping[Candidate, float]
) -> list[str]:
    """The configs whose chosen spec is tried at the exits: ``configs`` with ``"best"`` resolved, in order.

    ``"best"`` is the converted config (any but ``F*`` and ``SUGGESTED``) whose chosen spec scores best on the
    choosing split; a config not in ``chosen`` is left out.

    Raises:
        ValueError: for a config not in :data:`EXIT_CONFIGS`.
    """
    unknown = [f for f in configs if f not in EXIT_CONFIGS]
    if unknown:
        raise ValueError(f"unknown exit configs {unknown}; expected some of {list(EXIT_CONFIGS)}")
    converted = converted_configs(chosen)
    best = max(converted, key=lambda f: choose_scores[chosen[f]]) if converted else None
    resolved = (best if f == "best" else f for f in configs)
    return [f for f in dict.fromkeys(resolved) if f is not None and f in chosen]
