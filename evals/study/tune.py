"""``nosink tune``: the study's protocol on a user's own data, ending in an encoder folder that holds the choice.

The engine is the study's: the grid of :func:`~nosink.evals.study.grid` and the specs the stock model's sink
profile suggests (:func:`~nosink.evals.sinks.candidate_specs`, config ``SUGGESTED``), scored per template on
the choosing split by :func:`~nosink.evals.study.run_template` (early exits of ``F*`` and of the best converted
config included), every candidate reported on the other split with a bootstrap interval. The choice is the
(template, spec, exit) with the best choosing score; the reporting split only reports it, beside ``F*`` and
beside the best configuration on the reporting split (which tells how much choosing on the other half cost).

Token Prepending depths are a dimension of the grid (:attr:`TuneOptions.prepends`): each depth runs the whole
grid again through an encoder that prepends (over the same weights), since plans that prepend and plans that do
not cannot share a batch. A tokenizer without a BOS token gets its end-of-text token as the sink token there
(the placeholder follows the sink token).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from nosink.checks import printable
from nosink.evals import stats

from .candidates import DEFAULT_CONFIGS, NO_TEMPLATE, Candidate, exit_candidates, grid
from .results import Scored, TemplateResult, write_json
from .runner import run_template
from .userdata import FORMATS, TUNE_TASKS, load_user_ner, load_user_task

__all__ = ["TuneOptions", "TuneResult", "Tried", "tune"]

logger = logging.getLogger(__name__)

REPORT_FILE = "tune.json"  # written into the encoder folder beside nosink.json


@dataclass(frozen=True)
class TuneOptions:
    """What ``nosink tune`` tries, on which data, within which budget.

    Raises:
        ValueError: for an unknown task or template, a budget below 1, minutes not above 0, or a
            Token Prepending depth below 1.
    """

    model: str  # a decoder: a folder, a hub id or a short name ("demo")
    task: str  # one of TUNE_TASKS
    data: Path  # the file (or BEIR folder) userdata.FORMATS describes
    out: Path  # the encoder folder to write
    budget: int | None = None  # at most this many texts encoded (each prompt of a template counts)
    minutes: float | None = None  # stop starting templates that would end after this many minutes
    templates: Sequence[str] = (NO_TEMPLATE, "PromptEOL", "PretendedCoT", "Echo")  # tried in this order
    ks: Sequence[int] | None = None  # converted layers; None: depth/4, depth/2, 2 depth/3
    k0s: Sequence[int] = (1, 2, 4)
    configs: Sequence[str] = DEFAULT_CONFIGS[1:]
    exits: Sequence[int] | None = None  # exit layers; None: half and three quarters of the depth
    prepends: Sequence[int | None] = (None,)  # Token Prepending depths k (layers 1..k); None: none
    instruction: str | None = None  # before every text without a template (queries only, for retrieval)
    profile_texts: int = 16  # choosing-split texts the sink profile reads
    sink_token: str | None = None  # None: the token the model attends most (sinks.choose_sink_token); else fixed
    seed: int = 0
    batch_size: int = 32
    max_length: int = 512
    progress: bool = True

    def __post_init__(self) -> None:
        from nosink.models.templates import as_template

        for f in fields(self):
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        object.__setattr__(self, "data", Path(self.data))
        object.__setattr__(self, "out", Path(self.out))
        if self.task not in TUNE_TASKS:
            raise ValueError(f"unknown task {printable(repr(self.task))}; expected one of {', '.join(TUNE_TASKS)}")
        if self.budget is not None and self.budget < 1:
            raise ValueError(f"the budget is a number of texts, at least 1, got {self.budget}")
        if self.minutes is not None and not self.minutes > 0:
            raise ValueError(f"minutes must be above 0, got {self.minutes}")
        for depth in self.prepends:
            if depth is not None and (type(depth) is not int or depth < 1):
                raise ValueError(f"a Token Prepending depth is a number of layers, at least 1 (or None), got {depth!r}")
        if not self.prepends:
            raise ValueError("give at least one Token Prepending depth (None: no prepending)")
        if not self.templates:
            raise ValueError("give at least one template (instruction: mean pooling without one)")
        for t in self.templates:
            if t != NO_TEMPLATE:
                as_template(t)


@dataclass(frozen=True)
class Tried:
    """One configuration tune scored: a template (or none), a candidate spec (maybe with an exit), a prepend depth.

    ``prepend`` is the Token Prepending depth ``k`` (layers ``1..k``); ``None``: no prepending.
    """

    template: str
    scored: Scored
    prepend: int | None = None

    @property
    def choose(self) -> float:
        """The score on the choosing split."""
        return float("-inf") if self.scored.choose is None else self.scored.choose

    def row(self, seed: int = 0) -> dict[str, Any]:
        """A flat dict for JSON (the reported score with its 95% interval)."""
        return {"template": self.template, "prepend": self.prepend, **self.scored.row(seed)}


@dataclass
class TuneResult:
    """What :func:`tune` chose and how it scored.

    Attributes:
        chosen: the configuration with the best choosing score.
        baseline: ``F*`` without a template (mean pooling): the unconverted model; where no configuration without a
            template was tried, ``F*`` in the first template tried; where every pass prepends (``--prepends`` without
            0), ``F*`` at the first depth.
        best_reported: the configuration with the best reporting score (read only, never chosen by it).
        tried: every configuration scored on both splits.
        skipped: templates left out to keep within the budget or the minutes.
        texts_encoded: texts run through the encoder (a template of several prompts counts each).
        seconds: wall time from loading the data to writing the folder.
        folder: the encoder folder written.
        payload: the JSON written beside it (``tune.json``).
        sink_token: the folder's sink token (``"auto"``: the tokenizer's BOS token).
        sink_choice: how it was chosen (each candidate's share of attention); None where it was given.
    """

    chosen: Tried
    baseline: Tried
    best_reported: Tried
    tried: list[Tried]
    skipped: list[str]
    texts_encoded: int
    seconds: float
    folder: Path
    payload: dict[str, Any] = field(default_factory=dict)
    sink_token: str = "auto"
    sink_choice: Any = None  # a nosink.evals.sinks.SinkChoice


def tune(options: TuneOptions, command: str = "") -> TuneResult:
    """Choose a spec, template and exit layer for ``options.model`` on ``options.data``; write the encoder folder.

    Args:
        options: the model, task, data, output folder, grid and budget.
        command: the command line, recorded in ``tune.json``.

    Raises:
        FileNotFoundError: for missing data (before any model loads).
        ValueError: for data in another format (:data:`~nosink.evals.study.userdata.FORMATS`), or a budget too
            small for one template on this data (saying how many texts one needs).
        FileExistsError: if ``options.out`` is a file or a folder that is not a saved encoder (before any model loads).
        PermissionError: if ``options.out`` cannot be written (before any model loads).
    """
    import torch

    from nosink.evals.sinks import profile_ready
    from nosink.models import EncoderFromDecoder
    from nosink.models.saved import check_save_target
    from nosink.models.weights import MODELS, model_path

    o = options
    start = time.perf_counter()
    check_save_target(o.out)  # now, not after the whole run: the folder written at the end must be writable
    task = load_user_ner(o.data, o.seed) if o.task == "ner" else load_user_task(o.task, o.data, o.seed)
    if o.instruction is not None and o.task != "ner":
        from dataclasses import replace

        key = "query_instruction" if o.task == "retrieval" else "instruction"
        task = replace(task, **{key: o.instruction})
    model = model_path(o.model) if o.model in MODELS else o.model
    fixed = {} if o.sink_token is None else {"sink_token": o.sink_token}
    encoder = EncoderFromDecoder.from_pretrained(model, "F*", dtype=torch.float32, **fixed)
    exits = [max(1, encoder.depth // 2), max(1, 3 * encoder.depth // 4)] if o.exits is None else list(o.exits)
    _check_grid(encoder.depth, exits, o.prepends, o.exits is None)  # now, not after a whole pass
    choose_texts = [" ".join(s.words) for s in task[0]] if o.task == "ner" else task.texts("choose")
    # choosing-split texts only (nothing reported is read), long enough for the profile
    profile_texts = profile_ready(encoder, choose_texts[: 4 * o.profile_texts])[: o.profile_texts]
    encoded = len(profile_texts)
    choice = _choose_sink(encoder, profile_texts) if o.sink_token is None else None
    if choice is not None:
        encoded += choice.texts * len(choice.masses)
        if choice.sink_token != encoder.sink_token:
            encoder = EncoderFromDecoder.from_model(
                encoder.decoder, "F*", encoder.tokenizer, sink_token=choice.sink_token
            )
            profile_texts = profile_ready(encoder, choose_texts[: 4 * o.profile_texts])[: o.profile_texts]
    candidates = _candidates(encoder, o, profile_texts)
    tried, skipped = [], []
    for i, depth in enumerate(o.prepends):
        runner = encoder if depth is None else prepending(encoder, depth)
        first = i == 0  # a budget too small for the first pass is an error; later passes are left out
        if o.task == "ner":
            more, left_out, cost = _tune_ner(runner, task, candidates, exits, o, encoded, first)
        else:
            more, left_out, cost = _tune_templates(runner, task, candidates, exits, o, start, encoded, first)
        tried += [Tried(t.template, t.scored, depth) for t in more]
        skipped += [name if depth is None else f"{name} @ prepend {depth}" for name in left_out]
        encoded += cost
    reported = [t for t in tried if t.scored.report is not None]
    chosen = max(reported, key=lambda t: t.choose)  # the first of equal scores
    # F* without a template; where that was not tried (--templates without "instruction"), F* in the first template
    # (and without prepending; with --prepends that leave none out, F* at the first depth)
    stock = [t for t in reported if t.scored.candidate == Candidate("F*", "F*")]
    baseline = min(stock, key=lambda t: (t.prepend is not None, t.template != NO_TEMPLATE))  # the first of equals
    best = max(reported, key=lambda t: t.scored.report())  # type: ignore[misc]
    c = chosen.scored.candidate
    template = None if chosen.template == NO_TEMPLATE else chosen.template
    sink = encoder.sink_token if chosen.prepend is None else _prepend_sink(encoder)
    EncoderFromDecoder.from_model(
        encoder.decoder, c.spec, encoder.tokenizer, sink_token=sink, exit_layer=c.exit_layer,
        template=template, prepend=chosen.prepend,
    ).save_pretrained(o.out)  # fmt: skip
    result = TuneResult(chosen, baseline, best, tried, skipped, encoded, time.perf_counter() - start, o.out)
    result.sink_token, result.sink_choice = sink, choice
    result.payload = _payload(result, o, command, encoder.depth, model)
    write_json(o.out / REPORT_FILE, result.payload)
    return result


def _choose_sink(encoder: Any, texts: Sequence[str]) -> Any:
    """The sink token the model attends most (MASK0 and prepending need a real sink), the encoder's own first so that
    it wins a tie; None where no candidate gives a token (the model's first text token is then its sink)."""
    from nosink.evals.sinks import choose_sink_token, sink_candidates

    try:
        return choose_sink_token(encoder, texts, [encoder.sink_token, *sink_candidates(encoder.tokenizer)])
    except ValueError as err:
        logger.warning("no sink token to choose (%s); tuning without one", err)
        return None


def _prepend_sink(encoder: Any) -> str:
    """The sink token an encoder that prepends needs: the encoder's own, else the end-of-text token."""
    if encoder.tokenizer is None or getattr(encoder.tokenizer, "bos_token", None) or encoder.sink_token != "auto":
        return encoder.sink_token
    eos = getattr(encoder.tokenizer, "eos_token", None)
    if not eos:
        raise ValueError("Token Prepending needs a sink token, and this tokenizer has neither BOS nor EOS token")
    return eos


def prepending(encoder: Any, depth: int) -> Any:
    """An encoder over the same weights that prepends before layers ``1..depth`` (its plan ``F*``: candidates give
    the specs), first token the encoder's sink, else the end-of-text token when the tokenizer has no BOS."""
    from nosink.models import EncoderFromDecoder

    return EncoderFromDecoder.from_model(
        encoder.decoder, "F*", encoder.tokenizer, sink_token=_prepend_sink(encoder), prepend=depth
    )


def _candidates(encoder: Any, o: TuneOptions, texts: Sequence[str]) -> list[Candidate]:
    """The study's grid, then the sink profile's specs that are not in it (config ``SUGGESTED``)."""
    from nosink.evals.sinks import candidate_specs, sink_profile

    out = grid(encoder.depth, o.ks, o.k0s, o.configs)
    seen = {c.spec for c in out}
    for s in candidate_specs(sink_profile(encoder, list(texts)), encoder.depth):
        if str(s.spec) not in seen:
            seen.add(str(s.spec))
            out.append(Candidate("SUGGESTED", str(s.spec)))
    return out


def _check_grid(depth: int, exits: Sequence[int], prepends: Sequence[int | None], defaulted: bool) -> None:
    """Refuse exits and prepend depths that do not fit the model, or each other, before anything runs.

    Raises:
        ValueError: naming the options (``--exits``, ``--prepends``) and the model's depth.
    """
    for exit_layer in exits:
        if not 1 <= exit_layer <= depth:
            raise ValueError(f"the exit layer {exit_layer} (--exits) is not in 1..{depth}, this model's layers")
    for k in prepends:
        if k is None:
            continue
        if k >= depth:
            raise ValueError(f"Token Prepending before layers 1..{k} (--prepends {k}) leaves none of this model's "
                             f"{depth} layers after it: give depths below {depth}")  # fmt: skip
        low = [e for e in exits if e <= k]
        if low:
            raise ValueError(
                f"Token Prepending before layers 1..{k} (--prepends {k}) runs past the early exit at layer {low[0]} "
                f"(--exits{', by default' if defaulted else ''}: {', '.join(map(str, exits))}): give exits above "
                f"{k}, or --exits with no value for none"
            )


def _cost(task: Any, exits: Sequence[int], prompts: int) -> int:
    """At most how many texts one template encodes: the choosing texts (twice with exits: the best config's exits
    need a pass of their own), then the reporting texts, each prompt of the template counted."""
    choose, report = task.texts("choose"), task.texts("report")
    return prompts * (len(choose) * (2 if exits else 1) + len(set(report) - set(choose)))


def _tune_templates(
    encoder: Any,
    task: Any,
    candidates: Sequence[Candidate],
    exits: Sequence[int],
    o: TuneOptions,
    start: float,
    spent: int = 0,
    first: bool = True,
) -> tuple[list[Tried], list[str], int]:
    """Each template's :func:`run_template` (every candidate reported), while the budget and the minutes allow.

    ``spent``: texts already encoded by earlier passes (other prepend depths, the sink profile); returns the
    configurations tried, the templates left out and the texts this call encoded.
    """
    from nosink.models.templates import as_template

    tried: list[Tried] = []
    skipped: list[str] = []
    encoded = 0
    per_text: float | None = None  # seconds per encoded text, measured on the templates run so far
    for name in o.templates:
        prompts = 1 if name == NO_TEMPLATE else len(as_template(name).formats)  # type: ignore[union-attr]
        cost = _cost(task, exits, prompts)
        over_budget = o.budget is not None and spent + encoded + cost > o.budget
        late = (
            o.minutes is not None and per_text is not None
            and time.perf_counter() - start + cost * per_text > 60 * o.minutes
        )  # fmt: skip
        if over_budget or late:
            if not tried and first:
                raise ValueError(
                    f"a budget of {o.budget} texts is below the {cost + o.profile_texts} that the first template "
                    f"({name}) needs on this data ({len(task.texts('choose'))} texts to choose on, "
                    f"{len(task.texts('report'))} to report on, the sink profile's {o.profile_texts}); raise "
                    "--budget, or pass less data"
                )
            skipped.append(name)
            continue
        result = run_template(
            encoder, task, candidates, None if name == NO_TEMPLATE else name, exits=exits,
            exit_configs=("F*", "best"), batch_size=o.batch_size, report_grid=True,
            show_progress_bar=o.progress, max_length=o.max_length,
        )  # fmt: skip
        encoded += result.texts_encoded * prompts
        per_text = (time.perf_counter() - start) / max(spent + encoded, 1)
        tried += [Tried(name, s) for s in _scored(result)]
        logger.info("tune: %s done, %d texts encoded so far", name, encoded)
    return tried, skipped, encoded


def _scored(result: TemplateResult) -> list[Scored]:
    """Every candidate of one template with both scores: the grid, then the exits, each once."""
    rows = {s.candidate: s for s in result.grid if s.report is not None}
    for scored in (s for rows_ in result.exits.values() for s in rows_):
        rows.setdefault(scored.candidate, scored)
    return list(rows.values())


def _tune_ner(
    encoder: Any,
    data: tuple[list[Any], list[Any]],
    candidates: Sequence[Candidate],
    exits: Sequence[int],
    o: TuneOptions,
    spent: int = 0,
    first: bool = True,
) -> tuple[list[Tried], list[str], int]:
    """The NER study's probes (one seed) on the grid and ``F*``'s exits: one feature pass over every sentence."""
    from .ner import ner_study

    train, dev = data
    cost = len(train) + len(dev)
    if o.budget is not None and spent + cost > o.budget:
        if not first:  # a later prepend depth: left out, as a template would be
            return [], ["instruction"], 0
        raise ValueError(
            f"a budget of {o.budget} texts is below the {cost + o.profile_texts} that NER needs on this data "
            f"({len(train)} training and {len(dev)} evaluation sentences, the sink profile's {o.profile_texts}); "
            "raise --budget, or pass less data"
        )
    cands = [*candidates, *exit_candidates(Candidate("F*", "F*"), encoder.depth, exits)]
    result = ner_study(encoder, train, dev, cands, seeds=(o.seed,), show_progress_bar=o.progress)
    return [Tried(NO_TEMPLATE, Scored(c, result.choose[c], result.report[c])) for c in cands], [], cost


def _payload(result: TuneResult, o: TuneOptions, command: str, depth: int, model: str) -> dict[str, Any]:
    """``tune.json``: the choice, ``F*`` and the best reported configuration with intervals, every row, the cost."""
    chosen, baseline = result.chosen.scored.report, result.baseline.scored.report
    assert chosen is not None and baseline is not None
    versus = stats.compare(chosen, baseline, seed=o.seed)
    return {
        "model": Path(model).name, "task": o.task, "data": str(o.data), "command": command, "depth": depth,
        "data_format": FORMATS[o.task], "seed": o.seed, "instruction": o.instruction,
        "protocol": "chosen on the choosing split by the best score there; reported on the other split with "
                    "95% bootstrap intervals (1,000 resamples)",
        "chosen": result.chosen.row(o.seed), "F*": result.baseline.row(o.seed),
        "best_reported": result.best_reported.row(o.seed),
        "chosen_minus_F*": {"delta": versus.delta.estimate, "low": versus.delta.low, "high": versus.delta.high,
                            "p_value": versus.p_value},
        "tried": [t.row(o.seed) for t in result.tried], "skipped_templates": result.skipped,
        "sink_token": result.sink_token,
        "sink_attention": None if result.sink_choice is None else {
            k: round(v, 4) for k, v in result.sink_choice.masses.items()
        },
        "texts_encoded": result.texts_encoded, "budget": o.budget, "minutes": o.minutes,
        "seconds": round(result.seconds, 1),
    }  # fmt: skip
