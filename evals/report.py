"""The inspect report: attention maps, sink profiles and (for the stock model) a suggested spec, written to a folder.

``nosink inspect`` is :func:`inspect_encoder` plus printing. The folder gets ``attention_maps.png``,
``sink_profile.png``, one ``sinks_<i>.csv`` per profiled spec (0 is the encoder's own) and
``inspect.json`` with everything in it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nosink.layerspec import Spec
from nosink.models import EncoderFromDecoder

from . import plotting, sinks

__all__ = ["InspectReport", "inspect_encoder"]


@dataclass(frozen=True)
class InspectReport:
    """What :func:`inspect_encoder` measured and where it wrote it."""

    model: str  # a label for the model (the folder's name)
    spec: str  # the inspected encoder's spec
    texts: list[str]
    threshold: float
    profiles: dict[str, list[sinks.LayerSinks]]  # by spec; the encoder's own first
    suggestion: sinks.Suggestion | None  # only for the stock model ('F*')
    neighbours: list[Spec] = field(default_factory=list)  # the suggestion's neighbours in (k, k0)
    out: Path = Path(".")

    @property
    def profile(self) -> list[sinks.LayerSinks]:
        """The inspected encoder's own sink profile."""
        return self.profiles[self.spec]

    def as_dict(self) -> dict[str, Any]:
        """The report as written to ``inspect.json`` (without the command line)."""
        out: dict[str, Any] = {
            "model": self.model,
            "spec": self.spec,
            "texts": self.texts,
            "threshold": self.threshold,
            "profiles": {k: [p.row() for p in v] for k, v in self.profiles.items()},
        }
        if self.suggestion is not None:
            out["suggestion"] = {
                "spec": str(self.suggestion.spec),
                "k": self.suggestion.k,
                "k0": self.suggestion.k0,
                "reason": self.suggestion.reason,
                "neighbours": [str(s) for s in self.neighbours],
            }
        return out


def inspect_encoder(
    encoder: EncoderFromDecoder,
    texts: Sequence[str],
    out: str | Path,
    *,
    label: str,
    compare: Sequence[str] = (),
    layers: Sequence[int] | None = None,
    positions: int = 3,
    threshold: float = 0.5,
    max_tokens: int = 32,
    meta: dict[str, Any] | None = None,
) -> InspectReport:
    """Profile the encoder's attention sinks (and those of ``compare`` specs on the same decoder); write the report.

    The encoder must run eager attention (``attn_implementation="eager"``) for attention weights.

    Args:
        encoder: the encoder to inspect; ``F*`` (the stock model) also gets a suggested spec.
        texts: sample texts: the attention maps cut them to a common length of at most ``max_tokens``
            tokens; the sink profiles read each text at its own length, at most ``max_tokens``.
        out: folder for the figures, tables and ``inspect.json`` (created if missing).
        label: the model's name in titles and the report.
        compare: more specs, profiled on the same decoder and drawn in the same plot.
        layers: layer steps to draw in the attention-map grid (default: all).
        positions: report the share of attention on this many first positions.
        threshold: the share on the first token that makes a layer a sink layer.
        max_tokens: at most this many tokens of each text.
        meta: extra keys for ``inspect.json`` (the command line, say).

    Raises:
        ValueError: for no texts, texts too short for ``positions``, or no layer steps to draw.
        SpecError: if a ``compare`` spec is malformed or does not fit the model.
        ImportError: without matplotlib (the ``eval`` extra), before anything is written.
    """
    plotting.require_matplotlib()  # before the folder is made: no empty report folder without it
    out = Path(out)
    texts = list(texts)
    out.mkdir(parents=True, exist_ok=True)
    own = str(encoder.spec)
    others = [EncoderFromDecoder.from_model(encoder.decoder, spec, encoder.tokenizer) for spec in compare]
    maps = sinks.attention_maps(encoder, texts, max_tokens)
    sinks.plot_attention_grid(maps, out / "attention_maps.png", layers, f"{label}, {own}")
    profiles: dict[str, list[sinks.LayerSinks]] = {}
    for other in [encoder, *others]:
        profile = sinks.sink_profile(other, texts, positions, threshold, max_tokens)
        profiles[str(other.spec)] = profile
        sinks.write_profile(profile, out / f"sinks_{len(profiles) - 1}.csv")
    sinks.plot_sink_profiles(profiles, out / "sink_profile.png", threshold, f"attention sinks, {label}")
    suggestion, neighbours = None, []
    if own == "F*":
        suggestion = sinks.suggest_spec(profiles[own], encoder.depth, threshold)
        neighbours = sinks.neighbours(suggestion, encoder.depth)
    report = InspectReport(label, own, texts, threshold, profiles, suggestion, neighbours, out)
    (out / "inspect.json").write_text(json.dumps({**report.as_dict(), **(meta or {})}, indent=2) + "\n")
    return report
