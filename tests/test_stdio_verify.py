"""stdin/stdout tasks end to end through the sandbox: honest programs pass, wrong or hostile ones do not.

One behaviour or attack per test (STYLE habit 12). The judge-side comparison is fuzzed in test_stdio_compare.py.
"""
import pytest

from codechat.config import RewardConfig, VerifierConfig
from codechat.rollout.rewards import RewardContext, compose_rewards
from codechat.tasks import Task
from codechat.tasks.stdio import IOTest, StdioSpec
from codechat.verifier.verify import Verifier

SUM = "a, b = map(int, input().split())\nprint(a + b)\n"


def task(pairs, timeout_s=None, **spec) -> Task:
    return Task("t", "add two numbers", [], timeout_s=timeout_s,
                stdio=StdioSpec([IOTest(i, o) for i, o in pairs], **spec))


ADD = task([(f"{i} {i + 1}\n", f"{2 * i + 1}\n") for i in range(4)])


@pytest.fixture(scope="module")
def v():
    with Verifier(VerifierConfig(workers=2, timeout_s=2.0, memory_mb=512)) as ver:
        yield ver


@pytest.mark.parametrize("code", [
    SUM,
    "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)",
    "a, b = map(int, open(0).read().split())\nprint(a + b)",
    "import sys\na, b = map(int, sys.stdin.buffer.readline().split())\nsys.stdout.buffer.write(b'%d\\n' % (a + b))",
    "import os\na, b = map(int, os.read(0, 100).split())\nos.write(1, str(a + b).encode())",
    "def main():\n    a, b = map(int, input().split())\n    print(a + b)\n\nif __name__ == '__main__':\n    main()",
    "import sys\n" + SUM + "sys.exit(0)",
    "import os, sys\n" + SUM + "sys.stdout.flush()\nos._exit(0)",
    "import sys\nprint('debug', file=sys.stderr)\n" + SUM,  # stderr is not compared
    "a, b = map(int, input().split())\nprint(a + b, '  ')\nprint()\nprint()",  # trailing whitespace, blank lines
    "import sys, threading\nsys.setrecursionlimit(10 ** 6)\nthreading.stack_size(1 << 26)\n"
    "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
    "def main():\n    a, b = map(int, input().split())\n    print(a + b + depth(20000) - 20000)\n"
    "threading.Thread(target=main).start()",  # the deep-recursion idiom: output comes after the main thread ends
    "import atexit\na, b = map(int, input().split())\natexit.register(lambda: print(a + b))",
], ids=["input", "stdin.read", "open0", "buffer", "os.read", "main-guard", "sys.exit0", "os._exit", "stderr",
        "trailing-ws", "thread", "atexit"])
def test_honest_programs_pass(v, code):
    verdict = v.verify(ADD, f"```python\n{code}\n```")
    assert verdict.passed, verdict
    assert verdict.tests_passed == verdict.tests_total == 4


def test_wrong_answer_fails_with_partial_credit(v):
    verdict = v.verify(ADD, "a, b = map(int, input().split())\nprint(a + b if a < 2 else 0)")
    assert (verdict.status, verdict.error_type, verdict.tests_passed, verdict.tests_total) == \
        ("failed", "WrongAnswer", 2, 4)
    assert verdict.message.startswith("test 2:")
    reward, _ = compose_rewards({"pass-fraction": 1.0}, ADD, "", verdict, RewardContext(cfg=RewardConfig()))
    assert reward == 0.5


def test_leading_whitespace_is_significant(v):
    assert v.verify(ADD, SUM.replace("print(a + b)", "print(' ', a + b)")).status == "failed"


def test_runtime_error_after_right_output_is_an_error(v):
    verdict = v.verify(ADD, SUM + "raise ValueError('late')")
    assert (verdict.status, verdict.error_type) == ("error", "RuntimeError")


