"""`builtin:toy` — the smallest task set on which RL visibly works, for smoke tests and first runs:
"Write a function `f()` that returns N." for N in 0..9, one assert each. `builtin:toy-sft` holds the same
prompts with a plausible-but-wrong reference (returns N + 1) for every other task, so SFT leaves a mistake
that only the verifier can correct."""
from __future__ import annotations

from codechat.tasks.model import Task

N_TASKS = 10


def toy_tasks(buggy: bool = False) -> list[Task]:
    tasks = []
    for n in range(N_TASKS):
        wrong = buggy and n % 2 == 1
        solution = f"def f():\n    return {n + 1 if wrong else n}\n"
        tasks.append(Task(f"toy/{n}", f"Write a function `f()` that returns {n}.", [f"assert f() == {n}"], "f",
                          metadata={"solution": solution, "source": "builtin:toy-sft" if buggy else "builtin:toy"}))
    return tasks
