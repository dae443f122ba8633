"""Honest programs of awkward shapes pass, and their wrong twins do not."""
import pytest

from codechat.config import VerifierConfig
from codechat.tasks import Task
from codechat.verifier.verify import Verifier

SETUP_POINT = "from dataclasses import dataclass\n@dataclass\nclass Point:\n    x: int\n    y: int\n"
SOLUTION_PROMPT = "from typing import *\n\nclass Solution:\n    def maxProfit(self, prices: List[int]) -> int:\n        "
DEEP = "def build(k):\n    head = None\n    for i in range(k):\n        head = {'val': i, 'next': head}\n    return head\n"
CASES = {  # name: (task, honest, wrong)
    "prints_a_lot": (Task("p", "", ["assert f(3) == 6"], "f"),
                     "def f(x):\n    for i in range(20000):\n        print('debug line', i)\n    return 2 * x\n",
                     "def f(x):\n    for i in range(20000):\n        print('debug line', i)\n    return x\n"),
    "generator_next_islice": (
        Task("g", "", ["g = f(3)\nassert next(g) == 0\nassert next(g) == 1",
                       "import itertools\nassert list(itertools.islice(f(10), 3)) == [0, 1, 2]"], "f"),
        "def f(n):\n    for i in range(n):\n        yield i\n", "def f(n):\n    for i in range(n):\n        yield i + 1\n"),
    "module_level_names": (Task("m", "", ["assert SQUARES[3] == 9", "assert TOTAL == 285"], None),
                           "SQUARES = [i * i for i in range(10)]\nTOTAL = sum(SQUARES)\n",
                           "SQUARES = list(range(10))\nTOTAL = sum(SQUARES)\n"),
    "module_globals_the_program_changes": (  # read after the calls, also inside a function the test defines
        Task("mg", "", ["tick()\ntick()\nassert COUNT == 2", "add(4)\nadd(5)\nassert SEEN == [4, 5]",
                        "def total():\n    return sum(SEEN)\nadd(1)\nassert total() == 10 and SEEN[-1] == 1"], "tick"),
        "COUNT = 0\nSEEN = []\ndef tick():\n    global COUNT\n    COUNT += 1\ndef add(x):\n    SEEN.append(x)\n",
        "COUNT = 0\nSEEN = []\ndef tick():\n    global COUNT\n    COUNT += 2\ndef add(x):\n    SEEN.insert(0, x)\n"),
    "generator_passed_in": (  # iterated where it lives: what the program leaves is the test's to read
        Task("gi", "", ["assert total(x * x for x in range(4)) == 14",
                        "g = (i for i in range(5))\nassert first_two(g) == [0, 1]\nassert next(g) == 2"], "total"),
        "def total(it):\n    return sum(it)\ndef first_two(it):\n    return [next(it), next(it)]\n",
        "def total(it):\n    return sum(it) - 1\ndef first_two(it):\n    return list(it)[:2]\n"),
    "walk_a_40000_deep_structure": (  # past the wire's depth cap the rest is a handle, read 200 levels at a time
        Task("deep", "", ["n, count, total = build(40000), 0, 0\nwhile n:\n    count += 1\n    total += n['val']\n"
                          "    n = n['next']\nassert (count, total) == (40000, 799980000)"], "build"),
        DEEP, DEEP.replace("range(k)", "range(1, k)")),
    "in_place_written_back": (
        Task("ip", "", ["nums = [3, 1, 2]\nsort_in_place(nums)\nassert nums == [1, 2, 3]",
                        "m = [[1, 2], [3, 4]]\nrow = m[0]\nflip(m)\nassert m == [[2, 1], [4, 3]] and m[0] is row"], None),
        "def sort_in_place(n):\n    n.sort()\ndef flip(m):\n    for r in m:\n        r.reverse()\n",
        "def sort_in_place(n):\n    n = sorted(n)\ndef flip(m):\n    m = [r[::-1] for r in m]\n"),
    "expected_exception_counts": (
        Task("e", "", ["try:\n    f(-1)\nexcept ValueError:\n    pass\nelse:\n    assert False"], "f"),
        "def f(x):\n    if x < 0:\n        raise ValueError('neg')\n    return x\n", "def f(x):\n    return x\n"),
    "redirect_stdout": (
        Task("r", "", ["import io, contextlib\nbuf = io.StringIO()\nwith contextlib.redirect_stdout(buf):\n"
                       "    hello('bob')\nassert buf.getvalue() == 'hello bob\\n'"], "hello"),
        "def hello(n):\n    print('hello', n)\n", "def hello(n):\n    print('hi', n)\n"),
    "test_callbacks": (
        Task("cb", "", ["assert apply(lambda v: v * 10, 3) == 30", "def inc(v):\n    return v + 1\nassert apply(inc, 1) == 2"],
             "apply"), "def apply(fn, x):\n    return fn(x)\n", "def apply(fn, x):\n    return x\n"),
    "big_ints": (Task("bi", "", ["assert big(5000) == 10 ** 5000"], "big"), "def big(n):\n    return 10 ** n\n",
                 "def big(n):\n    return 10 ** n + 1\n"),
    "identity": (Task("id", "", ["a = [1, 2]\nassert same(a) is a"], "same"), "def same(a):\n    return a\n",
                 "def same(a):\n    return list(a)\n"),
    "solution_class_prelude": (
        Task("sol", SOLUTION_PROMPT, ["assert Solution().maxProfit([7, 1, 5, 3, 6, 4]) == 5"], "Solution().maxProfit"),
        "best, lo = 0, float('inf')\n        for p in prices:\n            lo = min(lo, p)\n"
        "            best = max(best, p - lo)\n        return best\n", "return 0\n"),
}


@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=2, timeout_s=3.0)) as v:
        yield v


@pytest.mark.parametrize("name", list(CASES))
def test_honest_shape_passes_and_wrong_twin_fails(verifier, name):
    task, honest, wrong = CASES[name]
    good, bad = verifier.verify_many([(task, honest), (task, wrong)])
    assert good.passed, good
    assert not bad.passed, bad


def test_fenced_solution_class_after_a_prelude_prompt(verifier):
    task = CASES["solution_class_prelude"][0]
    code = ("```python\nclass Solution:\n    def maxProfit(self, prices):\n"
            "        return max(0, max(prices[j] - min(prices[:j + 1]) for j in range(len(prices))))\n```")
    assert verifier.verify(task, code).passed


def test_a_print_bomb_still_hits_the_output_cap(verifier):
    t = CASES["prints_a_lot"][0]
    assert verifier.verify(t, "def f(x):\n    while True:\n        print('spam' * 1000)\n").status == "output_limit"


def test_an_expected_output_holding_an_object_is_that_inputs_error(verifier):
    code = "def f(k):\n    if k == 0:\n        return [object()]\n    head = None\n    for i in range(k):\n" \
           "        head = {'next': head}\n    return head\n"
    r = verifier.call_function(code, "f", [[0], [500], [3]])
    assert r.status == "ok" and r.outputs[2] == {"next": {"next": {"next": None}}}, r
    assert [e is not None and "NotPlainData" in e for e in r.errors] == [True, True, False], r.errors
