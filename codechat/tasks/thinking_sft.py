"""SFT data with thinking traces: every reference is preceded by a short plan in a thinking block, so the SFT
model always thinks (the starting point of learning when not to think, docs/thinking.md).

    builtin:toy-think-sft        the toy phrasings, each with a correct reference after `<think>plan</think>`
    builtin:synthetic-sft-think  the synthetic family's clean references, each after a plan naming the function

The plan restates the task and names the function: a scratchpad, not a derivation (simplified: it carries no
information the code needs, which is exactly what a model can learn to skip). Tags: `<think>` / `</think>`,
the defaults of verifier.thinking.
"""
from __future__ import annotations

import copy

from codechat.tasks.model import Task

OPEN, CLOSE = "<think>", "</think>"


def plan(task: Task) -> str:
    """A short plan: the task's first line and the function to write."""
    first = next((ln.strip() for ln in task.prompt.splitlines() if ln.strip()), "")
    return f"Plan: {first} Write `{task.entry_point}`, then check the edge cases."


def with_thinking(tasks: list[Task], source: str) -> list[Task]:
    """Copies of `tasks` whose metadata["solution"] is `<think>plan</think>\\n` + the reference."""
    out = []
    for t in tasks:
        if not t.solution:
            continue
        c = copy.deepcopy(t)
        c.metadata["solution"] = f"{OPEN}{plan(t)}{CLOSE}\n{t.solution}"
        c.metadata["source"] = source
        out.append(c)
    return out
