"""Strict numbers (the default): exact references stay exact, decimal references at their own precision; percent
signs on both sides compared as written; Unicode math and one-variable inequalities read as references write them.
Each honest shape has a wrong twin."""
import pytest

from codechat import CodechatError
from codechat.config import AnswerConfig
from codechat.tasks import Task
from codechat.verifier.answer import AnswerChecker
from codechat.verifier.answer_equiv import EquivPool, check_config, last_digit_unit
from fractions import Fraction

CASES = [  # (reference, answer, equal under strict)
    ("\\frac13", "0.3333333", False), ("\\frac13", "\\frac{2}{6}", True),
    ("7", "7.0000001", False), ("7", "7.0", True),
    ("\\sqrt{2}", "1.41421356", False), ("\\sqrt{2}", "2^{1/2}", True),
    ("2^{100}", "1.267651e30", False), ("2^{100}", "1267650600228229401496703205376", True),
    ("1000000007", "1000000000.0", False),
    ("50\\%", "0.5\\%", False), ("50\\%", "5000\\%", False), ("50\\%", "50\\%", True), ("50\\%", "0.5", True),
    ("3.14", "3.1416", True), ("3.14", "3.1", False), ("0.3333", "\\frac13", True), ("1.5e3", "1500.2", True),
    ("(-\\infty, 3)", "(-\\infty, 3]", False),
]
READ = [  # whole completions through the checker: Unicode math and inequalities as references write them
    ("90", "\\boxed{90°}", True), ("90", "\\boxed{80°}", False), ("\\frac12", "\\boxed{½}", True),
    ("\\frac12", "\\boxed{¼}", False), ("(-\\infty, 3)", "\\boxed{x < 3}", True),
    ("(-\\infty, 3)", "\\boxed{x \\le 3}", False), ("[1, 2)", "\\boxed{1 \\le x < 2}", True),
    ("2\\pi", "\\boxed{2π}", True), ("2\\pi", "\\boxed{3π}", False),
]


@pytest.fixture(scope="module")
def strict():
    with EquivPool(AnswerConfig()) as pool:
        yield pool


def test_strict_numbers(strict):
    outcomes = strict.compare_many([([r], a) for r, a, _ in CASES])
    wrong = [(r, a, o.status) for (r, a, want), o in zip(CASES, outcomes) if (o.status == "equal") != want]
    assert not wrong


def test_unicode_and_inequalities_read_as_references_write_them():
    tasks = [Task(f"m{i}", "q", [], kind="answer", metadata={"answer": ref}) for i, (ref, _, _) in enumerate(READ)]
    with AnswerChecker(AnswerConfig()) as checker:
        verdicts = checker.check_many([(t, c) for t, (_, c, _) in zip(tasks, READ)])
    assert [v.passed for v in verdicts] == [want for _, _, want in READ]


def test_lenient_numbers_keep_the_relative_tolerance():
    with EquivPool(AnswerConfig(numbers="lenient")) as pool:
        got = [o.status for o in pool.compare_many([(["\\frac13"], "0.3333333"), (["\\sqrt{2}"], "1.41421356"),
                                                    (["7"], "8")])]
    assert got == ["equal", "equal", "different"]


def test_unit_of_the_last_digit():
    assert last_digit_unit("3.14") == Fraction(1, 100) and last_digit_unit("1.5e3") == 100
    assert last_digit_unit("x = 2.5") == Fraction(1, 10) and last_digit_unit("1,000.25") == Fraction(1, 100)


def test_unknown_numbers_mode_is_one_line():
    with pytest.raises(CodechatError, match="verifier.answer.numbers"):
        check_config(AnswerConfig(numbers="loose"))
