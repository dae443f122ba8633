"""Every limit a client sends is clamped to the operator's: /run_code's `memory_limit_MB` (-1, SandboxFusion's
default, means the operator's cap) and `run_timeout`, /verify task records' `timeout_s` (`--max-task-timeout`).
A malformed limit (not a number, zero, negative) is a 400 naming the field. Each attack has an honest twin."""
from __future__ import annotations

import time

import httpx
import pytest

from serve_helpers import served

BIG = "x = bytearray(400 << 20)\nprint('allocated')"
SMALL = "x = bytearray(40 << 20)\nprint('allocated')"
LOOP = "while True:\n    pass"


@pytest.fixture(scope="module")
def url():
    with served("--workers", "2", "--memory-mb", "256", "--max-run-timeout", "2", "--max-task-timeout", "2") as s:
        yield s[0]


def run_code(url, program, **kw):
    return httpx.post(url + "/run_code", json={"code": program, "stdin": "", **kw}, timeout=60)


@pytest.mark.parametrize("memory", [-1, None, 1 << 20])
def test_memory_limit_is_at_most_the_operators(url, memory):
    over = run_code(url, BIG, memory_limit_MB=memory).json()
    assert over["status"] == "Failed" and "MemoryError" in over["run_result"]["stderr"]
    under = run_code(url, SMALL, memory_limit_MB=memory).json()  # the honest twin runs
    assert under["status"] == "Success" and under["run_result"]["stdout"] == "allocated\n"


@pytest.mark.parametrize("timeout", [1e300, 1e10, 3600])
def test_run_timeout_is_at_most_the_operators(url, timeout):
    t0 = time.monotonic()
    looped = run_code(url, LOOP, run_timeout=timeout).json()
    assert looped["run_result"]["status"] == "TimeLimitExceeded" and time.monotonic() - t0 < 15
    assert run_code(url, "print(1)", run_timeout=timeout).json()["status"] == "Success"


@pytest.mark.parametrize("field,value", [("run_timeout", -1), ("run_timeout", 0), ("run_timeout", "5"),
                                         ("memory_limit_MB", -5), ("memory_limit_MB", 0), ("memory_limit_MB", 32),
                                         ("compile_timeout", -3), ("code", 7), ("stdin", ["1"]),
                                         ("files", {"../escape.txt": "eA=="}), ("files", {"a.txt": "not base64!"})])
def test_a_malformed_limit_or_field_is_400_naming_it(url, field, value):
    r = run_code(url, "print(1)", **{field: value})
    assert r.status_code == 400 and field in r.json()["error"]


TASK = {"task_id": "f", "prompt": "", "entry_point": "f", "tests": ["assert f(1) == 1"]}
STDIO = {"task_id": "s", "prompt": "", "kind": "stdio", "tests": [{"input": "1\n", "output": "1\n"}]}


@pytest.mark.parametrize("timeout", [1e300, 1e10])
def test_task_timeout_is_at_most_the_operators(url, timeout):
    body = {"tasks": [{**TASK, "timeout_s": timeout}, {**STDIO, "timeout_s": timeout}],
            "completions": [{"task_id": "f", "completion": "def f(x):\n    while True:\n        pass"},
                            {"task_id": "f", "completion": "def f(x):\n    return x"},
                            {"task_id": "s", "completion": LOOP},
                            {"task_id": "s", "completion": "print(input())"}]}
    t0 = time.monotonic()
    r = httpx.post(url + "/verify", json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert [v["status"] for v in r.json()["verdicts"]] == ["timeout", "passed", "timeout", "passed"]
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize("timeout", [-1, 0, "2"])
def test_a_malformed_task_timeout_is_400_naming_it(url, timeout):
    body = {"tasks": [{**TASK, "timeout_s": timeout}], "completions": [{"task_id": "f", "completion": "x"}]}
    r = httpx.post(url + "/verify", json=body, timeout=60)
    assert r.status_code == 400 and "timeout_s" in r.json()["error"]
