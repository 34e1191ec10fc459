"""The study of one model (or encoder baseline) on the tasks its options name: one JSON file per task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nosink.checks import printable
from nosink.evals import stats
from nosink.models import EncoderFromDecoder

from .candidates import NO_TEMPLATE, Candidate, choose_by_config, exit_candidates, exit_configs_of, grid
from .loaders import load_classification, load_retrieval, load_sts, load_sts17
from .ner import ner_payload, ner_study
from .options import StudyOptions
from .results import write_json
from .runner import baseline_task, study_task
from .select import ner_selection_for, selection_for, suggestion_for
from .tasks import RetrievalTask, Task

__all__ = ["TASK_FOLDERS", "run"]

TASK_FOLDERS: dict[str, tuple[str, ...]] = {
    "sts": ("stsb",), "sts17": ("stsb", "sts17"), "banking77": ("banking77",), "emotion": ("emotion",),
    "massive": ("massive_intent",), "nfcorpus": ("nfcorpus",), "scifact": ("scifact",), "ner": ("conll2003",),
}  # fmt: skip
"""The folders under ``--data`` that each task of ``--tasks`` reads (STS17 is chosen on STS-B dev)."""

Selection = tuple[Candidate, dict[str, Any]]  # a suggested candidate and the record of how it was picked


def run(options: StudyOptions, command: str) -> int:
    """Run the study that ``options`` describes; write one JSON file per task into ``options.out``.

    Args:
        options: the study (the command line's are :func:`~nosink.evals.study.cli.options_from_args`'s).
        command: the command line, kept in every JSON file (``meta["command"]``).

    Returns:
        0 (the exit status).

    Raises:
        FileNotFoundError: if ``options.data`` is not a folder, or lacks the folder of a task asked for (or
            ``stsb/``, whose training sentences the suggestion profiles).
        ValueError: for an exit layer at or above the model's depth.
    """
    import torch

    from nosink.evals.baselines import BASELINES
    from nosink.models.weights import MODELS, model_path

    o = options
    _check_data(o.data, o.tasks, suggestion=o.suggestion and o.model not in BASELINES)
    model = model_path(o.model) if o.model in MODELS else o.model
    meta: dict[str, Any] = {
        "model": Path(model).name, "command": command,
        "threads": torch.get_num_threads(), "seed": o.seed, "resamples": stats.RESAMPLES,
    }  # fmt: skip
    tasks = _load_tasks(o)
    sizes = _data_sizes(o, tasks)
    if o.model in BASELINES:
        _run_baseline(o, tasks, sizes, meta)
        return 0
    encoder = EncoderFromDecoder.from_pretrained(model, "F*", dtype=torch.float32)
    too_deep = sorted({m for m in o.exits if m >= encoder.depth})
    if too_deep:
        raise ValueError(
            f"--exits {' '.join(map(str, too_deep))}: the model has {encoder.depth} layers, so an exit layer is 1 to "
            f"{encoder.depth - 1} (every spec is scored at full depth anyway); drop or lower those exits"
        )
    candidates = grid(encoder.depth, o.ks, o.k0s, o.configs)
    conll = _conll(o.data, o.ner_train, o.ner_dev) if "ner" in o.tasks else None
    suggestion, selections = None, {}
    if o.suggestion:
        suggestion, selections = _suggestions(o, encoder, tasks, conll, meta)
    meta |= {
        "depth": encoder.depth, "grid": [c.name for c in candidates], "exits": list(o.exits),
        # the keys of the committed results (docs/results/study), which tables and tests read back
        "exit_families": list(o.exit_configs), "restricted_templates": list(o.restricted),
        "families": list(o.configs), "report_grid": o.report_grid,
    }  # fmt: skip
    templates = [None if t == NO_TEMPLATE else t for t in o.templates]
    exit_templates = [None if t == NO_TEMPLATE else t for t in o.exit_templates]
    for key, task in tasks.items():
        task_suggestion, task_meta = suggestion, meta
        if key in selections:  # the selection stage's spec stands in for suggest_spec's
            task_suggestion, record = selections[key]
            task_meta = meta | {"suggestion": record}
        study_task(
            encoder, task, o.out / f"{key}.json", templates, candidates, task_suggestion, o.exits, exit_templates,
            restricted=o.restricted, meta=task_meta | {"data": sizes[key]}, batch_size=o.batch_size,
            exit_configs=o.exit_configs, report_grid=o.report_grid, show_progress_bar=o.progress,
            max_length=o.max_length,
        )  # fmt: skip
    if conll is not None:
        ner_suggestion, ner_meta = suggestion, meta
        if "ner" in selections:  # as for the other tasks
            ner_suggestion, record = selections["ner"]
            ner_meta = meta | {"suggestion": record}
        _run_ner(o, encoder, conll, candidates, ner_suggestion, ner_meta | {"data": sizes["ner"]})
    return 0


def _load_tasks(o: StudyOptions) -> dict[str, Task]:
    """The tasks of ``o.tasks`` but NER (which :func:`_conll` reads), in the order the study runs them."""
    data, tasks = o.data, {}
    if "sts" in o.tasks:
        tasks["sts"] = load_sts(data / "stsb", o.sts_choose, o.sts_report, o.seed)
    if "sts17" in o.tasks:
        tasks["sts17"] = load_sts17(data / "stsb", data / "sts17", o.sts_choose, o.seed)
    for key, name in (("banking77", "Banking77Classification"), ("emotion", "EmotionClassification")):
        if key in o.tasks:
            tasks[key] = load_classification(name, data / key, o.cls_train, o.cls_test, o.seed)
    if "massive" in o.tasks:
        tasks["massive"] = load_classification(
            "MassiveIntentClassification", data / "massive_intent", o.cls_train, o.cls_test, o.seed,
            n_validation=o.cls_validation,
        )  # fmt: skip
    for key, name in (("nfcorpus", "NFCorpus"), ("scifact", "SciFact")):
        if key in o.tasks:
            tasks[key] = load_retrieval(name, data / key, o.ret_queries, o.ret_other, o.seed, o.ret_doc_words)
    return tasks


def _data_sizes(o: StudyOptions, tasks: Mapping[str, Task]) -> dict[str, dict[str, Any]]:
    """Each task's samples as its JSON records them (``meta["data"]``)."""
    retrieval = {
        "queries": "the test queries, in seeded halves: choose on the first, report on the second",
        "n_queries": o.ret_queries, "n_other_documents": o.ret_other, "doc_words": o.ret_doc_words,
        "max_length": o.max_length,
        "metric": "nDCG@10 by mteb's calculate_retrieval_scores (pytrec_eval), per query; cosine top 100",
    }  # fmt: skip
    sizes = {
        "sts": {"choose": "STS-B dev, seeded sample", "n_choose": o.sts_choose, "n_report": o.sts_report},
        "sts17": {"choose": "STS-B dev, seeded sample (STS17 has one split)", "n_choose": o.sts_choose,
                  "report": "STS17 en-en, all 250 pairs"},
        "banking77": {"n_train": o.cls_train, "n_test": o.cls_test, "validation_fraction": 0.2},
        "emotion": {"n_train": o.cls_train, "n_test": o.cls_test, "validation_fraction": 0.2},
        "massive": {"n_train": o.cls_train, "n_validation": o.cls_validation, "n_test": o.cls_test,
                    "choose": "MASSIVE en-US validation split (seeded, label-stratified sample)"},
        "nfcorpus": retrieval, "scifact": retrieval,
    }  # fmt: skip
    for key in ("nfcorpus", "scifact"):
        task = tasks.get(key)
        if isinstance(task, RetrievalTask):
            sizes[key] = retrieval | retrieval_mode(task, o.max_length)
    sizes["ner"] = {
        "train": f"first {o.ner_train} CoNLL-2003 train sentences",
        "dev": f"first {o.ner_dev} dev sentences, in seeded halves (choose on one, report on the other)",
        "seeds": [0, 1, 2],
        "max_length": 32,
    }
    return sizes


