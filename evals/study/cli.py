"""The study's command line: ``python -m nosink.evals.study`` and ``nosink eval study`` share these arguments."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import fields

from nosink.checks import count_arg, printable

from .candidates import EXIT_CONFIGS, GRID_CONFIGS, NO_TEMPLATE
from .driver import run
from .options import StudyOptions

__all__ = ["add_arguments", "main", "options_from_args"]


def _template_name(text: str) -> str:
    """An argparse ``type``: :data:`NO_TEMPLATE` or a preset's name (any case; ``-``, ``_`` ignored), as spelt there."""
    from nosink.models.templates import PRESETS, by_name

    if text == NO_TEMPLATE:
        return text
    try:
        return by_name(text).name
    except ValueError:
        known = ", ".join([NO_TEMPLATE, *PRESETS])
        raise argparse.ArgumentTypeError(f"unknown template {printable(repr(text))}; expected one of {known}") from None


def add_arguments(parser: argparse.ArgumentParser, data_env: str | None = None) -> None:
    """Add the study's arguments to ``parser``: ``python -m nosink.evals.study`` and ``nosink eval study`` share them.

    Args:
        parser: the parser (or subparser) to add them to; :func:`options_from_args` turns what it parses into
            the options :func:`run` takes.
        data_env: an environment variable that names the data folder when ``--data`` is not given (the caller
            reads it after parsing); without one, ``--data`` is required.
    """
    from nosink.models.weights import MODELS

    defaults = StudyOptions  # the options' defaults are the flags' (a dataclass keeps them on the class)
    where = f"; default: ${data_env}" if data_env else ""
    parser.add_argument("model", help=f"a decoder (a folder, a hub id, or {', '.join(MODELS)}), or a baseline's "
                        "name (all-MiniLM-L6-v2, all-mpnet-base-v2)")  # fmt: skip
    parser.add_argument("--data", required=data_env is None,
                        help="the folder holding stsb/, sts17/, banking77/, emotion/, massive_intent/, nfcorpus/, "
                        f"scifact/, conll2003/{where}")  # fmt: skip
    parser.add_argument("--out", required=True, help="the folder for the JSON files (one per task)")
    tasks = ["sts", "sts17", "banking77", "emotion", "massive", "nfcorpus", "scifact", "ner"]
    parser.add_argument("--tasks", nargs="+", default=list(defaults.tasks), choices=tasks)
    parser.add_argument("--templates", nargs="+", type=_template_name, default=list(defaults.templates),
                        help=f"'{NO_TEMPLATE}' (mean pooling, the task's instruction) or template presets")  # fmt: skip
    parser.add_argument(
        "--ks", type=count_arg(), nargs="+", help="converted layers (default: depth/4, depth/2, 2 depth/3)"
    )
    parser.add_argument(
        "--k0s",
        type=count_arg(),
        nargs="+",
        default=list(defaults.k0s),
        help="top layers that also hide the sink (k0 = 0 is F* | B*k, already in the grid)",
    )
    # --families and --exit-families: the flags' first names, still taken
    parser.add_argument("--configs", "--families", dest="configs", nargs="+", choices=GRID_CONFIGS,
                        default=list(defaults.configs),
                        help="the paper's configurations to sweep over --ks beside F* (MASK0-ALL is one spec, M0B*; "
                        "MASK0&BIDIR also sweeps --k0s)")  # fmt: skip
    parser.add_argument("--report-grid", action="store_true",
                        help="score every grid spec on the reporting split too, not only each config's chosen one "
                        "(the configs' curves over k, with paired comparisons along k; NER always does)")  # fmt: skip
    parser.add_argument("--exits", type=count_arg(), nargs="*", default=list(defaults.exits), help="exit layers to try")
    parser.add_argument("--exit-configs", "--exit-families", dest="exit_configs", nargs="+", choices=EXIT_CONFIGS,
                        default=list(defaults.exit_configs),
                        help="configs whose chosen spec is tried at --exits ('best': the converted config that "
                        "scores best on the choosing split; the others must be in --configs)")  # fmt: skip
    parser.add_argument("--exit-templates", nargs="*", type=_template_name, default=list(defaults.exit_templates),
                        help="templates whose chosen specs are tried at --exits")  # fmt: skip
    parser.add_argument(
        "--restricted",
        nargs="*",
        type=_template_name,
        default=list(defaults.restricted),
        help="templates scored only at the specs the first template chose (no grid of their own)",
    )
    parser.add_argument(
        "--sts-choose", type=count_arg(2), default=defaults.sts_choose, help="STS-B dev pairs to choose on"
    )
    parser.add_argument("--sts-report", type=count_arg(2), help="STS-B test pairs to report on (default all 1,379)")
    parser.add_argument("--cls-train", type=count_arg(), default=defaults.cls_train)
    parser.add_argument("--cls-test", type=count_arg(), default=defaults.cls_test)
    parser.add_argument(
        "--cls-validation",
        type=count_arg(),
        default=defaults.cls_validation,
        help="MASSIVE validation items to choose on",
    )
    quick = "quick mode: the scores no longer compare with MTEB's, and every output says so"
    parser.add_argument("--ret-queries", type=count_arg(2),
                        help=f"retrieval test queries, in halves (default all; fewer: {quick})")  # fmt: skip
    parser.add_argument("--ret-other", type=count_arg(0),
                        help="keep only the judged documents and N seeded random others in the retrieval corpus "
                        f"(default: the full corpus; {quick})")  # fmt: skip
    parser.add_argument("--ret-doc-words", type=count_arg(),
                        help=f"cut retrieval documents to their first N words (default: no cut; {quick})")  # fmt: skip
    parser.add_argument("--ner-train", type=count_arg(), default=defaults.ner_train)
    parser.add_argument("--ner-dev", type=count_arg(2), default=defaults.ner_dev)
    parser.add_argument("--seed", type=count_arg(0), default=defaults.seed)
    parser.add_argument("--batch-size", type=count_arg(), default=defaults.batch_size, help="texts per forward pass")
    parser.add_argument("--max-length", type=count_arg(), default=defaults.max_length,
                        help="tokens per text; a longer one (a retrieval document) keeps its beginning")  # fmt: skip
    parser.add_argument("--no-suggestion", action="store_true")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bars (by default each long encoding pass shows one on stderr)")  # fmt: skip
    parser.add_argument("--select", type=count_arg(2, zero="no selection stage"), default=defaults.select, metavar="N",
                        help="score the sink profile's candidate specs (nosink.evals.sinks.candidate_specs) on N "
                        "choosing pairs (STS), training items (classification) or training sentences (NER, "
                        "scored on the choosing half of dev) and report the best as the suggestion (default 0: "
                        "suggest_spec's spec)")  # fmt: skip


def options_from_args(args: argparse.Namespace) -> StudyOptions:
    """The :class:`StudyOptions` of a namespace parsed with :func:`add_arguments`: the one place the study reads one.

    Raises:
        ValueError: as :class:`StudyOptions` does, for options that cannot go together.
    """
    values = vars(args)
    given = {f.name: values[f.name] for f in fields(StudyOptions) if f.name in values}
    return StudyOptions(**given, suggestion=not values["no_suggestion"])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nosink.evals.study``: the study of one model (or baseline) on the chosen tasks."""
    parser = argparse.ArgumentParser(prog="python -m nosink.evals.study", description=main.__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    command = "python -m nosink.evals.study " + " ".join(sys.argv[1:] if argv is None else argv)
    return run(options_from_args(args), command)
