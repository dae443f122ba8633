"""`builtin:toy` — the smallest task set on which RL visibly works, for smoke tests and first runs: ten phrasings
of "write `f(x)` that returns x plus one", three asserts each. `builtin:toy-sft` pairs every phrasing with a
correct reference and a plausible-but-wrong one (`x + 2`), so SFT leaves the model right about half the time —
a mistake imitation cannot fix and the verifier can."""
from __future__ import annotations

from codechat.tasks.model import Task

PHRASES = ["x plus one", "one more than x", "x increased by one", "the successor of x", "x + 1",
           "x incremented by 1", "the number after x", "1 added to x", "x plus 1", "the sum of x and one"]
TESTS = ["assert f(0) == 1", "assert f(41) == 42", "assert f(-3) == -2"]


def toy_tasks(sft: bool = False) -> list[Task]:
    tasks = []
    for i, phrase in enumerate(PHRASES):
        prompt = f"Write a function `f(x)` that returns {phrase}."
        answers = [("", 1)] if not sft else [("a", 1), ("b", 2)]
        for suffix, k in answers:
            tid = f"toy/{i}" + (f"/{suffix}" if suffix else "")
            tasks.append(Task(tid, prompt, list(TESTS), "f", metadata={
                "solution": f"def f(x):\n    return x + {k}\n", "source": "builtin:toy-sft" if sft else "builtin:toy"}))
    return tasks
