"""Hostile-by-accident programs end as timeout / memory / output_limit / error within the limit + 1 s, and the
pool stays healthy afterwards. One hazard per test."""
import time

import pytest

from codechat.config import VerifierConfig
from codechat.tasks import Task
from codechat.verifier.verify import Verifier

LIMIT = 1.0
T = Task("f", "", ["assert f(1) == 2", "assert f(2) == 3"], "f")
GOOD = "def f(x):\n    return x + 1\n"


@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=2, timeout_s=LIMIT, memory_mb=512, nproc=32)) as v:
        v.verify_many([(T, GOOD)] * 4)  # (the pool's start is not a program's time)
        yield v


def check(v, code: str, statuses: tuple[str, ...]):
    t0 = time.monotonic()
    verdict = v.verify(T, code)
    elapsed = time.monotonic() - t0
    assert verdict.status in statuses, verdict
    assert elapsed < LIMIT + 1.0, f"took {elapsed:.2f}s"
    assert v.verify(T, GOOD).passed  # the host and the pool are still fine
    return verdict


def test_infinite_loop(verifier):
    check(verifier, "def f(x):\n    while True:\n        pass\n", ("timeout",))


def test_infinite_loop_at_import(verifier):
    check(verifier, "while True:\n    pass\n", ("timeout",))


def test_long_sleep(verifier):
    check(verifier, "import time\ndef f(x):\n    time.sleep(60)\n", ("timeout",))


def test_memory_bomb_at_once(verifier):
    check(verifier, "def f(x):\n    return [0] * (1 << 31)\n", ("memory",))


def test_memory_bomb_growing(verifier):
    # every chunk is written (memset), so on a busy machine the time limit may come first; both are fine
    check(verifier, "def f(x):\n    a = []\n    while True:\n        a.append(bytearray(32 << 20))\n", ("memory", "timeout"))


def test_huge_output(verifier):
    check(verifier, "def f(x):\n    while True:\n        print('spam' * 1000)\n", ("output_limit",))


def test_huge_single_write(verifier):
    check(verifier, "import sys\nsys.stdout.write('x' * (50 << 20))\n" + GOOD, ("output_limit", "memory"))


def test_deep_recursion(verifier):
    v = check(verifier, "def f(x):\n    return f(x)\n", ("error",))
    assert v.error_type == "RecursionError"


def test_deep_recursion_past_the_c_stack(verifier):
    check(verifier, "import sys\nsys.setrecursionlimit(10**8)\ndef g(n):\n    return g(n + 1) + 1\ndef f(x):\n    return g(0)\n",
          ("error", "memory", "timeout"))  # 3.11 keeps Python frames off the C stack: may run out of time first


def test_bounded_fork_bomb(verifier):
    check(verifier, "import os, time\ndef f(x):\n    for _ in range(64):\n        try:\n            os.fork()\n"
                    "        except OSError:\n            pass\n    time.sleep(30)\n", ("timeout", "error"))


def test_stray_threads_do_not_hold_the_verdict(verifier):
    # a correct answer with a spinning non-daemon thread: judged on the answers, then killed
    code = "import threading\ndef spin():\n    while True:\n        pass\nthreading.Thread(target=spin).start()\n" + GOOD
    check(verifier, code, ("passed", "timeout"))


def test_stdin_is_empty(verifier):
    check(verifier, "import sys\ndef f(x):\n    sys.stdin.read()\n    return x + 1\n", ("passed",))
