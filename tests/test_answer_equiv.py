"""Answer equivalence: a table of (reference, answer, verdict) pairs through the real checker (exact rules and
math-verify workers), the percent setting, answers a naive float compare would accept, the time limit that kills
a worker, and no evaluation of model text."""
import subprocess
import sys
import time

import pytest

from codechat import CodechatError
from codechat.config import AnswerConfig
from codechat.tasks.answer import answer_task
from codechat.verifier.answer import AnswerChecker
from codechat.verifier.answer_equiv import WORKER, EquivPool, check_config

T, F = True, False
TABLE = [
    # fractions, decimals, integers
    ("\\frac12", "0.5", T), ("\\frac{1}{2}", "1/2", T), ("0.5", "\\dfrac{1}{2}", T), ("\\frac{3}{4}", "0.75", T),
    ("\\frac{2}{4}", "\\frac12", T), ("-\\frac{3}{2}", "-1.5", T), ("\\frac{1}{3}", "0.3333333", F),
    ("\\frac{1}{3}", "0.333", F), ("\\frac{1}{3}", "0.33", F), ("3", "3.0", T), ("3", "3.00", T),
    ("3", "03", T), ("0.1", ".1", T), ("7", "-7", F), ("12", "21", F), ("1.5", "1.50", T),
    # thousands separators, money, units
    ("1000", "1,000", T), ("1234567", "1,234,567", T), ("1000", "1,001", F), ("18", "\\$18", T),
    ("18", "18 \\text{ dollars}", T), ("10", "10 \\text{ cm}", T), ("10", "10\\text{ meters}", T), ("5", "5.", T),
    ("1.5", "1,5", F),
    # naive float compare accepts these; exact rules do not
    ("9007199254740993", "9007199254740992", F), ("10000000000000001", "10000000000000000", F),
    ("0", "0.0000001", F), ("0", "1e-9", F), ("\\frac{1}{3}", "0.3333", F), ("100", "100.001", F),
    ("2", "1.9999999", F), ("1e-7", "0.0000001", T),
    # equations and assignments
    ("2", "x=2", T), ("x=2", "2", T), ("2", "x=3", F), ("-3", "y = -3", T),
    # sets, tuples, intervals
    ("\\{1,2\\}", "{2,1}", T), ("\\{1,2\\}", "\\{2,1\\}", T), ("\\{1,2\\}", "\\{1,3\\}", F),
    ("(1,2)", "(2,1)", F), ("(1, 2)", "(1,2)", T), ("[0,1)", "[0, 1)", T), ("[0,1)", "[0,1]", F),
    ("(-\\infty, 3]", "(-\\infty,3]", T), ("1, 2", "2, 1", T), ("-5, -2", "\\{-5, -2\\}", T),
    # LaTeX forms and symbolic expressions
    ("\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}", T), ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", T),
    ("x^2+2x+1", "(x+1)^2", T), ("x^2 - 4x - 5", "(x-5)(x+1)", T), ("x^2 + 5x + 6", "x^2 + 6x + 5", F),
    ("2^{10}", "1024", T), ("\\pi", "3.14", F), ("2\\pi", "\\pi \\cdot 2", T), ("3\\sqrt{2}", "\\sqrt{18}", T),
    ("\\sqrt{2}", "1.41421356", F), ("\\frac{\\pi}{4}", "45^\\circ", F), ("e", "2", F),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})", T), ("a+b", "b+a", T),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", T),
    ("\\text{(C)}", "\\text{(C)}", T),
]


@pytest.fixture(scope="module")
def checker():
    with AnswerChecker(AnswerConfig(workers=2, timeout_s=60)) as c:
        yield c


def test_table_has_at_least_60_pairs():
    assert len(TABLE) >= 60


def test_equivalence_table(checker):
    tasks = [answer_task(f"t{i}", "?", ref) for i, (ref, _, _) in enumerate(TABLE)]
    verdicts = checker.check_many([(t, f"So the answer is \\boxed{{{ans}}}.") for t, (_, ans, _) in zip(tasks, TABLE)])
    wrong = [(ref, ans, want, v.status, v.message) for (ref, ans, want), v in zip(TABLE, verdicts) if v.passed != want]
    assert not wrong, wrong
    assert all(v.status in ("passed", "failed") for v in verdicts)


def test_equivalence_table_with_bare_answers(checker):
    """A completion that is only the answer (as in a table of pairs) is judged the same way."""
    tasks = [answer_task(f"t{i}", "?", ref) for i, (ref, _, _) in enumerate(TABLE)]
    verdicts = checker.check_many([(t, ans) for t, (_, ans, _) in zip(tasks, TABLE)])
    wrong = [(ref, ans, want, v.status, v.message) for (ref, ans, want), v in zip(TABLE, verdicts) if v.passed != want]
    assert not wrong, wrong


