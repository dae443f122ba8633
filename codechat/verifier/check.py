"""Check a task set's reference solutions: each runs several times; tasks whose reference fails or whose verdict
changes between runs (flaky: timing, randomness, a bad generated test) are listed for quarantine.

    codechat tasks check FILE [--runs 5] [--write-quarantine PATH]

Runs are interleaved (all tasks once, then all again, ...) so that one run's load does not hit one task only.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from codechat.tasks import Task
from codechat.verifier.verdict import Verdict


@dataclass
class TaskCheck:
    task_id: str
    """The task."""
    statuses: list[str]
    """The reference's verdict status in each run, in run order."""
    messages: list[str] = field(default_factory=list)
    """The verdict message of each run that did not pass."""

    @property
    def flaky(self) -> bool:
        return len(set(self.statuses)) > 1

    @property
    def failing(self) -> bool:
        return not self.flaky and self.statuses[0] != "passed"

    @property
    def reason(self) -> str:
        if self.flaky:
            return "flaky: " + ", ".join(f"{s} x{n}" for s, n in Counter(self.statuses).most_common())
        return f"reference {self.statuses[0]}" + (f": {self.messages[0]}" if self.messages else "")


@dataclass
class CheckReport:
    checked: list[TaskCheck]
    """Every task that has a reference solution."""
    no_reference: list[str]
    """Ids of tasks without a reference solution (not checked)."""
    runs: int
    """Runs per reference."""

    @property
    def problems(self) -> list[TaskCheck]:
        return [c for c in self.checked if c.flaky or c.failing]


def check_references(verifier, tasks: list[Task], runs: int = 5) -> CheckReport:
    """Verify each task's reference `runs` times with `verifier` (any object with `verify_many`)."""
    with_ref = [t for t in tasks if t.solution]
    results: dict[str, list[Verdict]] = {t.task_id: [] for t in with_ref}
    for _ in range(runs):
        for t, v in zip(with_ref, verifier.verify_many([(t, t.solution) for t in with_ref])):
            results[t.task_id].append(v)
    checked = [TaskCheck(tid, [v.status for v in vs], [v.message for v in vs if not v.passed and v.message])
               for tid, vs in results.items()]
    return CheckReport(checked, [t.task_id for t in tasks if not t.solution], runs)
