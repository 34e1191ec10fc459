"""An MTEB run: each task loaded once, evaluated under every spec, then released; a summary of the scores.

mteb (2.x) computes every metric and writes its own result JSON through :class:`~mteb.ResultCache`
under ``out_dir``. The model is ``nosink/<model>``; the layer spec (and ``limit`` when set) are
mteb ``experiment_kwargs``, so every spec of a sweep gets its own folder and ``model_meta.json``.

Which mteb model runs an :class:`EncoderFromDecoder`:

* one spec (no ``specs=``, or only the encoder's own) and no template, where :mod:`nosink.models.st` imports (the ``st``
  extra, sentence-transformers 6.x): its sentence-transformers form
  (:func:`nosink.models.st.mteb_model`), mteb's ordinary sentence-transformers path, with the
  paper's instructions as the model's prompts and the paper's normalisation in mteb's
  ``encode_kwargs`` task by task;
* a sweep (``specs=`` with another spec than the encoder's), a template, or no ``st`` extra:
  :class:`~nosink.evals.mteb_model.NosinkMTEBEncoder` (a sweep shares its lower layers across
  specs through a :class:`~nosink.evals.mteb_model.SpecSweepCache`, which sentence-transformers
  cannot do, and nosink's sentence-transformers module has no templates).

Both give the same scores, and the same ``ModelMeta`` name, revision and ``experiment_kwargs``
(:func:`nosink.models.mteb_meta.mteb_meta`), so they file results in the same folders.

Task names are checked before anything runs (an unknown one is a ``ValueError``); a task without
data (no local copy, no hub) does not stop the run but is reported: its entry says ``"skipped"``
and why, and the summary lists it under ``"skipped"``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nosink.checks import positive_int
from nosink.layerspec import Spec, as_spec
from nosink.models import EncoderFromDecoder
from nosink.models.templates import as_template
from nosink.models.texts import Template

from .mteb_data import load_task_data
from .mteb_model import NosinkMTEBEncoder, SpecSweepCache, template_name
from .mteb_subsample import subsample
from .mteb_tasks import normalizes, resolve_tasks, task_instruction

if TYPE_CHECKING:
    from mteb import AbsTask, ResultCache

__all__ = ["paper_prompts", "run_mteb"]

logger = logging.getLogger(__name__)

# The summary's key for a model that is not an EncoderFromDecoder (it has no spec).
_FOREIGN = "(encoder)"


@dataclass
class _Lineup:
    """What one run evaluates: one mteb model per spec, filed under one model name and revision."""

    models: dict[str, Any]  # spec (or _FOREIGN) -> the model mteb evaluates
    name: str
    revision: str | None
    cache: SpecSweepCache | None = None  # a sweep's shared embeddings, cleared after each task
    reuse_results: bool = True  # whether results already in out_dir stand in for a new evaluation
    normalize_per_task: bool = False  # pass the paper's normalisation in mteb's encode_kwargs, task by task


def _sentence_transformer_form() -> tuple[Any, Any] | None:
    """``(to_sentence_transformer, mteb_model)`` when :mod:`nosink.models.st` imports, else ``None``.

    It needs the ``st`` extra (sentence-transformers 6.x); mteb installs some sentence-transformers of
    its own, which may be older.
    """
    try:
        from nosink.models.st import mteb_model, to_sentence_transformer
    except ImportError:
        return None
    return to_sentence_transformer, mteb_model


def paper_prompts(tasks: Sequence[AbsTask], instructions: Mapping[str, str] | None = None) -> dict[str, str]:
    """mteb prompt keys -> prompts for ``tasks``: what :class:`NosinkMTEBEncoder` puts before each input.

    For each task, ``"<task>"`` (inputs without a role), ``"<task>-query"`` and ``"<task>-document"``
    (empty: no instruction, as for retrieval documents) get
    :func:`~nosink.evals.mteb_tasks.task_instruction`'s prompt for that role, so mteb's
    sentence-transformers wrapper, which tries ``"<task>-<role>"`` first, picks the same prompt.

    Args:
        tasks: the mteb tasks of the run.
        instructions: task name -> plain instruction; :data:`~nosink.evals.mteb_tasks.PAPER_TASKS` by default.
    """
    prompts: dict[str, str] = {}
    for task in tasks:
        meta = task.metadata
        prompts[meta.name] = task_instruction(meta, None, instructions) or ""
        for role in ("query", "document"):
            prompts[f"{meta.name}-{role}"] = task_instruction(meta, role, instructions) or ""
    return prompts


def _st_lineup(
    encoder: EncoderFromDecoder, tasks: Sequence[AbsTask], form: tuple[Any, Any], **options: Any
) -> _Lineup | None:
    # The sentence-transformers form of one spec, with the paper's instructions as mteb prompts. None when
    # mteb would drop a prompt (a task name mteb does not know): NosinkMTEBEncoder needs no name lookup.
    to_sentence_transformer, mteb_model = form
    prompts = paper_prompts(tasks, options["instructions"])
    model = to_sentence_transformer(encoder, pooling="mean", max_seq_length=options["max_length"])
    wrapper = mteb_model(
        model,
        prompts,
        name=options["model_name"],
        revision=options["revision"],
        experiment_kwargs=options["experiment_kwargs"],
    )
    if (wrapper.model_prompts or {}) != prompts:
        dropped = sorted(set(prompts) - set(wrapper.model_prompts or {}))
        logger.info("mteb's sentence-transformers wrapper drops the prompts %s", dropped)
        return None
    meta = wrapper.mteb_model_meta
    return _Lineup({str(encoder.spec): wrapper}, meta.name, meta.revision, normalize_per_task=True)


def _spec_names(specs: str | Spec | Sequence[str | Spec]) -> list[str]:
    """The distinct specs, each as its canonical text (a spec that does not parse raises ``SpecError``)."""
    items = [specs] if isinstance(specs, (str, Spec)) else list(specs)
    return list(dict.fromkeys(str(as_spec(s)) for s in items))


def _nosink_lineup(
    encoder: EncoderFromDecoder,
    specs: str | Spec | Sequence[str | Spec] | None,
    tasks: Sequence[AbsTask],
    **options: Any,
) -> _Lineup:
    # options: NosinkMTEBEncoder's keyword arguments, the same for every spec. One spec (the encoder's
    # own) without a template runs as a sentence-transformers model where the st extra is installed. A
    # sweep shares its encoding through a cache.
    if specs and _spec_names(specs) == [str(encoder.spec)]:
        specs = None  # only the encoder's own spec (`nosink eval mteb --specs S`): nothing to share
    if specs:
        why = "a sweep"
    elif options["template"] is not None:
        why = "a template"
    elif (form := _sentence_transformer_form()) is None:
        why = "the st extra is missing"
    elif (lineup := _st_lineup(encoder, tasks, form, **options)) is None:
        why = "a task name mteb does not know"
    else:
        logger.info("MTEB runs %s as a sentence-transformers model (mteb's own wrapper)", lineup.name)
        return lineup
    cache = (
        SpecSweepCache(
            encoder,
            specs,
            batch_size=options["batch_size"],
            max_length=options["max_length"],
            template=options["template"],
        )
        if specs
        else None
    )
    spec_names = cache.specs if cache is not None else [str(encoder.spec)]
    models = {spec: NosinkMTEBEncoder(encoder, spec, cache=cache, **options) for spec in spec_names}
    first = models[spec_names[0]]
    logger.info("MTEB runs %s through NosinkMTEBEncoder (%s)", first.model_name, why)
    return _Lineup(models, first.model_name, first.revision, cache)


def _foreign_lineup(model: Any, model_name: str | None, revision: str | None) -> _Lineup:
    # An mteb-ready model (a sentence-transformers baseline, say), run as it is: no instructions, no
    # specs. mteb files its results under the model card's name, which two baselines can share
    # ("no_model_name__available"): never reuse them.
    # An mteb ModelMeta has .name; a SentenceTransformer's model card data has .model_name.
    meta = getattr(model, "mteb_model_meta", None)
    card = getattr(model, "model_card_data", None)
    name = model_name or str(getattr(meta, "name", None) or getattr(card, "model_name", None) or "encoder")
    return _Lineup({_FOREIGN: model}, name, revision, reuse_results=False)


def _note(limit: int | None, seed: int) -> str:
    if limit is None:
        return "full evaluation splits"
    return f"every split subsampled to at most {limit} items (seed {seed}): not comparable to full MTEB scores"


def _score(
    model: Any, task: AbsTask, results: ResultCache, *, overwrite: bool, batch_size: int, normalize: bool | None = None
) -> tuple[float, str | None]:
    """mteb's main score of ``model`` on a loaded ``task``, and the result file it wrote (``None`` if unknown).

    ``normalize`` (when not ``None``) goes to the model's ``encode`` as ``normalize_embeddings``.
    """
    import mteb

    encode_kwargs: dict[str, Any] = {"batch_size": batch_size}
    if normalize is not None:
        encode_kwargs["normalize_embeddings"] = normalize

    result = mteb.evaluate(
        model,
        task,
        cache=results,
        overwrite_strategy="always" if overwrite else "only-missing",
        co2_tracker=False,
        show_progress_bar=False,
        encode_kwargs=encode_kwargs,
    )
    (task_result,) = result.task_results
    meta = getattr(model, "mteb_model_meta", None)
    return float(task_result.get_score()), str(results.get_task_result_path(task.metadata.name, meta)) if meta else None


def _run_task(
    task: AbsTask,
    lineup: _Lineup,
    results: ResultCache,
    *,
    data_dir: str | Path | None,
    limit: int | None,
    seed: int,
    overwrite: bool,
    batch_size: int,
) -> dict[str, Any]:
    """One task's summary entry: load its data, evaluate every model of the lineup on it, release it."""
    name = task.metadata.name
    source, reason = load_task_data(task, data_dir)
    if source is None:
        logger.warning("skipping %s: %s", name, reason)
        return {"status": "skipped", "reason": reason}
    if limit is not None:
        subsample(task, limit, seed)
    entry: dict[str, Any] = {
        "status": "ok",
        "source": source,
        "main_score": task.metadata.main_score,
        "scores": {},
        "files": {},
    }
    try:
        for spec, model in lineup.models.items():
            logger.info("MTEB %s with spec %s (data: %s)", name, spec, source)
            entry["scores"][spec], entry["files"][spec] = _score(
                model,
                task,
                results,
                overwrite=overwrite or not lineup.reuse_results,
                batch_size=batch_size,
                normalize=normalizes(task.metadata) if lineup.normalize_per_task else None,
            )
    finally:
        if lineup.cache is not None:
            lineup.cache.clear()
        if source != "preloaded":
            task.unload_data()
    return entry