def retrieval_mode(task: RetrievalTask, max_length: int | None = None) -> dict[str, Any]:
    """What a retrieval JSON records of its setting (``meta["data"]``): ``mode`` (``full`` or ``quick``),
    whether its scores compare with MTEB's, the cut (quick mode), the sizes and the token limit.

    Args:
        task: the loaded task.
        max_length: tokens per text, documents longer than that truncated (``None``: the encoder's own).
    """
    if task.quick is None:
        corpus = (f"full: all {len(task.corpus):,} documents and all {len(task.choose) + len(task.report):,} test "
                  "queries, as MTEB scores them (the reported mean is over half the queries)")  # fmt: skip
    else:
        corpus = f"QUICK MODE, not comparable with MTEB scores: {task.quick}"
    limit = "the encoder's own limit" if max_length is None else f"{max_length} tokens"
    return {
        "mode": task.mode, "mteb_comparable": task.quick is None, "corpus": corpus,
        "n_choose_queries": len(task.choose), "n_report_queries": len(task.report), "n_documents": len(task.corpus),
        "truncation": f"every text cut to {limit} (longer documents keep their beginning)",
    }  # fmt: skip


def _run_baseline(
    o: StudyOptions, tasks: Mapping[str, Task], sizes: Mapping[str, Any], meta: Mapping[str, Any]
) -> None:
    """A trained encoder (``o.model`` names a baseline) on every task: its reporting score, nothing to choose."""
    from nosink.evals.baselines import TokenFeatures, baseline_folder

    folder = baseline_folder(o.model)
    for key, task in tasks.items():
        data = sizes[key]
        if isinstance(task, RetrievalTask):  # a trained encoder cuts texts at its own max_seq_length
            data = {**data, "max_length": None} | retrieval_mode(task)
        baseline_task(folder, task, o.out / f"{key}.json", meta | {"data": data}, show_progress_bar=o.progress)
    if "ner" in o.tasks:
        train, dev = _conll(o.data, o.ner_train, o.ner_dev)
        cands = [Candidate("F*", "F*")]
        result = ner_study(TokenFeatures(folder), train, dev, cands)
        write_json(o.out / "ner.json", ner_payload(result, cands, meta | {"data": sizes["ner"]}))


