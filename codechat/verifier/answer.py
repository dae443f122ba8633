"""Judge answer tasks (`Task.kind == "answer"`): extract the completion's final answer, compare it with the task's
reference answers, return a `Verdict` — the same typed result code tasks get, so rewards, training, `codechat
eval` and `codechat verify` need no special case.

    with AnswerChecker(AnswerConfig()) as c:
        c.check(task, "... so the total is \\boxed{\\frac{1}{2}}")   # Verdict(status="passed", reward=1.0, ...)

Statuses: `passed` (equivalent to the reference or one of `metadata["accepted"]`), `failed` (an answer was found
and is not equivalent, or is longer than `max_answer_chars`), `no_answer` (none found), `timeout` (the symbolic
comparison ran past `timeout_s` and its worker was killed), `error` (the comparison library failed).
Extraction: answer_extract.py; equivalence: answer_equiv.py (which states what the workers protect against).
"""
from __future__ import annotations

import time
from typing import Iterable

from codechat.config import AnswerConfig
from codechat.tasks.model import Task
from codechat.verifier.answer_equiv import EquivPool, Outcome
from codechat.verifier.answer_extract import Extracted, clean, extract_answer
from codechat.verifier.verdict import Verdict

KIND = "answer"


def references(task: Task) -> list[str]:
    """The reference answer and the accepted alternatives of an answer task, cleaned."""
    refs = [task.metadata.get("answer", "")] + list(task.metadata.get("accepted") or [])
    return [c for c in (clean(str(r)) for r in refs) if c]


def _verdict(found: Extracted, outcome: Outcome, seconds: float) -> Verdict:
    ok = outcome.status == "equal"
    status = {"equal": "passed", "different": "failed"}.get(outcome.status, outcome.status)
    how = "symbolic" if outcome.symbolic else "exact"
    detail = f"; {outcome.message}" if outcome.message else ""
    return Verdict(status, ok, 1.0 if ok else 0.0, tests_passed=int(ok), tests_total=1,
                   error_type=None if status in ("passed", "failed") else "AnswerCheck",
                   message=f"answer {found.text[:80]!r} ({found.how}, {how}){detail}", duration_s=round(seconds, 4))


class AnswerChecker:
    """Verdicts for answer tasks. Cheap to create; comparison workers start on the first symbolic comparison."""

    def __init__(self, cfg: AnswerConfig | None = None):
        self.cfg = cfg or AnswerConfig()
        self.pool = EquivPool(self.cfg)

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> "AnswerChecker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check(self, task: Task, completion: str) -> Verdict:
        return self.check_many([(task, completion)])[0]

    def check_many(self, pairs: Iterable[tuple[Task, str]]) -> list[Verdict]:
        """One verdict per (task, completion), in order; symbolic comparisons run on `cfg.workers` in parallel."""
        t0 = time.perf_counter()
        out: list[Verdict | None] = []
        todo, found_at = [], []
        for task, completion in pairs:
            refs = references(task)
            if not refs:
                out.append(Verdict("error", False, 0.0, tests_total=1, error_type="NoReference",
                                   message=f"task {task.task_id} has no reference answer"))
                continue
            try:
                found = extract_answer(completion or "", self.cfg.extractors, self.cfg.max_answer_chars)
            except (ValueError, ArithmeticError, RecursionError, MemoryError) as e:  # hostile text: its own verdict
                out.append(Verdict("error", False, 0.0, tests_total=1, error_type="AnswerCheck",
                                   message=f"answer not readable: {type(e).__name__}"))
                continue
            if found is None:
                out.append(Verdict("no_answer", False, 0.0, tests_total=1, message="no final answer found"))
            elif len(found.text) > self.cfg.max_answer_chars:
                out.append(Verdict("failed", False, 0.0, tests_total=1,
                                   message=f"answer longer than {self.cfg.max_answer_chars} characters"))
            else:
                todo.append((refs, found.text))
                found_at.append((len(out), found))
                out.append(None)
        outcomes = self.pool.compare_many(todo)
        per_item = (time.perf_counter() - t0) / max(len(out), 1)
        for (i, found), outcome in zip(found_at, outcomes):
            out[i] = _verdict(found, outcome, per_item)
        return out  # type: ignore[return-value]
