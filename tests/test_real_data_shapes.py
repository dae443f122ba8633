"""Honest shapes of the public datasets pass and their wrong twins fail: LeetCodeDataset's prelude seen by the
program, a setup class in the program's annotations, `exit()` after printing, stdin/stdout decimals within
1e-6 with integers exact, MBPP+ imports kept out of the counted tests; and a sample of the real files' references."""
import json

import pytest

from codechat.config import VerifierConfig
from codechat.sandbox.stdio_judge import outputs_match
from codechat.tasks import Task, load_tasks
from codechat.tasks.loaders import load_tasks_with_format
from codechat.tasks.stdio import IOTest, StdioSpec
from codechat.verifier.verify import Verifier

LC_PRELUDE = ("from typing import *\nfrom heapq import *\nfrom collections import deque\n\n"
              "class ListNode:\n    def __init__(self, val=0, next=None):\n        self.val = val\n        self.next = next\n\n"
              "def list_node(values: list):\n    head = None\n    for v in reversed(values):\n        head = ListNode(v, head)\n"
              "    return head\n\ndef is_same_list(p, q):\n    while p and q:\n        if p.val != q.val:\n"
              "            return False\n        p, q = p.next, q.next\n    return p is None and q is None\n")
LC_RECORD = {
    "task_id": "reverse-list", "prompt": LC_PRELUDE, "entry_point": "Solution().reverseList",
    "query": "Reverse a linked list.\n```python\nclass Solution:\n    def reverseList(self, head: Optional[ListNode]) -> Optional[ListNode]:\n```",
    "test": "def check(candidate):\n    assert is_same_list(candidate(head = list_node([1,2,3])), list_node([3,2,1]))\n"
            "    assert candidate(head = None) is None\n",
    "completion": "class Solution:\n    def reverseList(self, head: Optional[ListNode]) -> Optional[ListNode]:\n"
                  "        prev = None\n        while head:\n            head.next, prev, head = prev, head, head.next\n"
                  "        return prev\n",
    "meta": {"difficulty": "Easy", "question_id": 206}, "input_output": [], "response": "",
}
LC_WRONG = ("class Solution:\n    def reverseList(self, head: Optional[ListNode]) -> Optional[ListNode]:\n"
            "        return head\n")
POINT = "from dataclasses import dataclass\n@dataclass\nclass Point:\n    x: int\n    y: int\n"


@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=2, timeout_s=10.0)) as v:
        yield v


def _leetcode(tmp_path):
    path = tmp_path / "lc.jsonl"
    path.write_text(json.dumps(LC_RECORD) + "\n")
    tasks, fmt = load_tasks_with_format(path)
    return tasks[0], fmt


def test_leetcode_records_load_with_their_reference_and_difficulty(tmp_path):
    task, fmt = _leetcode(tmp_path)
    assert fmt == "leetcode"
    assert task.solution == LC_RECORD["completion"]
    assert task.metadata["difficulty"] == "Easy" and task.prompt == LC_RECORD["query"]


def test_leetcode_prelude_names_reach_the_program(verifier, tmp_path):
    task, _ = _leetcode(tmp_path)  # `Optional[ListNode]` in the answer's own signature needs the prelude
    good, bad = verifier.verify_many([(task, task.solution), (task, LC_WRONG)])
    assert good.passed, good
    assert not bad.passed, bad


def test_setup_class_in_the_programs_annotations(verifier):
    task = Task("m", "", ["assert manhattan(Point(0, 0), Point(2, 3)) == 5"], "manhattan", POINT)
    honest = "def manhattan(p: Point, q: Point) -> int:\n    return abs(p.x - q.x) + abs(p.y - q.y)\n"
    wrong = "def manhattan(p: Point, q: Point) -> int:\n    return abs(p.x - q.x) + (p.y - q.y)\n"
    good, bad = verifier.verify_many([(task, honest), (task, wrong)])
    assert good.passed, good
    assert not bad.passed, bad


def _stdio(expected: str) -> Task:
    return Task("s", "read n", [], None, "", None, {}, stdio=StdioSpec([IOTest("2\n", expected)]))


def test_exit_after_printing_ends_a_stdio_program(verifier):
    task = _stdio("4\n")
    honest = "```python\nn = int(input())\nprint(n * n)\nexit()\n```"
    wrong = "```python\nn = int(input())\nprint(n + n + 1)\nquit(0)\n```"
    good, bad = verifier.verify_many([(task, honest), (task, wrong)])
    assert good.passed, good
    assert not bad.passed, bad


def test_stderr_debug_output_past_the_cap_does_not_fail_a_stdio_program(verifier):
    task = _stdio("4\n")
    noisy = "import sys\nfor i in range(20000):\n    print('debug', i, file=sys.stderr)\nn = int(input())\n"
    good, bad = verifier.verify_many([(task, f"```python\n{noisy}print(n * n)\n```"),
                                      (task, f"```python\n{noisy}print(n + 1)\n```")])
    assert good.passed, good
    assert not bad.passed and bad.status == "failed", bad