@pytest.mark.parametrize("mode, fifty_pct_is_half, fifty_pct_is_fifty", [
    ("ratio", True, False), ("number", False, True), ("both", True, True)])
def test_percent_setting(mode, fifty_pct_is_half, fifty_pct_is_fifty):
    with EquivPool(AnswerConfig(percent=mode)) as pool:
        assert (pool.compare(["0.5"], "50\\%").status == "equal") == fifty_pct_is_half
        assert (pool.compare(["50"], "50\\%").status == "equal") == fifty_pct_is_fifty
        assert (pool.compare(["\\frac{1}{2}"], "50%").status == "equal") == fifty_pct_is_half
        assert pool.compare(["50\\%"], "50%").status == "equal"  # the same writing matches in every mode
        assert pool.compare(["0.5"], "5\\%").status == "different"


def test_rel_tol_setting():
    lenient = {"numbers": "lenient"}
    assert EquivPool(AnswerConfig(rel_tol=1e-6, **lenient)).compare(["\\frac13"], "0.33333").status == "different"
    assert EquivPool(AnswerConfig(rel_tol=1e-4, **lenient)).compare(["\\frac13"], "0.33333").status == "equal"
    assert EquivPool(AnswerConfig(rel_tol=0.5, **lenient)).compare(["7"], "8").status == "different"  # exact
    assert EquivPool(AnswerConfig(rel_tol=1e-4)).compare(["\\frac13"], "0.33333").status == "different"  # strict


def test_accepted_alternatives_count():
    task = answer_task("a", "?", "42", accepted=["forty-two"])
    with AnswerChecker() as c:
        assert c.check(task, "\\boxed{forty-two}").passed
        assert c.check(task, "\\boxed{42}").passed
        assert not c.check(answer_task("b", "?", "42"), "\\boxed{forty-two}").passed


def test_statuses_no_answer_and_too_long():
    task = answer_task("a", "?", "42")
    with AnswerChecker(AnswerConfig(extractors=["boxed"], max_answer_chars=10)) as c:
        assert c.check(task, "I think it is 42").status == "no_answer"
        assert c.check(task, "\\boxed{" + "1" * 11 + "}").status == "failed"
        assert c.check(answer_task("b", "?", ""), "\\boxed{1}").status == "error"


def test_a_hanging_comparison_is_killed_at_the_time_limit():
    with EquivPool(AnswerConfig(timeout_s=1.0)) as pool:
        pool.compare(["x"], "y")  # start the worker first: its start-up is not the comparison's time
        t0 = time.monotonic()
        out = pool.compare(["2^{2^{2^{100}}}"], "1")
        assert out.status == "timeout" and time.monotonic() - t0 < 10
        assert pool.compare(["\\frac12"], "\\sqrt{1/4}").status == "equal"  # a fresh worker took over


def test_timeout_becomes_a_verdict_and_others_in_the_batch_still_pass():
    with AnswerChecker(AnswerConfig(timeout_s=4.0, workers=2)) as c:
        slow, fine = answer_task("s", "?", "2^{2^{2^{100}}}"), answer_task("f", "?", "x^2-1")
        v = c.check_many([(slow, "\\boxed{1}"), (fine, "\\boxed{(x-1)(x+1)}"), (fine, "\\boxed{x^2+1}")])
        assert [x.status for x in v] == ["timeout", "passed", "failed"]
        assert v[0].reward == 0.0 and not v[0].passed


@pytest.mark.parametrize("text", ["__import__('os').system('touch {p}')", "eval(\"open('{p}', 'w')\")",
                                  "exec('open(\"{p}\", \"w\")')", "(lambda: open('{p}', 'w'))()"])
def test_model_text_is_never_evaluated(text, tmp_path):
    sentinel = tmp_path / "pwned"
    with EquivPool() as pool:
        out = pool.compare(["2"], text.format(p=sentinel))
    assert out.status in ("different", "error") and not sentinel.exists()


def test_worker_refuses_to_eval_strings():
    """In the worker process, SymPy's string evaluation builds number literals and refuses everything else."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import answer_worker, sympy; answer_worker.make_compare()\n"
            "assert sympy.sympify('12') == 12\n"
            "try:\n    sympy.sympify(\"__import__('os').getcwd()\")\nexcept Exception as e:\n    print('refused', e)\n")
    out = subprocess.run([sys.executable, "-c", code, str(WORKER.parent)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused" in out.stdout and "disabled" in out.stdout


def test_bad_settings_fail_with_one_line():
    for cfg, needle in [(AnswerConfig(percent="half"), "percent"), (AnswerConfig(extractors=["x"]), "extractors"),
                        (AnswerConfig(extractors=[]), "extractors"), (AnswerConfig(timeout_s=0), "timeout_s"),
                        (AnswerConfig(workers=0), "workers")]:
        with pytest.raises(CodechatError, match=needle) as e:
            check_config(cfg)
        assert "\n" not in str(e.value)
