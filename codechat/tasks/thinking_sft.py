"""SFT data with thinking traces: every reference is preceded by a short plan in a thinking block, so the SFT
model always thinks (the starting point of learning when not to think, docs/thinking.md).

    builtin:toy-think-sft        the toy phrasings, each with a correct reference after `<think>plan</think>`
    builtin:synthetic-sft-think  the synthetic family's clean references, each after a plan naming the function
    builtin:toy-think-sft-prefilled, builtin:synthetic-sft-think-prefilled
                                 the same, plus each reference once more after a *prefilled* empty block
    builtin:toy-think-sft-cold   toy-think-sft-prefilled with every thinking reference COLD_COPIES times: the SFT
                                 model skips by itself rarely enough that free sampling alone stays in the cold start
                                 (the suite's short run, tests/test_thinking_run.py)

The plan restates the task and names the function: a scratchpad, not a derivation (simplified: it carries no
information the code needs, which is exactly what a model can learn to skip). Tags: `<think>` / `</think>`,
the defaults of verifier.thinking.

Prefilled copies: the empty block `<think></think>` is in `metadata["prefill"]`, which SFT appends to the prompt
(context, not learned: train/sft.py), so the model learns to answer well after a forced empty block while its
own first move after `<think>` is still nearly always the plan. That is the starting point AdaptThink assumes of
a reasoning model (it answers when the empty block is prefilled, and almost never skips by itself); a tiny model
trained only on thinking traces writes its plan even after a forced empty block, so no forced sample ever skips.
One task in SKIP_EVERY also has a copy that skips by itself (`<think></think>` learned): without it the SFT
model's own probability of the empty block is ~1e-10, a prior no CPU-sized RL run can lift (docs/thinking.md).
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


SKIP_EVERY = 25
"""Every SKIP_EVERY-th task also gets a copy that skips by itself (the empty block learned, not prefilled)."""


COLD_COPIES = 4
"""Copies of each thinking reference in builtin:toy-think-sft-cold: its short-run SFT model skips on ~3% of free
samples (toy-think-sft-prefilled's: 4-9%, so free sampling alone finds the mode there; docs/thinking.md)."""


def with_prefilled(tasks: list[Task], source: str, think_copies: int = 1) -> list[Task]:
    """with_thinking(tasks) (each `think_copies` times, ids `ID#k` for k >= 1), then a copy of each whose answer
    is the reference after a prefilled empty block: metadata["prefill"] = [open, close] (appended to the prompt by
    SFT, encoded as the balanced sampler forces it), metadata["solution"] = the newline the thinking references
    have after the close tag, then the reference; and for every SKIP_EVERY-th task a copy `<think></think>\n` +
    reference, all learned."""
    out = []
    for t in with_thinking(tasks, source):
        out.append(t)
        for k in range(1, think_copies):
            c = copy.deepcopy(t)
            c.task_id = f"{t.task_id}#{k}"
            out.append(c)
    for i, t in enumerate(t for t in tasks if t.solution):
        c = copy.deepcopy(t)
        c.task_id = f"{t.task_id}/prefilled"
        c.metadata.update({"solution": f"\n{t.solution}", "source": source, "prefill": [OPEN, CLOSE]})
        out.append(c)
        if i % SKIP_EVERY == 0:
            s = copy.deepcopy(t)
            s.task_id = f"{t.task_id}/skips"
            s.metadata.update({"solution": f"{OPEN}{CLOSE}\n{t.solution}", "source": source})
            out.append(s)
    return out