def test_a_module_table_larger_than_the_load_message_is_read_on_demand(verifier):
    task = Task("p", "count primes", ["assert count(10) == 4", "assert len(PRIMES) == 148933"], "count")
    sieve = ("N = 2_000_000\ns = bytearray([1]) * N\ns[0] = s[1] = 0\nfor i in range(2, 1415):\n    if s[i]:\n"
             "        s[i*i::i] = bytearray(len(range(i*i, N, i)))\nPRIMES = [i for i in range(N) if s[i]]\n"
             "FACT = {i: str(i) * 40 for i in range(300000)}\n")
    good, bad = verifier.verify_many([
        (task, sieve + "def count(n):\n    return sum(p <= n for p in PRIMES[:10])\n"),
        (task, sieve + "def count(n):\n    return sum(p < n - 3 for p in PRIMES[:10])\n")])
    assert good.passed, good
    assert not bad.passed and bad.status == "failed", bad


def test_stdio_decimals_within_1e6_by_default(verifier):
    task = _stdio("1.414213562\n")
    honest = "```python\nimport math\nprint(math.sqrt(int(input())))\n```"
    wrong = "```python\nprint(1.4142)\n```"
    good, bad = verifier.verify_many([(task, honest), (task, wrong)])
    assert good.passed, good
    assert not bad.passed, bad


@pytest.mark.parametrize("got,want,tol,ok", [
    ("1.4142135623730951", "1.414213562", 0, True), ("0.333333333", "0.3333333333", 0, True),
    ("5.0", "5", 0, True), ("1000000000.0", "1000000007", 0, False), ("1.267651e30", str(2 ** 100), 0, False),
    ("1000001", "1000000", 1e-3, False), ("0.5001", "0.5", 0, False), ("0.5001", "0.5", 1e-3, True),
    ("YES", "NO", 1e-3, False), ("1e5000", "1e5001", 0, False), ("nan", "nan", 0, True), ("inf", "1", 0, False),
])
def test_token_rule_integers_exact_decimals_within_tolerance(got, want, tol, ok):
    assert outputs_match(f"3 {got}\n", f"3 {want}\n", tol) is ok


def test_mbppplus_import_lines_are_setup_not_tests(tmp_path):
    rec = {"task_id": "Mbpp/82", "prompt": "volume", "entry_point": "volume_sphere", "canonical_solution":
           "import math\ndef volume_sphere(r):\n  return (4./3.) * math.pi * (r**3)\n", "base_input": [[10]],
           "plus_input": [], "atol": 0.0001,
           "assertion": "import math\n\nassert math.isclose(volume_sphere(10), 4188.790204786391, rel_tol=0.001)\n"}
    path = tmp_path / "plus.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    task = load_tasks(path)[0]
    assert task.tests == ["assert math.isclose(volume_sphere(10), 4188.790204786391, rel_tol=0.001)"]
    assert task.setup == "import math"


SAMPLE = {"leetcode/LeetCodeDataset-v0.2.0-train.jsonl.gz": 80, "mbpp/MbppPlus-v0.2.0.jsonl.gz": 60,
          "mbpp/sanitized-mbpp.json": 40, "mbpp/mbpp.jsonl": 40, "math/gsm8k_test.jsonl": 40,
          "math/math-test-4500.jsonl": 40, "mbpp/MbppPlus-OriginFmt-v0.2.0.jsonl.gz": 20, "stdio/apps": 5}


def test_a_sample_of_the_real_files_references_pass_and_do_nothing_programs_fail(verifier, shared_data):
    pairs, none = [], []
    for rel, n in SAMPLE.items():
        tasks = [t for t in load_tasks(shared_data / rel) if t.solution][:n]
        pairs += [(t, f"```python\n{t.solution}\n```" if t.stdio is not None else t.solution) for t in tasks]
        for t in tasks:
            if t.kind == "answer":
                none.append((t, "I do not know."))
            elif t.stdio is not None:
                none.append((t, "```python\npass\n```"))
            elif "(" in (t.entry_point or ""):
                none.append((t, "class Solution:\n    def __getattr__(self, n):\n        return lambda *a, **k: None\n"))
            else:
                none.append((t, f"def {t.entry_point}(*a, **k):\n    return None\n"))
    refs, nothing = verifier.verify_many(pairs), verifier.verify_many(none)
    failing = [(t.task_id, r.status, r.message[:80]) for (t, _), r in zip(pairs, refs) if not r.passed]
    assert not failing
    assert not [t.task_id for (t, _), r in zip(none, nothing) if r.passed]


