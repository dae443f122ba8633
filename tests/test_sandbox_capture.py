"""Capture jobs: a program run on stdin with every protection on, its stdout, stderr and exit code returned."""
from __future__ import annotations

import pytest

from codechat.sandbox.capture import capture_job, captured
from codechat.sandbox.pool import SandboxPool
from codechat.tasks import TaskFormatError
from codechat.tasks.loaders import tasks_from_records


@pytest.fixture(scope="module")
def pool():
    p = SandboxPool(1, warn=False)
    yield p
    p.close()


def run(pool, code, stdin=b"", **kw):
    return captured(pool.run(capture_job(code, stdin, **{"timeout_s": 3, "memory_mb": 256, **kw})))


def test_stdout_stderr_and_exit_code_come_back(pool):
    c = run(pool, "import sys\nx = input()\nprint(x[::-1])\nprint('warn', file=sys.stderr)\nsys.exit(4)", b"abc\n")
    assert (c.status, c.return_code, c.stdout, c.stderr) == ("finished", 4, "cba\n", "warn\n")


def test_uncaught_exception_is_exit_1_and_memory_is_flagged(pool):
    assert run(pool, "raise KeyError(3)").return_code == 1
    c = run(pool, "x = bytearray(1 << 33)")
    assert c.return_code == 1 and c.memory and "MemoryError" in c.stderr


def test_stdout_over_the_cap_is_output_limit_not_a_truncated_answer(pool):
    assert run(pool, "print('x' * 5000)", max_stdout_bytes=1000).status == "output_limit"


def test_killed_by_a_signal_is_a_negative_exit(pool):
    assert run(pool, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)").return_code == -11


def test_the_network_is_closed_to_a_captured_program(pool):
    c = run(pool, "import socket\ns = socket.socket()\ns.connect(('1.1.1.1', 80))")
    assert c.status == "finished" and c.return_code != 0


def test_records_load_by_detected_format_and_errors_name_the_record():
    apps, mbpp = tasks_from_records([{"problem_id": 1, "question": "q", "input_output": '{"inputs": ["1"], '
                                      '"outputs": ["1"]}'}, {"task_id": 2, "text": "add", "code": "def f(): pass",
                                                             "test_list": ["assert f() is None"]}], "body")
    assert apps.stdio is not None and mbpp.tests == ["assert f() is None"]
    with pytest.raises(TaskFormatError, match=r"body\[1\]: unknown format"):
        tasks_from_records([apps.to_dict(), {"x": 1}], "body")
