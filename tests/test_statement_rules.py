"""Statements of public stdin/stdout sets say how output is judged (the records carry no checker): "any case",
a stated error bound, "print any of them". Each honest shape has a wrong twin."""
import json
import warnings

import pytest

from codechat.commands.tasks import summarize
from codechat.config import VerifierConfig
from codechat.config.io import load_config
from codechat.tasks import load_tasks
from codechat.tasks.statement import not_unique, statement_rules
from codechat.tasks.stdio import IOTest
from codechat.tasks.stdio_loaders import stdio_task
from codechat.train.runner import load_task_sets
from codechat.verifier.verify import Verifier

YES = 'Print "YES" if the number is even and "NO" otherwise. You can print each letter in any case.'
PLAIN = 'Print "YES" if the number is even and "NO" otherwise.'
ROOT = "Print the square root of n. Your answer is accepted if its absolute or relative error does not exceed 10^{-4}."
STRICT = "Print the square root of n. Your answer is accepted if its absolute or relative error does not exceed 10^{-9}."
ANY = "Print a permutation of 1..n with no fixed point. If there are several answers, print any of them."


@pytest.fixture(scope="module")
def v():
    with Verifier(VerifierConfig(workers=2, timeout_s=3.0, memory_mb=512)) as ver:
        yield ver


def code_task(statement, pairs):
    return stdio_task("t", statement, [IOTest(i, o) for i, o in pairs], "test")


def run(v, statement, pairs, program):
    return v.verify(code_task(statement, pairs), f"```python\n{program}\n```").passed


def test_any_case_statements_compare_words_case_insensitively(v):
    pairs = [("4\n", "YES\n"), ("3\n", "NO\n")]
    honest = "n = int(input())\nprint('yes' if n % 2 == 0 else 'no')"
    assert run(v, YES, pairs, honest)
    assert not run(v, YES, pairs, "n = int(input())\nprint('no' if n % 2 == 0 else 'yes')")  # wrong twin
    assert not run(v, PLAIN, pairs, honest)  # the statement does not relax the case


def test_a_stated_error_bound_is_the_tolerance(v):
    pairs = [("2\n", "1.41421356237\n")]
    assert run(v, ROOT, pairs, "print('%.5f' % (int(input()) ** 0.5))")
    assert not run(v, ROOT, pairs, "print('%.2f' % (int(input()) ** 0.5))")  # off by 4e-3: wrong twin
    assert not run(v, STRICT, pairs, "print('%.5f' % (int(input()) ** 0.5))")  # 1e-9 asked: 4e-6 is too far


def test_statement_rules():
    assert statement_rules(YES).ignore_case and not statement_rules(PLAIN).ignore_case
    assert statement_rules(ROOT).float_tol == pytest.approx(1e-4)
    assert statement_rules("absolute or relative error does not exceed 1e-6.").float_tol == pytest.approx(1e-6)
    assert statement_rules(ANY).multiple_answers and not statement_rules(PLAIN).multiple_answers


def test_several_answers_are_counted_warned_and_left_out_of_training(tmp_path):
    rows = [{"name": n, "description": s, "public_tests": {"input": ["1\n"], "output": ["1\n"]},
             "private_tests": {"input": [], "output": []}, "generated_tests": {"input": [], "output": []},
             "solutions": {"language": [3], "solution": ["print(input())"]}} for n, s in (("a", ANY), ("b", PLAIN))]
    path = tmp_path / "cc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.warns(UserWarning, match="1 of 2 tasks accept any of several answers"):
        tasks = load_tasks(path)
    assert [not_unique(t) for t in tasks] == [True, False]
    assert "several answers without checker 1" in summarize(tasks, "codecontests")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_config(None, [f"data.train={path}"])
        assert [t.task_id for t in load_task_sets(cfg)[0]] == ["b"]
        cfg = load_config(None, [f"data.train={path}", "data.multiple_answers=keep"])
        assert len(load_task_sets(cfg)[0]) == 2


def test_apps_unwrap_takes_one_element_lists_only():
    ns = {}
    from codechat.tasks.stdio_loaders import SAME
    exec(SAME, ns)
    same = ns["_codechat_same"]
    assert same(3, [3], True) and not same(0, [0, 1], True) and not same(3, [3], False)
