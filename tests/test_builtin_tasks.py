"""The hand-written built-in set (`builtin` = tasks/data/basic.jsonl): every reference passes its own asserts,
and the asserts are not vacuous (trivially wrong answers fail every task). Runs the code with `exec` in a fresh
namespace: these are our own files, so no sandbox is needed."""
from __future__ import annotations

import pytest

from codechat.tasks import load_tasks
from codechat.tasks.builtin import builtin_names, load_builtin

TASKS = load_builtin("builtin")
WRONG = {  # trivially wrong answers; each must fail at least one assert of every task
    "returns None": "def {f}(*args, **kwargs):\n    return None\n",
    "returns its first argument": "def {f}(*args, **kwargs):\n    return args[0] if args else None\n",
    "returns 0": "def {f}(*args, **kwargs):\n    return 0\n",
}


def failed_tests(task, code: str) -> list[str]:
    """The tests of `task` that fail (raise) when run after `setup` and `code`, each in a fresh namespace."""
    failed = []
    for test in task.tests:
        ns: dict = {"__name__": "__main__"}
        try:
            exec(compile(task.setup + "\n" + code, "<solution>", "exec"), ns)
            exec(compile(test, "<test>", "exec"), ns)
        except Exception:
            failed.append(test)
    return failed


def test_set_size_ids_and_fields():
    assert len(TASKS) >= 40
    ids = [t.task_id for t in TASKS]
    assert len(ids) == len(set(ids))
    for t in TASKS:
        assert t.task_id.startswith("basic/") and t.entry_point and t.solution
        assert 3 <= len(t.tests) <= 6, t.task_id
        assert f"`{t.entry_point}(" in t.prompt, t.task_id
        assert t.metadata["source"] == "builtin:basic"
    assert {t.metadata["topic"] for t in TASKS} == {"strings", "lists", "dicts", "math", "algorithms"}


def test_aliases_load_the_same_set():
    assert [t.task_id for t in load_tasks("builtin:basic")] == [t.task_id for t in TASKS]
    assert "basic" in builtin_names()


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.task_id)
def test_reference_passes_all_asserts(task):
    assert failed_tests(task, task.solution) == []


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.task_id)
def test_trivially_wrong_answers_fail(task):
    for why, template in WRONG.items():
        assert failed_tests(task, template.format(f=task.entry_point)), f"{task.task_id}: passes when it {why}"
