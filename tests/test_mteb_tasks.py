"""The paper's MTEB tasks: names checked before a run, the instruction and normalisation of each task."""

import pytest

mteb = pytest.importorskip("mteb")

from nosink.evals.mteb_tasks import (  # noqa: E402
    PAPER_TASKS,
    STS_INSTRUCTION,
    format_instruction,
    normalizes,
    resolve_tasks,
    task_instruction,
)


def test_resolve_tasks_keeps_order_and_the_english_subsets():
    tasks = resolve_tasks(["STS17", "SciFact", "MassiveIntentClassification"])
    assert [t.metadata.name for t in tasks] == ["STS17", "SciFact", "MassiveIntentClassification"]
    assert tasks[0].hf_subsets == ["en-en"] and tasks[2].hf_subsets == ["en"]
    assert [t.metadata.name for t in resolve_tasks("SciFact")] == ["SciFact"]  # one name, not its letters
    assert [t.metadata.name for t in resolve_tasks()] == list(PAPER_TASKS)
    given = mteb.get_task("SICK-R")
    assert resolve_tasks([given])[0] is given


def test_unknown_task_names_are_listed_together_and_quoted_safely():
    with pytest.raises(ValueError) as err:
        resolve_tasks(["SciFact", "No\x1b]0;pwned\x07Task", "SciFactt"])
    message = str(err.value)
    assert "unknown mteb task 'No\\x1b]0;pwned\\x07Task'" in message and "\x1b" not in message
    assert "unknown mteb task 'SciFactt' (closest: SciFact" in message
    assert "The paper's tasks: ArguAna, NFCorpus" in message


def test_instruction_per_task_and_role():
    scifact, sts, banking = (mteb.get_task(n).metadata for n in ("SciFact", "SICK-R", "Banking77Classification"))
    assert task_instruction(scifact, "query") == format_instruction(PAPER_TASKS["SciFact"])
    assert task_instruction(scifact, "document") is None  # retrieval documents get no instruction
    assert task_instruction(sts, None, instructions={}) == format_instruction(STS_INSTRUCTION)
    assert task_instruction(banking, None, {"Banking77Classification": "Sort it."}) == format_instruction("Sort it.")
    assert task_instruction(banking, None, instructions={}).startswith("Instruct: ")  # mteb's own prompt
    assert normalizes(scifact) and normalizes(sts) and not normalizes(banking)
