"""Judge side: per-test and total time limits of a function task (`verifier.test_timeout_s`, `cpu_time_limit`).

Before each test the judge works out the test's budget (the per-test limit, capped by what is left of the
program's total) and sends it to the candidate (`limit` op): the candidate arms a timer (ITIMER_PROF on CPU
time, ITIMER_REAL on wall clock) that interrupts the program's call when the budget is spent, and answers
`time`, so the test fails as `timeout` while the program stays usable for the next tests. The judge does not
trust that timer: it measures each test itself (CPU: the candidate's utime+stime from /proc/PID/stat, read by
the judge through an fd the supervisor opened; wall: its own clock) and fails a test over its budget whatever the program answered, and it stops
waiting at a backstop deadline (5x the budget + 2 s on CPU time, the budget + 1 s on wall clock): a program
that disabled the timer, caught the interruption or sits in one long C call then fails that test and is ended
(the tests after it count as not passed). The program's total runs out: the tests left count as not passed.

Does not protect against: CPU time of processes the program starts (not in /proc/PID/stat of the program);
a 10 ms granularity of the kernel's CPU count. Without /proc access to the program, CPU budgets rest on the
program's timer and the backstop only.
"""
from __future__ import annotations

import os
import time

CLOCK_TICK = os.sysconf("SC_CLK_TCK")
WALL_FACTOR, WALL_SLACK_S = 5.0, 2.0
"""On CPU time, the judge waits WALL_FACTOR x a test's budget + WALL_SLACK_S of wall clock before it gives up."""
WALL_GRACE_S = 1.0
"""On wall clock, the judge waits this long past a test's budget before it gives up on the program."""


def cpu_seconds(stat_fd: int) -> float | None:
    """utime + stime of a process (all its threads) from its /proc/PID/stat, opened by the supervisor (the
    judge runs under another uid, for which /proc hides the program), or None when it cannot be read."""
    if stat_fd < 0:
        return None
    try:
        stat = os.pread(stat_fd, 4096, 0)
        fields = stat[stat.rindex(b")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICK
    except (OSError, ValueError, IndexError):
        return None


class TimeLimits:
    """The time limits of one job's tests, as the judge keeps them."""

    def __init__(self, limits: dict, stat_fd: int, started: float):
        self.test_s = float(limits.get("test_s") or 0.0)
        self.total_s = float(limits.get("total_s") or 0.0)
        self.cpu = bool(limits.get("cpu"))
        self.stat_fd = stat_fd
        now = self._now()
        self.trusted = now is not None  # CPU: the judge can read the program's count
        # the program's time so far, loading included: its CPU seconds, or the wall clock since the job began
        self.used = (now or 0.0) if self.cpu else now - started
        self._t0 = self.budget = 0.0

    def _now(self) -> float | None:
        return cpu_seconds(self.stat_fd) if self.cpu else time.monotonic()

    def start(self) -> float:
        """Start a test; its budget in seconds (<= 0: the program's total is used up, do not run it)."""
        left = self.total_s - self.used if self.total_s else 1e9
        self.budget = min(self.test_s or 1e9, left)  # (finite: the program's timer takes seconds as a float)
        self._t0 = self._now() or 0.0
        return self.budget

    def deadline(self) -> float:
        """The wall-clock moment (monotonic) past which the judge stops waiting for the program this test."""
        b = self.budget
        return time.monotonic() + (b * WALL_FACTOR + WALL_SLACK_S if self.cpu else b + WALL_GRACE_S)

    def stop(self) -> bool:
        """End the test; whether it went over its budget (as measured here, when the judge can measure it)."""
        now = self._now()
        if now is None:
            return False
        spent = now - self._t0
        self.used += spent
        return self.trusted and spent > self.budget

    def describe(self) -> str:
        kind = "CPU" if self.cpu else "wall-clock"
        which = f"{self.test_s:g} s per-test" if self.test_s and self.budget >= self.test_s else \
            f"{self.total_s:g} s total"
        return f"over the {which} {kind} limit"

    def cpu_total(self) -> float:
        """The program's CPU seconds so far (0 when unreadable)."""
        return cpu_seconds(self.stat_fd) or 0.0
