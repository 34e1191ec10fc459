"""Masks x templates: how the mask under each prompt template and the template on top of the mask combine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .candidates import NO_TEMPLATE

__all__ = ["effect", "interplay"]


def effect(comparison: Mapping[str, Any]) -> str:
    """``"adds"``, ``"costs"`` or ``"ties"``: whether a paired comparison's 95% interval lies above zero, below it,
    or across it (so the word agrees with the interval the tables print).

    >>> effect({"delta": 0.03, "low": 0.01, "high": 0.05}), effect({"delta": 0.03, "low": -0.004, "high": 0.07})
    ('adds', 'ties')
    """
    return "adds" if comparison["low"] > 0 else "costs" if comparison["high"] < 0 else "ties"


def _verdict(mask: Mapping[str, Any], prompt: Mapping[str, Any] | None) -> str:
    """The rule of :func:`interplay`'s ``verdict``."""
    if prompt is None:
        return f"mask {effect(mask)}"
    if effect(mask) == effect(prompt) == "adds":
        return "add up"
    return f"mask {effect(mask)}, template {effect(prompt)}"


def interplay(payloads: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """How the masks and each prompt template combine, from one model's study JSONs on one task.

    The JSONs must share the model, task, samples and seed; a template in several of them (the no-template one
    often is) must choose the same best config and have the same spec and score for the configs they share;
    of its copies, the first with the no-template rows beside it is read (else the first). One entry per
    template, in order of appearance:

    - ``alone`` and ``with_mask``: the template's ``F*`` row and its best converted config's row (the config
      chosen on the choosing split);
    - ``mask``: the comparison of ``with_mask`` against ``alone`` on the reporting split (the mask under the
      template);
    - ``prompt``: the comparison of ``with_mask`` against no template's same config (the template on top of the
      mask); ``None`` for no template itself, and for a template run in a JSON without the no-template rows
      (the pair needs both in one run);
    - ``verdict``, from the two comparisons' 95% intervals (:func:`effect`): ``"add up"`` where each adds to the
      other, else ``"mask E, template F"`` with E and F each ``adds``, ``ties`` or ``costs`` (``"mask ties,
      template costs"``); without ``prompt``, ``"mask E"``.

    Raises:
        ValueError: if no JSON is given, if one is not a study JSON with templates, if they differ in model,
            task, samples or seed, if they give one template different choices or rows, or if a template has
            no ``F*``, no converted config or no comparison of the two.
    """
    if not payloads:
        raise ValueError("no study JSON given")
    first = payloads[0]
    for payload in payloads[1:]:
        differ = [key for key in ("model", "task", "data", "seed") if payload.get(key) != first.get(key)]
        if differ:
            raise ValueError(f"these study JSONs differ in {', '.join(differ)}: give one model's runs on one task")
    copies: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for i, payload in enumerate(payloads):
        if "templates" not in payload:
            raise ValueError(f"JSON {i} is not a study JSON with templates (a NER study JSON has none)")
        for t in payload["templates"]:
            copies.setdefault(t["template"], []).append((i, t))
    entries = []
    for name, found in copies.items():
        for other in found[1:]:
            _same_rows(name, found[0], other)
        read = [_template_entry(i, payloads[i], t) for i, t in found]
        # a copy with the no-template rows beside it has the "on top" comparison: it is the one read
        entries.append(next((e for e in read if e["prompt"] is not None), read[0]))
    return entries


def _same_rows(name: str, a: tuple[int, Mapping[str, Any]], b: tuple[int, Mapping[str, Any]]) -> None:
    """Refuse two copies of one template (JSON index, template row) that choose differently or score differently."""
    (i, t), (j, other) = a, b
    if t["best_family"] != other["best_family"]:
        raise ValueError(
            f"template {name!r}: JSON {i} chose {t['best_family']} as its best family and JSON {j} "
            f"{other['best_family']}; read runs of one grid together"
        )
    for config in sorted(set(t["chosen"]) & set(other["chosen"])):
        x, y = t["chosen"][config], other["chosen"][config]
        if x["name"] != y["name"] or not np.isclose(x["report"], y["report"], rtol=0, atol=1e-6):
            raise ValueError(
                f"template {name!r}, family {config}: JSON {i} has {x['name']!r} reporting {x['report']:.6f}, "
                f"JSON {j} {y['name']!r} reporting {y['report']:.6f}; runs that differ there (another grid, "
                "sample or thread count) cannot be read together"
            )


def _template_entry(i: int, payload: Mapping[str, Any], t: Mapping[str, Any]) -> dict[str, Any]:
    """One template's :func:`interplay` entry from JSON ``i``'s rows and comparisons."""
    name, best = t["template"], t["best_family"]
    if best is None or "F*" not in t["chosen"]:
        raise ValueError(f"template {name!r} in JSON {i} needs F* and a converted family; it has {list(t['chosen'])}")
    compared = {(c["comparison"], c["a"], c["b"]): c for c in payload["comparisons"]}
    mask = compared.get(("template+mask vs template alone", f"{name} / {best}", f"{name} / F*"))
    if mask is None:
        raise ValueError(
            f"template {name!r} in JSON {i} has no 'template+mask vs template alone' comparison: a row without "
            "a reporting score? rerun the study"
        )
    prompt = compared.get(("template+mask vs mask alone", f"{name} / {best}", f"{NO_TEMPLATE} / {best}"))
    return {
        "template": name,
        "alone": t["chosen"]["F*"],
        "with_mask": t["chosen"][best],
        "mask": mask,
        "prompt": prompt,
        "verdict": _verdict(mask, prompt),
    }