def test_nonzero_exit_is_an_error(v):
    verdict = v.verify(ADD, "import sys\n" + SUM + "sys.exit(2)")
    assert (verdict.status, verdict.error_type) == ("error", "NonZeroExit")


def test_syntax_error(v):
    assert v.verify(ADD, "```python\nprint(\n```").status == "syntax_error"


def test_float_tolerance():
    pairs = [("", "0.333333\n")]
    with Verifier(VerifierConfig(workers=1, timeout_s=2.0)) as ver:
        assert ver.verify(task(pairs), "print(1/3)").passed  # decimals within 1e-6 by default
        assert not ver.verify(task([("", "0.3333\n")]), "print(1/3)").passed
        assert ver.verify(task([("", "0.3333\n")], float_tol=1e-3), "print(1/3)").passed
        assert ver.verify(task(pairs, float_tol=1e-5), "print(1/3)").passed
        assert not ver.verify(task(pairs, float_tol=1e-5), "print(0.3334)").passed


def test_checker_runs_on_the_judge_side(v):
    # any divisor of the input is accepted; the checker gets the input, the output and the expected output
    checker = "def check(inp, out, exp):\n    n = int(inp)\n    d = int(out)\n    return 1 < d < n and n % d == 0"
    t = task([("12\n", "2\n"), ("15\n", "3\n")], checker=checker)
    assert v.verify(t, "n = int(input())\nprint(max(d for d in range(2, n) if n % d == 0))").passed
    assert not v.verify(t, "print(1)").passed
    broken = task([("1\n", "1\n")], checker="def check(i, o, e):\n    return 1 / 0")
    assert v.verify(broken, "print(1)").error_type == "CheckerError"


# Knows the shape of the answer ("ANSWER:" + digits) but not the digits: scans every readable byte of its own
# memory and of its parent's (the runner) for it, and prints the first match.
MEMORY_PROBE = """import ctypes, os, re
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: make its own /proc/self/mem readable
pattern = re.compile(('ANS' + 'WER:').encode() + rb'[0-9]{8}')
def scan(pid):
    try:
        maps = open(f'/proc/{pid}/maps').read().splitlines()
        mem = open(f'/proc/{pid}/mem', 'rb')
    except OSError:
        return None
    for line in maps:
        lo, hi = (int(x, 16) for x in line.split()[0].split('-'))
        if 'r' not in line.split()[1] or hi - lo > 1 << 28:
            continue
        try:
            mem.seek(lo)
            m = pattern.search(mem.read(hi - lo))
        except (OSError, ValueError, OverflowError):
            continue
        if m:
            return m.group().decode()
    return None
print(scan('self') or scan(os.getppid()) or 'none')
"""


def test_memory_probe_finds_an_answer_that_is_in_the_process(v):
    # positive control: when the answer is in the program's own input, the probe finds it
    verdict = v.verify(task([("ANSWER:48151623\n", "ANSWER:48151623\n")]), f"```python\n{MEMORY_PROBE}\n```")
    assert verdict.passed, verdict


def test_program_cannot_find_the_expected_output_or_other_inputs(v):
    expected_only = task([("\n", "ANSWER:48151623\n")])
    assert not v.verify(expected_only, f"```python\n{MEMORY_PROBE}\n```").passed
    other_input = task([("\n", "ANSWER:27182818\n"), ("ANSWER:27182818\n", "x\n")])
    assert v.verify(other_input, f"```python\n{MEMORY_PROBE}\n```").tests_passed == 0


def test_program_cannot_forge_its_exit_report(v):
    # the runner's socket is closed in the program: writing a forged "exited 0 in 0 s" trailer goes nowhere
    forge = ("import os, struct\nfor fd in range(3, 64):\n    try:\n"
             "        os.write(fd, b'T' + struct.pack('>bidd', 0, 0, 0.0, 0.0))\n    except OSError:\n        pass\n"
             "print(3)\nraise SystemExit(5)")
    verdict = v.verify(task([("", "3\n")]), forge)
    assert (verdict.status, verdict.error_type) == ("error", "NonZeroExit"), verdict


