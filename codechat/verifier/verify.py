"""Verify completions: extract the code (extract.py), run it against the task's tests in the sandbox, return a
`Verdict`.

    from codechat.verifier.verify import Verifier
    with Verifier(VerifierConfig(workers=2)) as v:
        verdicts = v.verify_many([(task, completion), ...])   # same order, parallel across workers

Design (why a pass can be trusted): the program runs in one sandboxed process, the tests in another (the
judge) that the program never touches. The judge calls the program's functions by RPC and receives only
*plain data* (builtin values decoded from JSON), so every comparison uses builtin `__eq__` in a clean process;
the program never sees the tests or the expected values. A pass means: every test ran in the judge, each
executed at least one assertion and called the program, and all passed. See codechat/sandbox/judge.py for the
attack list this defeats, codechat/sandbox/isolation.py for the OS isolation, docs/verifier.md for limits.

Also: `call_function` (outputs of a reference on given inputs, as plain data, for MBPP+/HumanEval+ expected
outputs) and `verify_io` (compare a candidate's outputs with expected ones in the judge, atol for floats).
"""
from __future__ import annotations

import dataclasses
import math
import os
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from codechat import CodechatError
from codechat.config import VerifierConfig
from codechat.sandbox import Job, Limits, RunResult, SandboxPool
from codechat.sandbox.timelimits import WALL_FACTOR, WALL_GRACE_S, WALL_SLACK_S
from codechat.tasks import Task
from codechat.verifier.extract import extract_code, task_prelude
from codechat.verifier.stdio import StdioRun
from codechat.verifier.task_limits import TaskLimitError, task_timeout
from codechat.verifier.thinking import check_tags, split_thinking
from codechat.verifier.answer import KIND as ANSWER_KIND, AnswerChecker
from codechat.verifier.verdict import Verdict


@dataclass
class CallResult:
    """Outputs of `entry_point(*args)` for each input list, as plain data."""
    outputs: list[Any]
    """One value per input (None where the call raised)."""
    errors: list[str | None]
    """Per input: None, or 'ExceptionType: message'."""
    status: str
    """`ok` when the program loaded and every call was attempted; else a Verdict status (timeout, ...)."""
    message: str = ""
    duration_s: float = 0.0
    blocked: tuple[str, ...] = field(default_factory=tuple)