def run_mteb(
    encoder: EncoderFromDecoder | Any,
    tasks: str | Sequence[str | AbsTask] | None = None,
    data_dir: str | Path | None = None,
    out_dir: str | Path = "results/mteb",
    limit: int | None = None,
    specs: str | Spec | Sequence[str | Spec] | None = None,
    *,
    instructions: Mapping[str, str] | None = None,
    model_name: str | None = None,
    revision: str | None = None,
    batch_size: int = 32,
    max_length: int = 512,
    overwrite: bool = False,
    seed: int = 42,
    template: Template | str | None = None,
) -> dict[str, Any]:
    """Evaluate an encoder (or a sweep of specs) on MTEB tasks; mteb computes and writes the scores.

    Every task name is checked first, before any model work. One spec (no ``specs``, or only the
    encoder's own) without a template runs as the encoder's sentence-transformers form (mteb's own
    wrapper, :func:`nosink.models.st.mteb_model`, with :func:`paper_prompts` as prompts) where the
    ``st`` extra is installed, else, and for sweeps and templates, as
    :class:`~nosink.evals.mteb_model.NosinkMTEBEncoder`: the same scores, filed under the same name,
    revision and ``experiment_kwargs``. Each task's data is then loaded once
    (local folder, else hub) and evaluated under every spec, then released. A task without data is
    skipped with the reason instead of stopping the run, and listed in the summary's ``skipped``:
    a caller that needs every score checks that list.

    Args:
        encoder: the encoder to evaluate; or any model mteb accepts (a sentence-transformers
            ``SentenceTransformer`` baseline, say), run as it is, without instructions or specs.
        tasks: mteb task names (or task objects, e.g. with data already loaded); one name alone
            stands for a list of one; :data:`~nosink.evals.mteb_tasks.PAPER_TASKS` by default.
        data_dir: folder with local copies (see :func:`~nosink.evals.mteb_data.load_local_data`);
            tried before the hub.
        out_dir: where mteb's result cache goes (``~`` is expanded): ``out_dir/results/<model>/<revision>/
            experiments/<spec...>/<task>.json`` plus ``model_meta.json``.
        limit: cut every split to at most this many items (rows, pairs, queries; a random,
            seeded subset) for quick runs. Such scores are not comparable to full ones: ``limit``
            is recorded in the results' ``experiment_kwargs`` and in the returned summary.
        specs: evaluate each of these specs (sharing work through a
            :class:`~nosink.evals.mteb_model.SpecSweepCache`); by default the encoder's own spec
            (``specs`` naming that spec alone is the same). Only for an :class:`EncoderFromDecoder`.
        instructions: task name -> instruction; :data:`~nosink.evals.mteb_tasks.PAPER_TASKS` by default.
        model_name: mteb model name; ``nosink/<model>`` by default.
        revision: model revision recorded by mteb.
        batch_size: texts per forward pass.
        max_length: at most this many tokens per input.
        overwrite: re-run tasks whose results are already in ``out_dir`` (else they are reused).
        seed: seed of the ``limit`` subsampling.
        template: a prompt template (a :class:`~nosink.models.texts.Template` or a preset's name:
            ``"PromptEOL"``, ``"MetaEOL"``, ``"Echo"``, ...) that every input is encoded with, instead of
            the instructions (see :class:`~nosink.evals.mteb_model.NosinkMTEBEncoder`). Only for an
            :class:`EncoderFromDecoder`.

    Returns:
        ``{"model", "revision", "specs", "template", "limit", "note", "out_dir", "tasks": {name: {...}},
        "skipped": [name, ...]}`` where each task has ``status`` (``"ok"`` or ``"skipped"``), and
        when ok ``source`` (where the data came from), ``main_score`` (mteb's name of it),
        ``scores`` (spec -> main score) and ``files`` (spec -> result JSON); when skipped,
        ``reason``. ``skipped`` names the tasks that were not evaluated, in order.

    Raises:
        ValueError: for an unknown task name (listing mteb's closest names and the paper's tasks),
            a ``limit``, ``batch_size`` or ``max_length`` that is not a positive integer,
            ``specs`` or ``template`` for a model that is not an :class:`EncoderFromDecoder`, or a
            ``template`` that names no preset.
        SpecError: for a spec that does not parse or fit the encoder.
    """
    import mteb

    if limit is not None:
        positive_int(limit, "limit")
    positive_int(batch_size, "batch_size")
    positive_int(max_length, "max_length")
    task_list = resolve_tasks(tasks)  # an unknown name fails here, before any model work
    out_dir = Path(out_dir).expanduser()
    if isinstance(encoder, EncoderFromDecoder):
        lineup = _nosink_lineup(
            encoder,
            specs,
            task_list,
            instructions=instructions,
            model_name=model_name,
            revision=revision,
            batch_size=batch_size,
            max_length=max_length,
            experiment_kwargs={"limit": limit} if limit is not None else {},
            template=as_template(template),
        )
    elif specs or template is not None:
        what = "specs" if specs else "templates"
        raise ValueError(f"{what} apply to an EncoderFromDecoder; a {type(encoder).__name__} is evaluated as it is")
    else:
        lineup = _foreign_lineup(encoder, model_name, revision)
    summary: dict[str, Any] = {
        "model": lineup.name,
        "revision": lineup.revision,
        "specs": list(lineup.models),
        "template": template_name(as_template(template)) if template is not None else None,
        "limit": limit,
        "note": _note(limit, seed),
        "out_dir": str(out_dir),
        "tasks": {},
    }
    if limit is not None:
        logger.warning("MTEB run with limit=%d: %s", limit, summary["note"])

    results = mteb.ResultCache(out_dir)
    for task in task_list:
        summary["tasks"][task.metadata.name] = _run_task(
            task,
            lineup,
            results,
            data_dir=data_dir,
            limit=limit,
            seed=seed,
            overwrite=overwrite,
            batch_size=batch_size,
        )
    summary["skipped"] = [name for name, entry in summary["tasks"].items() if entry["status"] != "ok"]
    if summary["skipped"]:
        logger.warning(
            "%d of %d MTEB tasks had no data and were not evaluated: %s",
            len(summary["skipped"]),
            len(summary["tasks"]),
            ", ".join(summary["skipped"]),
        )
    return summary
