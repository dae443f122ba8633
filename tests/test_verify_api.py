"""The Verifier API as the trainer and evaluator use it: verdict fields, ordering, streaming, expected outputs."""
import os
import time

import pytest

from codechat.config import VerifierConfig
from codechat.tasks import Task
from codechat.verifier.verify import CallResult, Verifier

ADD = Task("add", "Write add.", ["assert add(1, 2) == 3", "assert add(0, 0) == 0", "assert add(-1, 1) == 0"], "add")
GOOD, WRONG = "def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a * b\n"


@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=2, timeout_s=3)) as v:
        yield v


def test_pass_has_full_reward_and_counts(verifier):
    v = verifier.verify(ADD, GOOD)
    assert (v.status, v.passed, v.reward, v.tests_passed, v.tests_total) == ("passed", True, 1.0, 3, 3)


def test_partial_failure_counts_each_assert(verifier):
    v = verifier.verify(ADD, WRONG)  # 1*2 != 3, 0*0 == 0, -1*1 != 0
    assert (v.status, v.passed, v.tests_passed, v.error_type) == ("failed", False, 1, "AssertionError")


def test_statuses_for_no_code_syntax_error_and_name_error(verifier):
    assert verifier.verify(ADD, "").status == "no_code"
    assert verifier.verify(ADD, "def add(a, b:\n    pass").status == "syntax_error"
    v = verifier.verify(ADD, "def plus(a, b):\n    return a + b\n")
    assert (v.status, v.error_type) == ("error", "NameError")


def test_verify_many_keeps_input_order(verifier):
    pairs = [(ADD, GOOD if i % 3 else WRONG) for i in range(12)]
    assert [v.passed for v in verifier.verify_many(pairs)] == [bool(i % 3) for i in range(12)]


def test_imap_streams_in_order(verifier):
    it = verifier.imap((ADD, GOOD if i % 2 else WRONG) for i in range(6))
    assert next(it).passed is False and next(it).passed is True
    assert [v.passed for v in it] == [False, True, False, True]


def test_task_setup_and_program_made_objects(verifier):
    # MBPP 367-style: the setup builds a tree from the program's own Node class
    task = Task("tree", "", ["assert depth(root) == 3", "assert depth(leaf) == 1"], "depth",
                setup="root = Node(1)\nroot.left = Node(2)\nroot.left.left = Node(3)\nleaf = Node(4)\n")
    code = ("class Node:\n    def __init__(self, v):\n        self.v, self.left, self.right = v, None, None\n"
            "def depth(n):\n    return 0 if n is None else 1 + max(depth(n.left), depth(n.right))\n")
    assert verifier.verify(task, code).passed


def test_generators_and_truthiness_of_program_objects(verifier):
    task = Task("g", "", ["assert list(evens(5)) == [0, 2, 4]", "assert starts_with_a('abc')", "assert not starts_with_a('b')"],
                "evens")
    code = "import re\ndef evens(n):\n    return (i for i in range(n) if i % 2 == 0)\ndef starts_with_a(s):\n    return re.match('a', s)\n"
    assert verifier.verify(task, code).passed


def test_humaneval_style_check_script(verifier):
    task = Task("HE/1", 'def inc(x: int) -> int:\n    """x + 1"""\n',
                ["def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(-1) == 0\n\ncheck(inc)\n"], "inc")
    assert verifier.verify(task, "    return x + 1\n").passed
    assert not verifier.verify(task, "    return x\n").passed


def test_call_function_returns_plain_outputs_and_errors(verifier):
    code = "def div(a, b):\n    return a / b\n"
    r = verifier.call_function(code, "div", [[1, 2], [1, 0], [3, 1]], timeout_s=3)
    assert isinstance(r, CallResult) and r.status == "ok"
    assert r.outputs == [0.5, None, 3.0]
    assert r.errors[0] is None and r.errors[1].startswith("ZeroDivisionError") and r.errors[2] is None


def test_call_function_reports_timeout(verifier):
    r = verifier.call_function("def f(x):\n    while True:\n        pass\n", "f", [[1]], timeout_s=1)
    assert r.status == "timeout" and r.outputs == [None]


def test_verify_io_compares_in_the_judge_with_atol(verifier):
    task = Task("sq", "", [], "sqrt2")
    inputs, expected = [[2.0], [4.0]], [1.41421356, 2.0]
    assert verifier.verify_io(task, "def sqrt2(x):\n    return x ** 0.5\n", inputs, expected, atol=1e-6).passed
    v = verifier.verify_io(task, "def sqrt2(x):\n    return x / 2\n", inputs, expected, atol=1e-6)
    assert not v.passed and v.tests_passed == 1 and v.tests_total == 2


def test_verify_io_rejects_always_equal_objects(verifier):
    code = "class A:\n    def __eq__(self, o):\n        return True\ndef f(x):\n    return A()\n"
    assert not verifier.verify_io(Task("f", "", [], "f"), code, [[1]], [1]).passed


def test_expected_outputs_from_reference_then_verify(verifier):
    # the evaluator's flow for MBPP+/HumanEval+: outputs of the reference become the expected outputs
    ref = "def rev(s):\n    return s[::-1]\n"
    inputs = [["abc"], [""], ["ab"]]
    expected = verifier.call_function(ref, "rev", inputs).outputs
    task = Task("rev", "", [], "rev")
    assert verifier.verify_io(task, ref, inputs, expected).passed
    assert not verifier.verify_io(task, "def rev(s):\n    return s\n", inputs, expected).passed


def test_task_without_tests_never_passes(verifier):
    assert verifier.verify(Task("empty", "", [], "f"), "def f():\n    pass\n").status == "error"


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _children() -> set[int]:
    pid = os.getpid()
    return {int(p) for tid in os.listdir(f"/proc/{pid}/task")
            for p in open(f"/proc/{pid}/task/{tid}/children").read().split()}


def test_close_leaves_no_process_or_fd_behind():
    before_fds, before_kids = _fds(), _children()
    with Verifier(VerifierConfig(workers=2, timeout_s=2)) as v:
        v.verify_many([(ADD, GOOD), (ADD, "import os\nos.fork()\n" + GOOD)] * 3)
    time.sleep(0.05)
    assert _children() == before_kids and _fds() == before_fds


def test_pool_replaces_a_dead_zygote():
    with Verifier(VerifierConfig(workers=1, timeout_s=2)) as v:
        assert v.verify(ADD, GOOD).passed
        zygote = v.pool._all[0]
        os.kill(zygote.proc.pid, 9)
        zygote.proc.wait()
        first = v.verify(ADD, GOOD)  # the job on the dead zygote is an infrastructure error, never a pass
        assert first.passed or first.status == "infra_error"
        assert v.verify(ADD, GOOD).passed and v.verify(ADD, WRONG).status == "failed"