IO_TESTS = ["import io, sys\nsys.stdin = io.StringIO('3 4\\n5\\n')\nassert add() == 7\nassert sys.stdin.readline() == '5\\n'",
            "from unittest import mock\nwith mock.patch('builtins.input', side_effect=['10 20']):\n    assert add() == 30",
            "import contextlib, io, sys\nbuf = io.StringIO()\nsys.stdin = io.StringIO('1 1\\n')\n"
            "with contextlib.redirect_stdout(buf):\n    add(True)\nassert buf.getvalue() == '2\\n'"]


def test_tests_that_set_stdin_or_patch_input_reach_the_program(verifier):
    task = Task("io", "add what input() reads", IO_TESTS, "add")
    honest = "def add(show=False):\n    a, b = map(int, input().split())\n    if show:\n        print(a + b)\n" \
             "    return a + b\n"
    wrong = honest.replace("print(a + b)", "print(a - b)").replace("return a + b", "return a * b")
    good, bad = verifier.verify_many([(task, honest), (task, wrong)])
    assert good.passed and good.tests_passed == 3, good
    assert bad.status == "failed" and bad.tests_passed == 0, bad


def test_dates_and_dict_views_cross_as_data(verifier):
    task = Task("dv", "dates and views", [
        "import datetime\nassert next_day(datetime.date(2024, 2, 28)) == datetime.date(2024, 2, 29)",
        "import datetime\nassert gap(1) == datetime.timedelta(days=1)",
        "assert names({'b': 1, 'a': 2}) == {'a', 'b'} and list(names({'b': 1, 'a': 2})) == ['b', 'a']",
        "assert sorted(pairs({'x': 1})) == [('x', 1)] and pairs({'x': 1}) == {('x', 1)}"], "next_day")
    honest = ("import datetime\ndef next_day(d):\n    return d + datetime.timedelta(days=1)\n"
              "def gap(n):\n    return datetime.timedelta(days=n)\ndef names(d):\n    return d.keys()\n"
              "def pairs(d):\n    return d.items()\n")
    wrong = honest.replace("days=1)", "days=2)").replace("days=n", "days=n + 1").replace("d.keys()",
                                                                                         "{'a': 0}.keys()")
    good, bad = verifier.verify_many([(task, honest), (task, wrong)])
    assert good.passed and good.tests_passed == 4, good
    assert bad.tests_passed == 1, bad  # only the items test, which the twin does not change


MONEY = ("class Money:\n    def __init__(self, c):\n        self.c = c\n    def __str__(self):\n"
         "        return f'${self.c / 100:.2f}'\n    def __add__(self, o):\n        return Money(self.c + o.c)\n"
         "    def __lt__(self, o):\n        return self.c < o.c\ndef make(c):\n    return Money(c)\n")


def test_the_programs_own_class_prints_orders_adds_and_is_an_instance_as_it_says(verifier):
    task = Task("money", "a Money class", [
        "assert str(make(150)) == '$1.50' and f'{make(5)}' == '$0.05'",
        "assert isinstance(make(1), Money) and not isinstance(3, Money)",
        "assert [str(m) for m in sorted([make(3), make(1), make(2)])] == ['$0.01', '$0.02', '$0.03']",
        "assert str(make(1) + make(2)) == '$0.03'"], "make")
    wrong = MONEY.replace("/ 100:.2f", "/ 10:.1f").replace("self.c < o.c", "self.c > o.c").replace(
        "self.c + o.c", "self.c - o.c").replace("    return Money(c)", "    return Money.__new__(object)")
    good, bad = verifier.verify_many([(task, MONEY), (task, wrong)])
    assert good.passed and good.tests_passed == 4, good
    assert bad.tests_passed == 0, bad


def test_the_programs_order_and_arithmetic_never_reach_the_tests_values(verifier):
    # `<`/`+` against a test's own value (`f() < 5`) stays Python's refusal: the program must not decide it
    cheat = "class Yes:\n    def __lt__(self, o):\n        return True\n    __gt__ = __add__ = __lt__\ndef f():\n    return Yes()\n"
    task = Task("cheat", "", ["assert f() < 5", "assert f() + 1 == True", "assert 5 > f()"], "f")
    r = verifier.verify(task, cheat)
    assert r.tests_passed == 0, r


def test_a_test_catches_the_programs_own_exception_class(verifier):
    task = Task("broke", "", ["try:\n    spend(-1)\nexcept Broke:\n    pass\nelse:\n    assert False",
                              "import pytest\nwith pytest.raises((Broke, KeyError)):\n    spend(-5)\nassert spend(3) == 3"],
                "spend")
    honest = "class Broke(Exception):\n    pass\ndef spend(c):\n    if c < 0:\n        raise Broke('no')\n    return c\n"
    wrong = honest.replace("raise Broke('no')", "raise ValueError('no')")
    good, bad = verifier.verify_many([(task, honest), (task, wrong)])
    assert good.passed and good.tests_passed == 2, good
    assert bad.tests_passed == 0, bad
