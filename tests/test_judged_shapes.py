"""Honest answers judged wrong before, each with its wrong twin: the fix must not pass the wrong one."""
from __future__ import annotations

import json

import pytest

from codechat.config import VerifierConfig
from codechat.sandbox import modes
from codechat.tasks import Task, load_tasks
from codechat.tasks.stdio import IOTest, StdioSpec
from codechat.verifier.answer_equiv import EquivPool
from codechat.verifier.verify import Verifier

DOUBLE = Task("double", "", [], stdio=StdioSpec([IOTest("3\n", "6\n"), IOTest("10\n", "20\n")]))


@pytest.fixture(scope="module")
def v():
    with Verifier(VerifierConfig(workers=2, timeout_s=5, memory_mb=512)) as ver:
        yield ver


@pytest.mark.parametrize("after", ["Sample input:\n```\n3\n```\n", "Run it with:\n```\npython3 sol.py < in.txt\n```\n"])
def test_a_python_fence_followed_by_a_bare_fence_runs_the_python_fence(v, after):
    right = f"Solution:\n```python\nprint(int(input()) * 2)\n```\n{after}"
    wrong = f"Solution:\n```python\nprint(int(input()) + 2)\n```\n{after}"
    assert v.verify(DOUBLE, right).passed
    assert not v.verify(DOUBLE, wrong).passed


def test_a_bare_fence_alone_is_still_the_program(v):
    assert v.verify(DOUBLE, "```\nprint(int(input()) * 2)\n```").passed


@pytest.mark.parametrize("ref, answer, same", [
    (r"440\text{ m}^2", r"440\text{ cm}^2", False),
    (r"440\text{ m}^2", r"440\text{ m}^2", True),
    (r"440\text{ m}^2", r"440\text{ square meters}", True),
    (r"440\text{ m}^2", "440", True),  # (a unit on one side only: the number decides, as before)
    (r"5\text{ km}", r"5\text{ m}", False),
    (r"3\text{ hours}", r"3 \text{hr}", True),
    (r"7\text{ apples}", r"7\text{ pears}", True),  # (units this table does not know: left to the library)
])
def test_math_answers_keep_their_units(ref, answer, same):
    with EquivPool() as pool:
        assert (pool.compare([ref], answer).status == "equal") is same


def test_mbpp_plus_checks_the_output_type_before_closeness_like_evalplus():
    assert not modes.outputs_match((1.0, 2.0), [1.0, 2.0], 1e-6)  # a tuple is not a list of floats
    assert not modes.outputs_match([1.0, 2.0], (1.0, 2.0), 1e-6)
    assert not modes.outputs_match(2, 2.5, 1e-6)
    assert modes.outputs_match([1.0000001, 2.0], [1.0, 2.0], 1e-6)  # the honest twin: same type, close
    assert modes.outputs_match((1.0, 2.0), (1.0, 2.0), 1e-6) and modes.outputs_match(2, 2.0, 0)


def test_mbpp_plus_tuple_result_fails_base_against_expected_float_lists(v):
    task = Task("Mbpp/x", "", ["pass"], "halves")
    inputs, expected = [[[1, 2]], [[3]]], [[0.5, 1.0], [1.5]]
    right = "def halves(xs):\n    return [x / 2 for x in xs]\n"
    wrong = "def halves(xs):\n    return tuple(x / 2 for x in xs)\n"
    assert v.verify_io(task, right, inputs, expected, atol=1e-6).passed
    assert not v.verify_io(task, wrong, inputs, expected, atol=1e-6).passed


def test_a_test_that_gives_the_program_a_byte_stdin_reaches_its_buffer(v):
    tests = ["import io, sys\nsys.stdin = io.TextIOWrapper(io.BytesIO(b'3\\n4\\n'))\nassert total() == 7\n"
             "assert sys.stdin.read() == ''"]
    task = Task("stdin", "", tests, "total")
    right = "import sys\ndef total():\n    return sum(map(int, sys.stdin.buffer.read().split()))\n"
    wrong = "import sys\ndef total():\n    return sum(map(int, sys.stdin.buffer.readline().split()))\n"
    assert v.verify(task, right).passed
    assert not v.verify(task, wrong).passed
    text = Task("stdin", "", ["import io, sys\nsys.stdin = io.StringIO('3\\n4\\n')\nassert total() == 7"], "total")
    assert not v.verify(text, right).passed  # (a StringIO has no .buffer, in Python as here)


def test_a_humaneval_prompt_that_is_a_prelude_without_the_entry_point_is_kept(v, tmp_path):
    rec = {"task_id": "HE/pre", "entry_point": "scaled",
           "prompt": "import math\n\nclass Scale:\n    K = 3\n\n",
           "canonical_solution": "def scaled(x):\n    return Scale.K * math.floor(x)\n",
           "test": "def check(candidate):\n    assert candidate(2.5) == 6\n    assert candidate(1) == 3\n"}
    path = tmp_path / "he.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    (task,) = load_tasks(path)
    assert v.verify(task, task.metadata["solution"]).passed
    assert v.verify(task, "```python\ndef scaled(x):\n    return Scale.K * math.floor(x)\n```").passed
    assert not v.verify(task, "def scaled(x):\n    return Scale.K * math.ceil(x)\n").passed
