"""A task's own timeout_s is the client's word: validated, and never above the operator's maximum.

Each hostile value has an honest twin: a task asking for a limit under the maximum keeps it.
"""
from __future__ import annotations

import math
import time

import pytest

from codechat.config import VerifierConfig
from codechat.tasks import Task
from codechat.tasks.stdio import IOTest, StdioSpec
from codechat.verifier.task_limits import TaskLimitError, task_timeout
from codechat.verifier.verify import Verifier

LOOP = "def f():\n    while True:\n        pass\n"
RIGHT = "def f():\n    return 1\n"


def fn_task(timeout_s) -> Task:
    return Task("t", "", ["assert f() == 1"], "f", timeout_s=timeout_s)


@pytest.fixture(scope="module")
def v():
    with Verifier(VerifierConfig(workers=2, timeout_s=1.0, max_task_timeout_s=1.5, memory_mb=512)) as ver:
        yield ver


@pytest.mark.parametrize("asked", [1e10, 1e300, math.inf])
def test_a_huge_task_timeout_is_clamped_to_the_operators_maximum(v, asked):
    if math.isinf(asked):  # (not a positive finite number: refused, not clamped)
        verdict = v.verify(fn_task(asked), RIGHT)
        assert verdict.status == "error" and verdict.error_type == "TaskError" and "timeout_s" in verdict.message
        return
    t0 = time.monotonic()
    verdict = v.verify(fn_task(asked), LOOP)
    assert verdict.status == "timeout" and time.monotonic() - t0 < 10, verdict
    assert v.verify(fn_task(asked), RIGHT).passed


def test_a_limit_under_the_maximum_is_kept(v):
    assert task_timeout(1.2, 1.0, 1.5) == 1.2 and task_timeout(None, 1.0, 1.5) == 1.0
    slow = "import time\ndef f():\n    time.sleep(1.2)\n    return 1\n"
    assert v.verify(fn_task(1.45), slow).passed  # longer than the default 1.0, within the maximum


@pytest.mark.parametrize("bad", [math.nan, -1.0, "5", True, [1]])
def test_an_invalid_task_timeout_is_that_tasks_error_and_the_batch_goes_on(v, bad):
    verdicts = v.verify_many([(fn_task(bad), RIGHT), (fn_task(None), RIGHT)])
    assert verdicts[0].status == "error" and verdicts[0].error_type == "TaskError", verdicts[0]
    assert "task t: timeout_s must be a positive number" in verdicts[0].message and "\n" not in verdicts[0].message
    assert verdicts[1].passed


def test_a_stdio_tasks_per_test_limit_is_clamped_and_validated(v):
    loop = "while True:\n    pass\n"
    huge = Task("s", "", [], timeout_s=1e300, stdio=StdioSpec([IOTest("", "1\n")]))
    t0 = time.monotonic()
    verdict = v.verify(huge, loop)
    assert verdict.status == "timeout" and time.monotonic() - t0 < 10, verdict
    assert v.verify(huge, "print(1)").passed
    nan = Task("s", "", [], timeout_s=math.nan, stdio=StdioSpec([IOTest("", "1\n")]))
    assert v.verify(nan, "print(1)").error_type == "TaskError"


def test_task_timeout_refuses_what_is_not_a_positive_number():
    for bad in (math.nan, -0.5, math.inf, "1", None.__class__):
        with pytest.raises(TaskLimitError):
            task_timeout(bad, 1.0, 60.0, "x")
