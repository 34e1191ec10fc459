"""The paper's MTEB tasks and how each is prompted (section 3.2, appendix B, table 3).

* **Instructions** (E5 style): ``"Instruct: {task}\\nQuery: "`` before the text, excluded from mean
  pooling. Retrieval and reranking put it on queries only (documents get none); STS,
  classification, clustering and pair classification put it on every input.
* **Normalisation**: L2-normalised embeddings, except for classification (the paper's protocol).
* **Task names** are checked against mteb's registry before anything runs (:func:`resolve_tasks`).

>>> format_instruction("Retrieve semantically similar text.")
'Instruct: Retrieve semantically similar text.\\nQuery: '
>>> len(PAPER_TASKS), PAPER_TASKS["STSBenchmark"]
(14, 'Retrieve semantically similar text.')
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nosink.checks import printable

if TYPE_CHECKING:
    from mteb import AbsTask, TaskMetadata

__all__ = [
    "PAPER_TASKS",
    "STS_INSTRUCTION",
    "format_instruction",
    "normalizes",
    "resolve_tasks",
    "task_instruction",
]

STS_INSTRUCTION = "Retrieve semantically similar text."
"""The one instruction of every STS task (table 3's "STS*")."""

# The paper's MTEB subset and its instructions (appendix B, table 3; the E5-mistral instructions).
# The paper selects "15 representative tasks ... following BehnamGhader et al. (2024)" (LLM2Vec) but
# its table names 11 tasks plus "STS*" (one instruction for every STS task) without listing the STS
# tasks. We use LLM2Vec's STS tasks, STS17 (en-en), SICK-R and STSBenchmark, which gives 14 tasks;
# which task is the 15th is unclear from the paper (LLM2Vec's subset also has SummEval and
# TwentyNewsgroupsClustering, which table 3 does not list), so none is guessed here.
PAPER_TASKS: dict[str, str] = {
    "ArguAna": "Given a claim, find documents that refute the claim.",
    "NFCorpus": "Given a question, retrieve relevant documents that best answer the question.",
    "SciFact": "Given a scientific claim, retrieve documents that support or refute the claim.",
    "SciDocsRR": "Given a title of a scientific paper, retrieve the titles of other relevant papers.",
    "StackOverflowDupQuestions": "Retrieve duplicate questions from StackOverflow forum.",
    "BiorxivClusteringS2S": "Identify the main category of Biorxiv papers based on the titles.",
    "MedrxivClusteringS2S": "Identify the main category of Medrxiv papers based on the titles.",
    "SprintDuplicateQuestions": "Retrieve duplicate questions from Sprint forum.",
    "Banking77Classification": "Given an online banking query, find the corresponding intents.",
    "EmotionClassification": (
        "Classify the emotion expressed in the given Twitter message into one of the six emotions: "
        "anger, fear, joy, love, sadness, and surprise."
    ),
    "MassiveIntentClassification": "Given a user utterance as query, find the user intents.",
    "STS17": STS_INSTRUCTION,
    "SICK-R": STS_INSTRUCTION,
    "STSBenchmark": STS_INSTRUCTION,
}
"""The paper's MTEB tasks -> each one's instruction (plain, without the E5 wrapping)."""

# The English part of the multilingual tasks, as in the paper's (English) subset.
_PAPER_SUBSETS: dict[str, list[str]] = {"STS17": ["en-en"], "MassiveIntentClassification": ["en"]}

# Task types whose embeddings stay unnormalised (the paper normalises everything else).
_UNNORMALISED_TYPES = frozenset({"Classification", "MultilabelClassification"})


def format_instruction(task_instruction: str) -> str:
    """The E5-style prompt for a task: ``"Instruct: {task_instruction}\\nQuery: "``."""
    return f"Instruct: {task_instruction}\nQuery: "


def task_instruction(
    task_metadata: TaskMetadata, prompt_type: Any = None, instructions: Mapping[str, str] | None = None
) -> str | None:
    """The full prompt for one input role of a task, or ``None`` (retrieval documents get none).

    The task's entry in ``instructions`` wins; an unlisted STS task gets :data:`STS_INSTRUCTION`;
    any other unlisted task gets mteb's own prompt for it.

    Args:
        task_metadata: the task's mteb metadata (its ``name``, ``type`` and ``prompt`` are used).
        prompt_type: mteb's ``PromptType`` (``query``/``document``) or ``None``.
        instructions: task name -> plain instruction (without the E5 wrapping); :data:`PAPER_TASKS`
            by default.
    """
    role = getattr(prompt_type, "value", prompt_type)
    if role == "document":
        return None
    task = (PAPER_TASKS if instructions is None else instructions).get(task_metadata.name)
    if task is None and task_metadata.type == "STS":
        task = STS_INSTRUCTION
    if task is None:
        from mteb.abstasks.abstask import get_abstask_prompt

        prompt = task_metadata.prompt
        if isinstance(prompt, dict):
            prompt = prompt.get(role or "query")
        task = prompt or get_abstask_prompt(task_metadata.name)
    return format_instruction(task)


def normalizes(task_metadata: TaskMetadata) -> bool:
    """Whether embeddings for this task are L2-normalised (all but classification).

    Args:
        task_metadata: the task's mteb metadata (its ``type`` is used).
    """
    return task_metadata.type not in _UNNORMALISED_TYPES


def resolve_tasks(tasks: str | Sequence[str | AbsTask] | None = None) -> list[AbsTask]:
    """mteb task objects for task names (or task objects, passed through), every name checked first.

    The multilingual tasks of the paper's subset keep only their English part (STS17 ``en-en``,
    MassiveIntentClassification ``en``). Call it before loading a model: it loads no data.

    Args:
        tasks: mteb task names or task objects; one name alone stands for a list of one;
            :data:`PAPER_TASKS` by default.

    Returns:
        The tasks, in the order given, not yet loaded (a task object given keeps its data).

    Raises:
        ValueError: naming every unknown task, with mteb's names closest to each and the
            paper's tasks.
    """
    import mteb

    items: list[str | AbsTask] = [tasks] if isinstance(tasks, str) else list(PAPER_TASKS if tasks is None else tasks)
    resolved: list[AbsTask] = []
    unknown: list[str] = []
    for item in items:
        if not isinstance(item, str):
            resolved.append(item)
            continue
        try:
            resolved.append(mteb.get_task(item, hf_subsets=_PAPER_SUBSETS.get(item)))
        except KeyError:  # mteb's only signal for a name it does not know
            unknown.append(item)
    if unknown:
        raise ValueError(_unknown_tasks_message(unknown))
    return resolved


def _unknown_tasks_message(unknown: Sequence[str]) -> str:
    import mteb

    known = sorted(task.metadata.name for task in mteb.get_tasks(exclude_superseded=False))
    lines = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=3)
        hint = f" (closest: {', '.join(close)})" if close else ""
        lines.append(f"unknown mteb task {printable(repr(name))}{hint}")
    return (
        "; ".join(lines)
        + f". The paper's tasks: {', '.join(PAPER_TASKS)}. mteb knows {len(known)} tasks:"
        + " list them with mteb.get_tasks()."
    )
