"""Judge one completion of a stdin/stdout task: one sandbox job per test, folded into one `Verdict`.

Each test runs the program afresh as `__main__` with the test's input on stdin (codechat/sandbox/stdio_run.py);
the judge compares its stdout with the expected output (codechat/sandbox/stdio_judge.py). This module builds
the jobs and folds their results, in test order, so the verdict does not depend on how many ran in parallel:
- `tests_passed` counts passing tests (partial credit: the `pass-fraction` reward);
- the status and message are those of the first test that did not pass (`test 3: wrong output`);
- `verifier.stop_at_first_failure`: tests after the first failure count as not passed (and are not started
  once the failure is known);
- `verifier.total_timeout_s`: once the summed test time passes it, the remaining tests count as not passed and
  the verdict is `timeout`;
- a test lost to the infrastructure (`infra_error`) makes the whole verdict `infra_error`;
- `verifier.cpu_time_limit`: each test's limit is judged on CPU time (the kernel's count for the program
  process); the wall clock allows 3x + 1 s. The verdict records both sums (`duration_s`, `cpu_s`).
"""
from __future__ import annotations

import math
from typing import Iterator

from codechat.config import VerifierConfig
from codechat.sandbox import Job, Limits, RunResult
from codechat.tasks import Task
from codechat.verifier.task_limits import TaskLimitError, task_timeout
from codechat.verifier.verdict import Verdict

WALL_FACTOR, WALL_SLACK_S = 3.0, 1.0
"""With cpu_time_limit, the wall-clock deadline of a test is WALL_FACTOR x its limit + WALL_SLACK_S."""


def _times(r: RunResult) -> tuple[float | None, float]:
    """(CPU s or None when the judge never got the runner's report, wall s) of one test."""
    if len(r.outputs) == 2:
        return float(r.outputs[0]), float(r.outputs[1])
    return None, r.duration_s


class StdioRun:
    """One completion of one stdio task being judged: `jobs()` to run, `add()` each result, then `verdict()`."""

    def __init__(self, task: Task, code: str | None, cfg: VerifierConfig):
        assert task.stdio is not None
        self.task, self.code, self.cfg = task, code, cfg
        self.n = len(task.stdio.tests)
        self.results: list[RunResult | None] = []
        self.stopped = False
        self.submitted = 0
        """Tests handed to the pool so far (when they are submitted one at a time: Verifier._imap_stopping)."""
        self._time = 0.0
        self.early: Verdict | None = None
        """The verdict when nothing runs (no code, no tests)."""
        try:
            self.limit_s = task_timeout(task.timeout_s, cfg.timeout_s, cfg.max_task_timeout_s, task.task_id)
        except TaskLimitError as e:
            self.limit_s = cfg.timeout_s
            self.early = Verdict("error", False, 0.0, tests_total=self.n, error_type="TaskError", message=str(e))
        if self.early is None and code is None:
            self.early = Verdict("no_code", False, 0.0, tests_total=self.n, message="no code in the completion")
        elif self.early is None and not self.n:
            self.early = Verdict("error", False, 0.0, error_type="NoTests", message=f"task {task.task_id} has no tests")

    def job(self, i: int) -> Job:
        cfg, spec, test = self.cfg, self.task.stdio, self.task.stdio.tests[i]
        limit = self.limit_s
        wall = limit * WALL_FACTOR + WALL_SLACK_S if cfg.cpu_time_limit else limit
        limits = Limits(cpu_s=int(math.ceil(limit)) + 1, memory_mb=cfg.memory_mb, nproc=cfg.nproc, nofile=cfg.nofile,
                        fsize_mb=cfg.fsize_mb)
        judge = {"float_tol": spec.float_tol, "checker": spec.checker, "ignore_case": spec.ignore_case,
                 "input": test.input if spec.checker else "", "cpu_limit_s": limit if cfg.cpu_time_limit else 0.0}
        return Job("stdio", self.code or "", expected=[test.output], timeout_s=wall, limits=limits,
                   max_output_bytes=cfg.max_output_bytes, max_result_bytes=cfg.max_result_mb << 20,
                   stdin=test.input.encode("utf-8", errors="surrogateescape"), stdio=judge)

    def jobs(self) -> Iterator[Job | None]:
        """One job per test, in order; None (not run) once the outcome of the rest no longer matters."""
        for i in range(self.n):
            yield None if self.stopped else self.job(i)

    def add(self, r: RunResult | None) -> None:
        self.results.append(r)
        if r is None:
            return
        self._time += self._spent(r)
        if r.status != "passed" and self.cfg.stop_at_first_failure:
            self.stopped = True
        if self.cfg.total_timeout_s and self._time > self.cfg.total_timeout_s:
            self.stopped = True

    def _spent(self, r: RunResult) -> float:
        """The time a test counts against the total limit: CPU or wall, as the per-test limit is judged."""
        cpu, wall = _times(r)
        if self.cfg.cpu_time_limit:
            return self.limit_s if cpu is None else cpu  # killed by the wall clock: a whole limit
        return wall

    def verdict(self) -> Verdict:
        if self.early is not None:
            return self.early
        passed, first, total_time = 0, None, 0.0
        wall_sum = cpu_sum = 0.0
        blocked: set[str] = set()
        for i, r in enumerate(self.results):
            if r is None:  # not run: a failure earlier or the total time limit decided it
                break
            blocked.update(r.blocked)
            cpu, wall = _times(r)
            wall_sum += wall
            cpu_sum += cpu or 0.0
            total_time += self._spent(r)
            if self.cfg.total_timeout_s and total_time > self.cfg.total_timeout_s:
                first = first or ("timeout", None, f"test {i}: total time limit of {self.cfg.total_timeout_s:g}s "
                                                   f"reached")
                break
            if r.status == "passed":
                passed += 1
                continue
            first = first or (r.status, r.error_type, f"test {i}: {r.message}" if r.message else f"test {i} failed")
            if self.cfg.stop_at_first_failure:
                break
        ok = first is None and passed == self.n
        if first is None and not ok:
            first = ("error", "NotRun", "not every test ran")
        lost = next((i for i, r in enumerate(self.results) if r is not None and r.status == "infra_error"), None)
        if lost is not None:  # partial credit would be wrong too: the whole verdict is the verifier's failure
            ok, first = False, ("infra_error", self.results[lost].error_type, f"test {lost}: {self.results[lost].message}")
        status, etype, msg = first or ("passed", None, "")
        return Verdict(status, ok, 1.0 if ok else 0.0, tests_passed=passed, tests_total=self.n, error_type=etype,
                       message=msg[:300], duration_s=round(wall_sum, 4), blocked=tuple(sorted(blocked)),
                       cpu_s=round(cpu_sum, 4))