class Verifier:
    """Runs completions against tests in a pool of sandbox workers. Create once, reuse; `close()` when done."""

    def __init__(self, cfg: VerifierConfig | None = None):
        self.cfg = cfg or VerifierConfig()
        if self.cfg.backend not in ("local", "ray"):  # ray: RayVerifier, built by verify_ray.make_verifier
            raise CodechatError(f"verifier backend '{self.cfg.backend}' is not available (valid: local, ray)")
        self.workers = self.cfg.workers or os.cpu_count() or 1
        self._pool: SandboxPool | None = None
        self._lock = threading.Lock()
        self.answers = AnswerChecker(self.cfg.answer)  # answer tasks (math): no sandbox, workers start on use
        check_tags(self.cfg.thinking)

    # --- lifecycle ---------------------------------------------------------------------------------------------
    @property
    def pool(self) -> SandboxPool:
        if self._pool is None:  # lazy: creating a Verifier costs nothing until the first program
            with self._lock:  # verify() runs in several threads: start exactly one pool
                if self._pool is None:
                    self._pool = SandboxPool(self.workers, tuple(self.cfg.hide_paths))
        return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        self.answers.close()

    def __enter__(self) -> "Verifier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- jobs --------------------------------------------------------------------------------------------------
    def _job(self, mode: str, code: str, timeout_s: float | None, memory_mb: int | None = None,
             wall_s: float | None = None, task_id: str = "", **kw) -> Job:
        timeout = task_timeout(timeout_s, self.cfg.timeout_s, self.cfg.max_task_timeout_s, task_id)
        limits = Limits(cpu_s=int(math.ceil(timeout)) + 1, memory_mb=memory_mb or self.cfg.memory_mb,
                        nproc=self.cfg.nproc,
                        nofile=self.cfg.nofile, fsize_mb=self.cfg.fsize_mb)
        return Job(mode, code, timeout_s=wall_s or timeout, limits=limits, max_output_bytes=self.cfg.max_output_bytes,
                   max_result_bytes=self.cfg.max_result_mb << 20, **kw)

    def _time_limits(self, task: Task) -> tuple[dict, float | None]:
        """(the judge's per-test and total limits, the supervisor's wall clock) of a function task: none
        unless verifier.test_timeout_s or cpu_time_limit is set (sandbox/timelimits.py)."""
        cfg = self.cfg
        if not (cfg.test_timeout_s or cfg.cpu_time_limit):
            return {}, None
        total = task_timeout(task.timeout_s, cfg.timeout_s, cfg.max_task_timeout_s, task.task_id)
        wall = total * WALL_FACTOR + WALL_SLACK_S if cfg.cpu_time_limit else total + WALL_GRACE_S + 0.25
        return {"test_s": float(cfg.test_timeout_s), "total_s": total, "cpu": cfg.cpu_time_limit}, wall

    def _verdict(self, r: RunResult, total: int) -> Verdict:
        passed = r.status == "passed"
        return Verdict(status=r.status, passed=passed, reward=1.0 if passed else 0.0,
                       tests_passed=r.tests_passed, tests_total=total, error_type=r.error_type,
                       message=r.message, duration_s=round(r.duration_s, 4), blocked=r.blocked,
                       cpu_s=round(r.cpu_s, 4))

    def _tests_job(self, task: Task, completion: str) -> Job | Verdict:
        """The job that verifies `completion`, or the verdict when there is nothing to run."""
        if task.kind == ANSWER_KIND:
            return self.answers.check(task, completion)
        code = extract_code(completion, task)
        total = len(task.tests)
        if code is None:
            return Verdict("no_code", False, 0.0, tests_total=total, message="no code in the completion")
        if not task.tests:
            return Verdict("error", False, 0.0, error_type="NoTests", message=f"task {task.task_id} has no tests")
        try:
            time_limits, wall = self._time_limits(task)
            return self._job("tests", code, task.timeout_s, wall_s=wall, setup=task.setup, task_id=task.task_id,
                             entry_point=task.entry_point, tests=list(task.tests), prelude=task_prelude(task),
                             time_limits=time_limits)
        except TaskLimitError as e:
            return Verdict("error", False, 0.0, tests_total=total, error_type="TaskError", message=str(e))

    def verify(self, task: Task, completion: str) -> Verdict:
        if self.cfg.thinking.enabled:  # thinking blocks: verifier/thinking.py
            return next(self.imap([(task, completion)]))
        if task.stdio is not None:
            return next(self.imap([(task, completion)]))
        job = self._tests_job(task, completion)
        if isinstance(job, Verdict):
            return job
        return self._verdict(self.pool.run(job), len(task.tests))

    def verify_many(self, pairs: Iterable[tuple[Task, str]]) -> list[Verdict]:
        return list(self.imap(pairs))

    def imap(self, pairs: Iterable[tuple[Task, str]]) -> Iterator[Verdict]:
        """Verdicts in input order, computed in parallel on all workers with a bounded number in flight
        (one thread drives every worker: no thread pool). With verifier.thinking on, each completion's thinking
        blocks are stripped first and the verdict records whether it thought."""
        if not self.cfg.thinking.enabled:
            yield from self._imap(pairs)
            return
        thought: deque = deque()

        def stripped():
            for task, completion in pairs:
                s = split_thinking(completion, self.cfg.thinking)
                thought.append(s.thought)
                yield task, s.answer

        for v in self._imap(stripped()):
            yield dataclasses.replace(v, thought=thought.popleft())

    def _imap(self, pairs: Iterable[tuple[Task, str]]) -> Iterator[Verdict]:
        # per job: the verdict when nothing runs, the number of tests, or (StdioRun, is its last job)
        if self.cfg.stop_at_first_failure:
            yield from self._imap_stopping(pairs)
            return
        early: deque = deque()

        def jobs():
            for task, completion in pairs:
                if task.stdio is not None:  # one job per test (verifier/stdio.py)
                    run = StdioRun(task, extract_code(completion, task), self.cfg)
                    if run.early is not None:
                        early.append(run.early)
                        yield None
                        continue
                    for i, job in enumerate(run.jobs()):
                        early.append((run, i == run.n - 1))
                        yield job
                    continue
                job = self._tests_job(task, completion)
                early.append(job if isinstance(job, Verdict) else len(task.tests))
                yield None if isinstance(job, Verdict) else job

        for r in self.pool.run_many(jobs()):
            e = early.popleft()
            if isinstance(e, tuple):
                e[0].add(r)
                if e[1]:
                    yield e[0].verdict()
            else:
                yield e if r is None else self._verdict(r, e)

    def _imap_stopping(self, pairs: Iterable[tuple[Task, str]]) -> Iterator[Verdict]:
        """`_imap` when a stdin/stdout completion stops at its first failing test: its tests are submitted one at
        a time (the next once the last one's result is in), while other completions' jobs keep every worker
        busy; so a looping completion costs one test's limit, not the tests already queued behind it.
        Verdicts still come in input order."""
        early: deque = deque()  # per job: (index, StdioRun) | (index, Verdict when nothing runs | tests count) | None
        waiting: deque = deque()  # (index, StdioRun) with a test submitted whose result is not in yet
        done: dict[int, Verdict] = {}

        def release():
            """Submit the next test of each waiting run whose last result is in (or finish it)."""
            for _ in range(len(waiting)):
                i, run = waiting.popleft()
                k = len(run.results)
                if k < run.submitted:
                    waiting.append((i, run))
                elif run.stopped or k == run.n:
                    while len(run.results) < run.n:
                        run.add(None)  # (not run: the outcome is decided)
                    done[i] = run.verdict()
                else:
                    run.submitted += 1
                    waiting.append((i, run))
                    early.append((i, run))
                    yield run.job(k)

        def jobs():
            for i, (task, completion) in enumerate(pairs):
                yield from release()
                if task.stdio is not None:
                    run = StdioRun(task, extract_code(completion, task), self.cfg)
                    if run.early is not None:
                        done[i] = run.early
                        continue
                    run.submitted = 1
                    waiting.append((i, run))
                    early.append((i, run))
                    yield run.job(0)
                    continue
                job = self._tests_job(task, completion)
                if isinstance(job, Verdict):
                    done[i] = job
                    continue
                early.append((i, len(task.tests)))
                yield job
            while waiting:
                before = len(early)
                yield from release()
                if len(early) == before and waiting:
                    early.append(None)  # nothing to submit until a result is in: let the pool collect one
                    yield None

        nxt = 0
        for r in self.pool.run_many(jobs()):
            e = early.popleft()
            if e is not None:
                i, what = e
                if isinstance(what, StdioRun):
                    what.add(r)
                else:
                    done[i] = self._verdict(r, what)
            while nxt in done:
                yield done.pop(nxt)
                nxt += 1
        while nxt in done:  # (verdicts decided without running anything, after the last job)
            yield done.pop(nxt)
            nxt += 1

    def verify_io(self, task: Task, completion: str, inputs: list[list], expected: list,
                  atol: float = 0.0, memory_mb: int | None = None) -> Verdict:
        """Pass iff entry_point(*inputs[i]) matches expected[i] for all i; compared in the judge, not the program."""
        code = extract_code(split_thinking(completion, self.cfg.thinking).answer, task)
        if code is None:
            return Verdict("no_code", False, 0.0, tests_total=len(inputs), message="no code in the completion")
        if len(inputs) != len(expected):
            raise CodechatError(f"verify_io: {len(inputs)} inputs but {len(expected)} expected outputs")
        job = self._job("io", code, task.timeout_s, memory_mb, setup=task.setup, entry_point=task.entry_point,
                        task_id=task.task_id,
                        inputs=[list(a) for a in inputs], expected=list(expected), atol=float(atol or 0))
        return self._verdict(self.pool.run(job), len(inputs))

    def call_function(self, code: str, entry_point: str, inputs: list[list], timeout_s: float | None = None,
                      setup: str = "", memory_mb: int | None = None) -> CallResult:
        """Run `code` in the sandbox and return entry_point(*args) for each input, as plain data."""
        job = self._job("call", code, timeout_s, memory_mb, setup=setup, entry_point=entry_point,
                        inputs=[list(a) for a in inputs])
        r = self.pool.run(job)
        n = len(inputs)
        outputs = (list(r.outputs) + [None] * n)[:n]
        errors = (list(r.errors) + [f"{r.status}: {r.message}"] * n)[:n]
        return CallResult(outputs, errors, r.status, r.message, r.duration_s, r.blocked)
