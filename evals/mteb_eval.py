"""The paper's MTEB evaluation (section 3.2, appendix B): one import for all of it.

mteb (2.x) loads the tasks, calls the encoder and computes every metric; nosink only turns texts
into vectors the way the paper does and feeds mteb data it cannot fetch itself. The pieces:

* :mod:`nosink.evals.mteb_tasks`: the paper's tasks and instructions, task-name checks, which tasks
  are normalised.
* :mod:`nosink.evals.mteb_data`: local copies of task data (``data_dir``), else the hub.
* :mod:`nosink.evals.mteb_model`: the mteb model around :class:`EncoderFromDecoder`, and the cache that
  encodes a sweep's texts once for all its specs.
* :mod:`nosink.evals.mteb_subsample`: ``limit``, every split cut to a seeded random subset.
* :mod:`nosink.evals.mteb_run`: :func:`run_mteb`, the run and its summary (a single spec runs as a
  sentence-transformers model where sentence-transformers is installed), and :func:`paper_prompts`,
  the paper's instructions as mteb prompt keys.

mteb is imported lazily (it is the optional ``eval`` extra), so importing this module is cheap.
"""

from __future__ import annotations

from .mteb_data import LOCAL_FOLDERS, load_local_data, load_task_data
from .mteb_model import NosinkMTEBEncoder, SpecSweepCache, template_name
from .mteb_run import paper_prompts, run_mteb
from .mteb_subsample import subsample
from .mteb_tasks import PAPER_TASKS, STS_INSTRUCTION, format_instruction, normalizes, resolve_tasks, task_instruction

__all__ = [
    "LOCAL_FOLDERS",
    "PAPER_TASKS",
    "STS_INSTRUCTION",
    "NosinkMTEBEncoder",
    "SpecSweepCache",
    "format_instruction",
    "load_local_data",
    "load_task_data",
    "normalizes",
    "paper_prompts",
    "resolve_tasks",
    "run_mteb",
    "subsample",
    "task_instruction",
    "template_name",
]
