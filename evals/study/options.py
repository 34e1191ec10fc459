"""The study's options: one frozen value that :func:`~nosink.evals.study.run` reads, built once from the CLI."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from .candidates import DEFAULT_CONFIGS, NO_TEMPLATE

__all__ = ["StudyOptions"]


@dataclass(frozen=True)
class StudyOptions:
    """What one study runs: the model, the data, the tasks, the grid, the templates, the exits and the sample sizes.

    The defaults are the command line's (``python -m nosink.evals.study -h`` describes each option); sequences
    are kept as tuples. ``None`` for a sample size means all of the split.

    Raises:
        ValueError: for a ``select`` sample of 1 or below 0, a ``select`` without ``suggestion``, or an exit
            config that is neither ``F*``, ``best`` nor one of ``configs``.
    """

    model: str  # a decoder (folder, hub id or short name) or a baseline's name
    data: Path  # the folder holding stsb/, sts17/, banking77/, ...
    out: Path  # the folder for the JSON files, one per task
    tasks: Sequence[str] = ("sts",)
    templates: Sequence[str] = (NO_TEMPLATE, "PromptEOL", "PretendedCoT", "KnowledgeEnhancement", "Echo", "MetaEOL")
    ks: Sequence[int] | None = None  # converted layers; None: depth/4, depth/2, 2 depth/3
    k0s: Sequence[int] = (1, 2, 4)  # top layers that also hide the sink (MASK0&BIDIR)
    configs: Sequence[str] = DEFAULT_CONFIGS[1:]  # swept beside F*
    report_grid: bool = False  # score every grid spec on the reporting split too
    exits: Sequence[int] = ()  # exit layers to try
    exit_configs: Sequence[str] = ("F*", "best")  # configs whose chosen spec is tried at the exits
    exit_templates: Sequence[str] = (NO_TEMPLATE,)  # templates whose chosen specs are tried at the exits
    restricted: Sequence[str] = ("MetaEOL",)  # templates scored only at the first template's choices
    sts_choose: int | None = 300  # STS-B dev pairs to choose on
    sts_report: int | None = None  # STS-B test pairs to report on
    cls_train: int | None = 1000
    cls_test: int | None = 1000
    cls_validation: int | None = 1000  # MASSIVE validation items to choose on
    # retrieval: the full corpus and every test query by default (MTEB's setting); any of these three is the
    # labelled quick mode, whose scores do not compare with MTEB's
    ret_queries: int | None = None  # retrieval test queries, in halves
    ret_other: int | None = None  # unjudged documents kept beside the judged ones
    ret_doc_words: int | None = None  # documents cut to their first N words
    ner_train: int = 1000  # the first N CoNLL-2003 train sentences
    ner_dev: int = 1000  # the first N dev sentences, in halves
    seed: int = 0
    batch_size: int = 32  # texts per forward pass
    max_length: int = 512  # tokens per text; longer ones (retrieval documents) keep their beginning
    suggestion: bool = True  # score suggest_spec's spec (or the selection stage's) beside the grid
    progress: bool = True  # a progress bar on stderr for each long encoding pass
    select: int = 0  # the selection stage's sample size; 0: none, the suggestion is suggest_spec's

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, list):
                object.__setattr__(self, f.name, tuple(value))
        object.__setattr__(self, "data", Path(self.data))
        object.__setattr__(self, "out", Path(self.out))
        if self.select < 0 or self.select == 1:
            raise ValueError(f"--select takes the sample size, at least 2 (0: no selection stage), got {self.select}")
        if self.select and not self.suggestion:
            raise ValueError("--select picks the suggestion: it cannot go with --no-suggestion; drop one of them")
        outside = [f for f in self.exit_configs if f not in ("F*", "best", *self.configs)]
        if outside:
            raise ValueError(
                f"--exit-configs {' '.join(outside)}: not swept, so never chosen; add them to --configs "
                f"(now {' '.join(self.configs)}) or drop them"
            )
