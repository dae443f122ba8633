"""Attacks on the judge through task code: no state a job's tests, setup or checker leave reaches a later job.

Each job's task code runs in a process forked for that job from a pristine judge, so what it changes dies with
it. One worker, jobs one after the other (the case where one job could spoil the next). Each attack is followed
by a wrong program that must still fail (the wrong twin) and a right one that must still pass (the honest twin).
"""
from __future__ import annotations

import pytest

from codechat.config import VerifierConfig
from codechat.tasks import Task
from codechat.tasks.stdio import IOTest, StdioSpec
from codechat.verifier.verify import Verifier
from sandbox_helpers import root_only

PROBE = Task("probe", "", ["assert probe() == 'ok'"], "probe")
RIGHT, WRONG = "def probe():\n    return 'ok'\n", "def probe():\n    return 'no'\n"
ALWAYS_PASS = ("import sys\nsys.modules['codechat.sandbox.modes'].run_tests = "
               "lambda *a, **k: {'status': 'passed', 'tests_passed': 1}\n")
"""Python that replaces the judge's test runner by one that passes everything."""
AS_ANSWER = f"__import__('builtins').exec({ALWAYS_PASS!r}) or 2"
"""The same as an expression worth 2, as a program's answer (SymPy's parser leaves string literals alone)."""


@pytest.fixture
def v():  # (one pool per test: an attack that works must not spoil the next test's judge)
    with Verifier(VerifierConfig(workers=1, timeout_s=10, memory_mb=512)) as ver:
        yield ver


def later_jobs_judged_right(v) -> None:
    wrong = v.verify(PROBE, WRONG)
    assert not wrong.passed and wrong.status == "failed", wrong
    assert v.verify(PROBE, RIGHT).passed


def test_a_test_that_patches_the_judge_changes_no_later_verdict(v):
    # plain task code, no eval: a client's test replaces the judge's test runner
    patch = Task("patch", "", [f"{ALWAYS_PASS}assert probe() == 'ok'"], "probe")
    v.verify(patch, RIGHT)
    later_jobs_judged_right(v)


def test_a_setup_that_patches_the_judge_changes_no_later_verdict(v):
    patch = Task("patch", "", ["assert probe() == 'ok'"], "probe", setup=ALWAYS_PASS)
    v.verify(patch, RIGHT)
    later_jobs_judged_right(v)


def test_program_text_a_test_sympifies_changes_no_later_verdict(v):
    pytest.importorskip("sympy")
    # a symbolic-answer test reads the program's answer with sympify, which evaluates it here
    sym = Task("sym", "", ["import sympy\nassert sympy.sympify(answer()) == 2"], "answer")
    first = v.verify(sym, f"def answer():\n    return {AS_ANSWER!r}\n")
    assert first.passed  # (that job's own verdict is its tests' to decide once they run the program's text)
    later_jobs_judged_right(v)
    assert not v.verify(sym, "def answer():\n    return '3'\n").passed
    assert v.verify(sym, "def answer():\n    return '1 + 1'\n").passed


@pytest.mark.parametrize("read", ["sympy.parsing.sympy_parser.parse_expr(out)", "sympy.S(out)",
                                  "sympy.simplify(out)"])
def test_program_output_a_checker_sympifies_changes_no_later_verdict(v, read):
    pytest.importorskip("sympy")
    checker = ("import sympy, sympy.parsing.sympy_parser\n"
               f"def check(inp, out, exp):\n    return {read} == sympy.Integer(int(exp))")
    stdio = Task("sym", "", [], stdio=StdioSpec([IOTest("", "2\n")], checker=checker))
    v.verify(stdio, f"print({AS_ANSWER!r})")
    later_jobs_judged_right(v)
    assert not v.verify(stdio, "print(3)").passed
    assert v.verify(stdio, "print('1+1')").passed


def test_interpreter_state_a_setup_sets_does_not_reach_the_next_job(v):
    # an honest setup that changes a module's state (decimal precision) for its own tests only
    low = Task("low", "", ["assert probe() == 'ok'\nassert str(D(1) / D(3)) == '0.333'"], "probe",
               setup="import decimal\ndecimal.getcontext().prec = 3\nD = decimal.Decimal")
    assert v.verify(low, RIGHT).passed
    full = Task("full", "", ["import decimal\nassert probe() == 'ok'\n"
                             "assert str(decimal.Decimal(1) / decimal.Decimal(3)) == '0.' + '3' * 28"], "probe")
    assert v.verify(full, RIGHT).passed


@root_only
def test_files_and_processes_a_test_leaves_do_not_reach_the_next_job(v):
    # a test leaves a file in the judge's /tmp and a process that would write another one later
    leave = Task("leave", "", ["import os, time\nopen('/tmp/left', 'w').write('x')\n"
                               "if os.fork() == 0:\n    time.sleep(0.5)\n    open('/tmp/later', 'w').write('x')\n"
                               "    os._exit(0)\nassert probe() == 'ok'"], "probe")
    assert v.verify(leave, RIGHT).passed
    empty = Task("empty", "", ["import os, time\ntime.sleep(1)\n"
                               "assert probe() == 'ok' and not {'left', 'later'} & set(os.listdir('/tmp'))"], "probe")
    assert v.verify(empty, RIGHT).passed
    assert not v.verify(empty, WRONG).passed


@root_only
def test_a_job_that_kills_its_judge_costs_no_later_job_its_verdict(v):
    # the job's process is not the pristine judge: ending it (or trying to signal the judge) ends only this job
    kill = Task("kill", "", ["import os, signal\nfor pid in (1, os.getppid()):\n"
                             "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n"
                             "os.kill(os.getpid(), signal.SIGKILL)"], "probe")
    assert not v.verify(kill, RIGHT).passed
    later_jobs_judged_right(v)


@root_only
def test_a_batch_mixing_hostile_task_code_with_honest_jobs_judges_every_honest_job_right():
    # hostile tasks (patching the judge, sympified program text, leftover processes and files) interleaved with
    # honest right and wrong programs on two workers, pipelined: no honest verdict changes
    hostile = [(Task("patch", "", [f"{ALWAYS_PASS}assert probe() == 'ok'"], "probe"), RIGHT),
               (Task("setup", "", ["assert probe() == 'ok'"], "probe", setup=ALWAYS_PASS), RIGHT),
               (Task("left", "", ["import os, time\nopen('/tmp/x', 'w')\nif os.fork() == 0:\n    time.sleep(2)\n"
                                  "    os._exit(0)\nassert probe() == 'ok'"], "probe"), RIGHT)]
    honest = [(PROBE, RIGHT), (PROBE, WRONG)]
    pairs = [(hostile + honest)[i % 5] for i in range(60)]
    with Verifier(VerifierConfig(workers=2, timeout_s=10, memory_mb=512)) as ver:
        verdicts = ver.verify_many(pairs)
    for (task, code), verdict in zip(pairs, verdicts):
        if task is PROBE:
            assert verdict.passed is (code == RIGHT), (code, verdict)
