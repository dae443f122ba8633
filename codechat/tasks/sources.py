"""Task specs as users write them: a file (`FILE:SPLIT` for one MBPP split), `builtin` / `builtin:NAME` for a set
shipped with codechat, and `A+B` to join sets. Files are read by loaders.py, built-in sets by builtin.py."""
from __future__ import annotations

from pathlib import Path

from codechat.tasks.builtin import load_builtin
from codechat.tasks.loaders import load_tasks_with_format
from codechat.tasks.model import Task, TaskFormatError
from codechat.tasks.splits import apply_split, split_spec


def load_tasks(path: str | Path, fmt: str | None = None) -> list[Task]:
    """Load a task file (or `builtin` / `builtin:NAME` for a set shipped with codechat); `A+B` joins sets;
    `FILE:SPLIT` takes one split of an MBPP file (train, test, validation, prompt)."""
    if "+" in str(path) and not Path(path).exists():
        return _join([(p, load_tasks(p, fmt)) for p in str(path).split("+") if p])
    if str(path).startswith("builtin"):
        return load_builtin(str(path))
    file, split = split_spec(str(path))  # `mbpp.jsonl:train` (codechat/tasks/splits.py)
    tasks = load_tasks_with_format(file, fmt)[0]
    return apply_split(tasks, split, str(path)) if split else tasks


def _join(sets: list[tuple[str, list[Task]]]) -> list[Task]:
    """Several task sets as one list; a task_id in two sets is an error naming both."""
    seen: dict[str, str] = {}
    out = []
    for name, tasks in sets:
        for t in tasks:
            if t.task_id in seen:
                raise TaskFormatError(f"{name}: task_id '{t.task_id}' is also in {seen[t.task_id]}")
            seen[t.task_id] = name
            out.append(t)
    return out