def _suggestions(
    o: StudyOptions,
    encoder: EncoderFromDecoder,
    tasks: Mapping[str, Task],
    conll: tuple[list[Any], list[Any]] | None,
    meta: dict[str, Any],
) -> tuple[Candidate, dict[str, Selection]]:
    """``suggest_spec``'s candidate (recorded in ``meta["suggestion"]``), and with ``o.select`` each task's
    selection stage's, which stands in for it on that task."""
    from nosink.evals.sinks import sink_profile

    texts = _sink_texts(o.data)
    suggestion, why = suggestion_for(encoder, texts)
    meta["suggestion"] = why | {"profile_texts": len(texts)}
    selections: dict[str, Selection] = {}
    if o.select:
        profile = sink_profile(encoder, texts)
        for key, task in tasks.items():
            chosen, record = selection_for(encoder, profile, task, o.select, o.seed, o.batch_size)
            selections[key] = chosen, record | {"profile_texts": len(texts), "midpoint": why}
        if conll is not None:
            chosen, record = ner_selection_for(encoder, profile, *conll, o.select, o.seed, show_progress_bar=o.progress)
            selections["ner"] = chosen, record | {"profile_texts": len(texts), "midpoint": why}
    return suggestion, selections


def _run_ner(
    o: StudyOptions,
    encoder: EncoderFromDecoder,
    conll: tuple[list[Any], list[Any]],
    candidates: Sequence[Candidate],
    suggestion: Candidate | None,
    meta: Mapping[str, Any],
) -> None:
    """The NER study of the grid (and the suggestion), then the exits of the chosen specs; writes ``ner.json``
    with ``meta``."""
    train, dev = conll
    ner_cands = list(candidates) + ([suggestion] if suggestion is not None else [])
    if "F*" in o.exit_configs:  # F*'s exits share every layer with F*: they come free in the first pass
        ner_cands += exit_candidates(Candidate("F*", "F*"), encoder.depth, o.exits)
    result = ner_study(encoder, train, dev, ner_cands, show_progress_bar=o.progress)
    chosen = choose_by_config({c: result.choose[c] for c in ner_cands if c.exit_layer is None})
    if o.exits:
        configs = [f for f in exit_configs_of(o.exit_configs, chosen, result.choose) if f != "F*"]
        more = [c for f in configs for c in exit_candidates(chosen[f], encoder.depth, o.exits)]
        if more:
            extra = ner_study(encoder, train, dev, more, show_progress_bar=o.progress)
            result.choose.update(extra.choose)
            result.report.update(extra.report)
            result.per_seed.update(extra.per_seed)
            result.seconds += extra.seconds
            ner_cands += more
    write_json(o.out / "ner.json", ner_payload(result, ner_cands, meta))


def _check_data(data: Path, tasks: Sequence[str], suggestion: bool = False) -> None:
    """Refuse a ``--data`` that is not a folder, or lacks a folder the tasks (or the suggestion) read,
    before any model loads."""
    needed = {folder: task for task in tasks for folder in TASK_FOLDERS.get(task, ())}  # folder -> a task needing it
    if suggestion:
        needed.setdefault("stsb", "the suggestion's sink profile, or give --no-suggestion")
    if not data.is_dir():
        folders = ", ".join(f"{folder}/" for folder in needed)
        raise FileNotFoundError(f"no data folder at {printable(str(data))}: --data names the folder holding {folders}")
    missing = [f"{folder}/ (for {task})" for folder, task in needed.items() if not (data / folder).is_dir()]
    if missing:
        raise FileNotFoundError(f"the data folder {printable(str(data))} has no {', '.join(missing)}")


def _sink_texts(data: Path, n: int = 16) -> list[str]:
    # The sink profile reads STS-B *train* sentences: no text the study chooses or reports on.
    from nosink.evals.mteb_data import _read_stsb

    return list(_read_stsb(data / "stsb")["train"]["sentence1"][:n])


def _conll(data: Path, n_train: int, n_dev: int) -> tuple[list[Any], list[Any]]:
    from nosink.evals.ner import load_conll

    return load_conll(data / "conll2003", "train")[:n_train], load_conll(data / "conll2003", "dev")[:n_dev]