def test_killing_its_runner_is_an_error_not_a_pass(v):
    # In a PID namespace the runner is process 1 there and ignores the kill: the output is then judged as usual.
    # Either way a wrong output never passes, and a right one never turns into a forged verdict.
    kill = "import os\nprint({}, flush=True)\nos.kill(os.getppid(), 9)"
    wrong = v.verify(task([("", "2\n")]), kill.format(1))
    assert not wrong.passed and wrong.status in ("failed", "error"), wrong
    right = v.verify(task([("", "1\n")]), kill.format(1))
    assert right.passed or (right.status, right.error_type) == ("error", "EarlyExit"), right


def test_each_test_runs_in_a_fresh_process(v):
    code = "import os\nprint('seen' if os.path.exists('state') else 'fresh')\nopen('state', 'w').write('x')"
    verdict = v.verify(task([("", "fresh\n")] * 3), code)
    assert verdict.passed, verdict


def test_stdout_over_the_cap_is_output_limit():
    with Verifier(VerifierConfig(workers=1, max_result_mb=1)) as ver:
        verdict = ver.verify(task([("", "x\n")]), "import sys\nsys.stdout.write('x' * (3 << 20))")
    assert verdict.status == "output_limit"


def test_infinite_loop_times_out(v):
    verdict = v.verify(task([("", "1\n")], timeout_s=0.5), "while True:\n    pass")
    assert verdict.status == "timeout"


def test_stop_at_first_failure():
    t = task([("", "1\n"), ("", "2\n"), ("", "2\n"), ("", "2\n")])
    code = "print(2)"
    with Verifier(VerifierConfig(workers=1)) as ver:
        assert ver.verify(t, code).tests_passed == 3
    with Verifier(VerifierConfig(workers=1, stop_at_first_failure=True)) as ver:
        verdict = ver.verify(t, code)
    assert (verdict.status, verdict.tests_passed, verdict.message) == ("failed", 0, "test 0: wrong output")


def test_total_time_limit():
    t = task([("", "1\n")] * 4)
    code = "import time\ntime.sleep(0.3)\nprint(1)"
    with Verifier(VerifierConfig(workers=1, total_timeout_s=0.75)) as ver:
        verdict = ver.verify(t, code)
    assert (verdict.status, verdict.tests_passed) == ("timeout", 2), verdict
    assert "total time limit" in verdict.message


def test_cpu_time_limit_ignores_time_spent_off_cpu():
    # a program descheduled for 1.2 s (as on a busy machine) but using little CPU: wall clock says timeout,
    # CPU time says pass; a program that really burns CPU times out either way. Both times are recorded.
    slow_machine = "import time\ns = sum(range(10**6))\ntime.sleep(1.2)\nprint(1)"
    burner = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.5:\n    pass\nprint(1)"
    t = task([("", "1\n")], timeout_s=1.0)
    with Verifier(VerifierConfig(workers=1)) as ver:
        assert ver.verify(t, slow_machine).status == "timeout"
    with Verifier(VerifierConfig(workers=1, cpu_time_limit=True)) as ver:
        ok = ver.verify(t, slow_machine)
        assert ok.passed, ok
        assert ok.duration_s >= 1.2 and 0 < ok.cpu_s < 1.0
        burnt = ver.verify(t, burner)
        # over the CPU limit (or, on a very loaded machine, past the 3x + 1 s wall-clock backstop first)
        assert burnt.status == "timeout" and (burnt.cpu_s > 1.0 or burnt.duration_s >= 4.0), burnt


def test_verify_many_keeps_order_across_tasks(v):
    one = task([("", "1\n")])
    pairs = [(ADD, SUM), (one, "print(1)"), (ADD, "print(0)"), (one, "no code at all."), (one, "print(1)")]
    got = [x.status for x in v.verify_many(pairs)]
    assert got == ["passed", "passed", "failed", "no_code", "passed"]
