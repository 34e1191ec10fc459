"""The study of layer specs x prompt templates x early exits, chosen on one split and reported on another.

For one model and one task the study runs, for each template (mean pooling with the task's instruction,
or a published prompt template of :mod:`nosink.models.templates`):

1. **choose**: every candidate of the grid (``F*``, INPLACE-BIDIR ``F* | B*k``, MASK0&BIDIR
   ``F* | B*(k-k0) | M0B*k0`` by default; any of :data:`GRID_CONFIGS`) is scored on the choosing split, all
   specs in one pass per batch (their shared lower layers run once); each config keeps its best spec there;
2. **report**: the kept specs (with ``report_grid``, every spec of the grid), the suggestion of
   :func:`nosink.evals.sinks.suggest_spec`, and early exits (``F*`` and the best config's spec cut after
   layer m) are scored on the reporting split, as
   :class:`~nosink.evals.stats.Statistic` values, so every reported number gets a bootstrap interval
   and any two of them a paired comparison.

Tasks: sentence similarity (:class:`STSTask`, Spearman of cosine similarities, pairs as units: STS-B,
and STS17 reported with specs chosen on STS-B dev), classification (:class:`ClassificationTask`, logistic
regression on frozen embeddings, items as units: Banking77, Emotion, MASSIVE intent) and retrieval
(:class:`RetrievalTask`, nDCG@10 by mteb's own metric code, queries as units: NFCorpus, SciFact, on their
full corpora as MTEB scores them, or a labelled quick mode);
token-level NER goes through :func:`ner_study` (linear probes, several seeds, CoNLL dev in halves).

The package, one job per module:

- ``candidates``: the candidate grid (the paper's configs as specs, :class:`Candidate`, each config's best), which
  :mod:`nosink.evals.sweeps` uses too;
- ``tasks`` and ``loaders``: the tasks and reading them from local copies of the data sets;
- ``cache``: each candidate's embeddings, every candidate in one pass;
- ``runner`` and ``results``: one template's choose-then-report run, a task's runs, and their JSON rows;
- ``ner``: the NER study; ``select``: the suggestion and the selection stage;
- ``compare`` and ``verdicts``: the paired comparisons, and how masks and templates combine (:func:`interplay`);
- ``tables`` and ``plots``: the Markdown tables and figures of the JSON files;
- ``options``, ``driver`` and ``cli``: :class:`StudyOptions`, :func:`run` (one JSON file per task) and the
  command line that builds the options (``python -m nosink.evals.study``, ``nosink eval study``);
- ``tune`` and ``userdata``: :func:`tune` (``nosink tune``), the protocol on a user's own data file, and
  reading those files.

>>> [c.name for c in grid(8, ks=[4], k0s=[1, 2])]
['F*', 'F* | B*4', 'F* | B*3 | M0B', 'F* | B*2 | M0B*2']
"""

from .cache import EmbeddingCache
from .candidates import (
    DEFAULT_CONFIGS,
    EXIT_CONFIGS,
    GRID_CONFIGS,
    NO_TEMPLATE,
    Candidate,
    best_by_config,
    choose_by_config,
    converted_layers,
    exit_candidates,
    exit_configs_of,
    grid,
)
from .cli import add_arguments, main, options_from_args
from .compare import CONFIG_COMPARISONS, comparisons, config_pairs, curve_comparisons
from .driver import TASK_FOLDERS, run
from .loaders import load_classification, load_retrieval, load_sts, load_sts17
from .ner import NER_SPLIT_SEED, NERStudy, mean_over_seeds, ner_payload, ner_study
from .options import StudyOptions
from .plots import plot_curves, plot_exits, plot_interplay, plot_retrieval, plot_study
from .results import Scored, TemplateResult, overall_choice, template_row
from .runner import baseline_task, run_template, study_task
from .select import ner_selection_for, selection_for, selection_sample, suggestion_for
from .tables import (
    comparisons_table,
    curves_table,
    exits_table,
    interplay_counts_table,
    interplay_table,
    ner_table,
    results_table,
    retrieval_setting,
    selection_table,
)
from .tasks import ClassificationTask, RetrievalTask, STSTask, Task
from .tune import TuneOptions, TuneResult, prepending, tune
from .userdata import load_user_ner, load_user_task
from .verdicts import effect, interplay

__all__ = [
    "CONFIG_COMPARISONS",
    "DEFAULT_CONFIGS",
    "EXIT_CONFIGS",
    "GRID_CONFIGS",
    "NER_SPLIT_SEED",
    "NO_TEMPLATE",
    "TASK_FOLDERS",
    "Candidate",
    "ClassificationTask",
    "EmbeddingCache",
    "NERStudy",
    "RetrievalTask",
    "STSTask",
    "Scored",
    "StudyOptions",
    "Task",
    "TemplateResult",
    "TuneOptions",
    "TuneResult",
    "add_arguments",
    "baseline_task",
    "best_by_config",
    "choose_by_config",
    "comparisons",
    "comparisons_table",
    "config_pairs",
    "converted_layers",
    "curve_comparisons",
    "curves_table",
    "effect",
    "exit_candidates",
    "exit_configs_of",
    "exits_table",
    "grid",
    "interplay",
    "interplay_counts_table",
    "interplay_table",
    "load_classification",
    "load_retrieval",
    "load_sts",
    "load_sts17",
    "load_user_ner",
    "load_user_task",
    "main",
    "mean_over_seeds",
    "ner_payload",
    "ner_selection_for",
    "ner_study",
    "ner_table",
    "options_from_args",
    "overall_choice",
    "plot_curves",
    "plot_exits",
    "plot_interplay",
    "plot_retrieval",
    "plot_study",
    "prepending",
    "results_table",
    "retrieval_setting",
    "run",
    "run_template",
    "selection_for",
    "selection_sample",
    "selection_table",
    "study_task",
    "suggestion_for",
    "template_row",
    "tune",
]
