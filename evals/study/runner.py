"""The study's runs: choose each config's spec on one split and report on the other, per template and per task."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nosink.models import EncoderFromDecoder

from .cache import EmbeddingCache
from .candidates import NO_TEMPLATE, Candidate, choose_by_config, exit_candidates, exit_configs_of
from .compare import comparisons
from .results import Scored, TemplateResult, overall_choice, template_row, write_json
from .tasks import Task

__all__ = ["baseline_task", "run_template", "study_task"]

logger = logging.getLogger(__name__)


def run_template(
    encoder: EncoderFromDecoder,
    task: Task,
    candidates: Sequence[Candidate],
    template: str | None = None,
    suggestion: Candidate | None = None,
    exits: Sequence[int] = (),
    exit_configs: Sequence[str] = ("F*",),
    batch_size: int = 32,
    restrict: Mapping[str, Candidate] | None = None,
    report_grid: bool = False,
    show_progress_bar: bool = False,
    max_length: int = 512,
) -> TemplateResult:
    """Choose each config's spec on ``task``'s choosing split, then score the chosen ones on its reporting split.

    Args:
        encoder: the converted decoder (its own spec does not matter).
        task: what to embed and how to score.
        candidates: the grid.
        template: a preset's name, or ``None`` for mean pooling with ``task.instruction``.
        suggestion: a spec to score beside the chosen ones (``suggest_spec``'s), on both splits.
        exits: exit layers to try for the chosen spec of each config in ``exit_configs``; the exit is
            chosen on the choosing split like any other choice.
        exit_configs: the configs whose chosen spec is tried at ``exits`` (see :func:`exit_configs_of`;
            ``"best"`` names the better converted config on the choosing split).
        batch_size: texts per forward pass.
        restrict: skip the grid and take these candidates (config -> candidate) as chosen: for costly
            templates (MetaEOL's eight prompts) scored only at the specs another template chose.
        report_grid: score every grid candidate on the reporting split too, not only the chosen ones (the
            configs' curves over k, for :func:`curve_comparisons` and :func:`curves_table`).
        show_progress_bar: a bar for each encoding pass of more than 8 batches.
        max_length: tokens per text; a longer text (a retrieval document) keeps its beginning.
    """
    cache = EmbeddingCache(encoder, template, task.instruction, batch_size, max_length, show_progress_bar)
    name = template or NO_TEMPLATE

    def embed(c: Candidate) -> Callable[[Sequence[str]], np.ndarray]:
        return lambda texts: cache.vectors([c], texts)[c.name]

    def score_choose(cands: Sequence[Candidate]) -> dict[Candidate, float]:
        cache.vectors(cands, task.texts("choose"))  # all at once: shared layers run once per batch
        return {c: task.choose_score(embed(c)) for c in cands}

    grid_cands = list(restrict.values()) if restrict is not None else list(candidates)
    extra = [suggestion] if suggestion is not None and suggestion not in grid_cands else []
    # F*'s exits share every layer with F*: they come free in the grid's pass
    f_exits = exit_candidates(Candidate("F*", "F*"), encoder.depth, exits) if "F*" in exit_configs else []
    choose_scores = score_choose(grid_cands + extra + f_exits)
    if restrict is not None:
        chosen_cands = dict(restrict)
    else:
        chosen_cands = choose_by_config({c: choose_scores[c] for c in grid_cands})
    configs = exit_configs_of(exit_configs, chosen_cands, choose_scores)
    if suggestion is not None:
        chosen_cands["SUGGESTED"] = suggestion
    exit_cands = {cfg: exit_candidates(chosen_cands[cfg], encoder.depth, exits) for cfg in configs}
    exit_cands = {cfg: cs for cfg, cs in exit_cands.items() if cs}
    every_exit = [c for cs in exit_cands.values() for c in cs]
    if every_exit:
        choose_scores |= score_choose(every_exit)
    report_cands = list(dict.fromkeys([*chosen_cands.values(), *every_exit, *(grid_cands if report_grid else [])]))
    cache.vectors(report_cands, task.texts("report"))
    reported = {c: task.report_statistic(embed(c)) for c in report_cands}

    def scored(c: Candidate) -> Scored:
        return Scored(c, choose_scores.get(c), reported.get(c))

    exit_rows = {cfg: [scored(c) for c in [*cs, chosen_cands[cfg]]] for cfg, cs in exit_cands.items()}
    exit_choice = {cfg: max(rows, key=lambda s: s.choose) for cfg, rows in exit_rows.items()}
    logger.info("%s %s: chosen %s", task.name, name, {f: c.name for f, c in chosen_cands.items()})
    return TemplateResult(
        template=name,
        grid=[scored(c) if report_grid else Scored(c, choose_scores[c]) for c in grid_cands + extra],
        chosen={cfg: scored(c) for cfg, c in chosen_cands.items()},
        exits=exit_rows,
        exit_choice=exit_choice,
        seconds=cache.seconds,
        texts_encoded=cache.texts_encoded,
    )


def study_task(
    encoder: EncoderFromDecoder,
    task: Task,
    path: str | Path,
    templates: Sequence[str | None],
    candidates: Sequence[Candidate],
    suggestion: Candidate | None = None,
    exits: Sequence[int] = (),
    exit_templates: Sequence[str | None] = (None,),
    restricted: Sequence[str] = ("MetaEOL",),
    meta: Mapping[str, Any] | None = None,
    batch_size: int = 32,
    exit_configs: Sequence[str] = ("F*", "best"),
    report_grid: bool = False,
    show_progress_bar: bool = False,
    max_length: int = 512,
) -> dict[str, Any]:
    """Run :func:`run_template` for each template and write the JSON at ``path`` after each one.

    Templates named in ``restricted`` are scored only at the specs the first template chose (no grid).
    ``exits`` are tried for the chosen specs of ``exit_configs`` (by default ``F*`` and the better converted
    config), for the templates in ``exit_templates``. ``report_grid`` scores every grid candidate of the templates
    with a grid on the reporting split too (see :func:`run_template`); ``show_progress_bar`` shows a bar per long
    encoding pass; ``max_length`` cuts each text to that many tokens.

    Returns:
        The JSON payload: each template's rows, the overall choice, the paired comparisons, and ``meta``.
    """
    path = Path(path)
    results: list[TemplateResult] = []
    payload: dict[str, Any] = {"task": task.name, "metric": task.metric, **(meta or {})}
    for template in templates:
        restrict = None
        if template in restricted and results:
            restrict = {f: s.candidate for f, s in results[0].chosen.items() if f != "SUGGESTED"}
        result = run_template(
            encoder,
            task,
            candidates,
            template,
            suggestion=suggestion if template is None else None,
            exits=exits if template in exit_templates else (),
            exit_configs=exit_configs,
            batch_size=batch_size,
            restrict=restrict,
            report_grid=report_grid,
            show_progress_bar=show_progress_bar,
            max_length=max_length,
        )
        results.append(result)
        payload["templates"] = [template_row(r) for r in results]
        payload["overall_choice"] = overall_choice(results)
        payload["comparisons"] = comparisons(results, depth=encoder.depth if report_grid else None)
        payload["seconds"] = round(sum(r.seconds for r in results), 1)
        write_json(path, payload)
        logger.info("%s %s done in %.0f s; wrote %s", task.name, result.template, result.seconds, path)
    return payload


def baseline_task(
    folder: str | Path,
    task: Task,
    path: str | Path,
    meta: Mapping[str, Any] | None = None,
    show_progress_bar: bool = False,
) -> dict:
    """A sentence-transformers encoder (no instruction, no template) on ``task``'s reporting split, with its CI.

    Texts are cut at the encoder's own ``max_seq_length`` (recorded in the payload); ``show_progress_bar``
    shows a bar for each encoding pass of more than 8 batches.
    """
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    start = time.perf_counter()
    cache: dict[str, np.ndarray] = {}

    def vectors(texts: Sequence[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in cache]
        if todo:
            bar = show_progress_bar and len(todo) > 8 * 32
            cache.update(zip(todo, model.encode(todo, batch_size=32, show_progress_bar=bar), strict=True))
        return np.stack([cache[t] for t in texts])

    scored = Scored(Candidate("F*", "F*"), task.choose_score(vectors), task.report_statistic(vectors))
    row = scored.row() | {"family": "trained encoder", "spec": None, "name": Path(folder).name}
    payload = {"task": task.name, "metric": task.metric, "result": row, **(meta or {})}
    payload["max_seq_length"] = model.max_seq_length
    payload["seconds"] = round(time.perf_counter() - start, 1)
    write_json(Path(path), payload)
    return payload
