"""Answer extraction and plain-number reading: a table, the configurable extractor order, and hypothesis fuzzing
(no crash and no slow case on arbitrary text; exact numbers read back exactly)."""
import time
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codechat.verifier.answer_equiv import EquivPool, numbers_equal, percent_variants
from codechat.verifier.answer_extract import EXTRACTORS, MAX_SCAN, clean, extract_answer, plain_number

EXTRACT = [
    ("so the total is \\boxed{42}.", "42", "boxed"),
    ("$\\boxed{\\frac{1}{2}}$", "\\frac{1}{2}", "boxed"),
    ("first \\boxed{1}, finally \\boxed{\\{1, 2\\}}", "\\{1, 2\\}", "boxed"),
    ("He pays 3 * 6 = 18 dollars.\n#### 18", "18", "hashes"),
    ("#### 1,000\n", "1,000", "hashes"),
    ("The answer is 7.", "7", "answer-is"),
    ("Thus the final answer is $x = 3$. I hope", "x = 3", "answer-is"),
    ("Answer: \\frac{3}{4}", "\\frac{3}{4}", "answer-is"),
    ("the answer is 3.5. Done", "3.5", "answer-is"),
    ("I computed 12 then 15 and then -2.5", "-2.5", "last-number"),
    ("\\frac{1}{2}", "\\frac{1}{2}", "bare"), (" x = 2\n", "x = 2", "bare"), ("$\\{1,2\\}$", "\\{1,2\\}", "bare"),
    ("(x+1)^2", "(x+1)^2", "bare"), ("10 \\text{ meters}", "10 \\text{ meters}", "bare"),
    ("Final Answer: The final answer is $5$. I hope it is correct.", "5", "answer-is"),
    ("ratio 3/4", "3/4", "last-number"),
    ("we get 1,234 apples", "1,234", "last-number"),
]


@pytest.mark.parametrize("text, want, how", EXTRACT)
def test_extraction_table(text, want, how):
    got = extract_answer(text)
    assert got is not None and (got.text, got.how) == (want, how)


def test_extractor_order_and_fallback_are_configurable():
    text = "The answer is 5. Check: 2 + 3 = 5, so \\boxed{5} \n#### 6"
    assert extract_answer(text).text == "5"
    assert extract_answer(text, ["hashes", "boxed"]).text == "6"
    assert extract_answer("I got 12 and then 13", ["boxed", "answer-is"]) is None  # no last-number fallback
    assert extract_answer("I got 12 and then 13").text == "13"
    assert extract_answer("") is None and extract_answer("no digits") is None


def test_clean_strips_wrappers_only():
    assert clean(" $\\boxed{ \\left( 1, 2 \\right) }$. ") == "( 1, 2 )"
    assert clean("\\(x+1\\)") == "x+1" and clean("**7**") == "7" and clean("1\\,000") == "1000"
    assert clean("\\begin{pmatrix}1\\\\ 2\\end{pmatrix}") == "\\begin{pmatrix}1\\\\ 2\\end{pmatrix}"


@pytest.mark.parametrize("s, value, decimal", [
    ("42", Fraction(42), False), ("-7", Fraction(-7), False), ("1,000", Fraction(1000), False),
    ("3.50", Fraction(7, 2), True), (".5", Fraction(1, 2), True), ("5.", Fraction(5), False),
    ("1e-7", Fraction(1, 10**7), True), ("\\frac{3}{4}", Fraction(3, 4), False), ("\\frac34", Fraction(3, 4), False),
    ("-\\dfrac{1}{2}", Fraction(-1, 2), False), ("\\$18", Fraction(18), False)])
def test_plain_numbers_are_exact(s, value, decimal):
    assert plain_number(s) == (value, decimal)


@pytest.mark.parametrize("s", ["x", "1,00", "1,2", "\\frac{1}{0}", "2^3", "1/2/3", "\\sqrt{2}", "3 cm", "", "--1"])
def test_not_plain_numbers(s):
    assert plain_number(s) is None


def test_percent_variants():
    assert percent_variants("50\\%", "ratio") == ["1/2"] and percent_variants("50%", "number") == ["50"]
    assert percent_variants("x\\%", "both") == ["\\frac{x}{100}", "x"] and percent_variants("50", "ratio") == ["50"]


# --- fuzzing ---------------------------------------------------------------------------------------------------
LATEXY = st.lists(st.sampled_from(list("0123456789.,-+/{}()[]$%#x=\\ abcdefrt\n:") +
                                  ["\\boxed{", "\\frac", "####", "answer is", "\\%", "\\boxed", "}"]),
                  max_size=150).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=500), LATEXY), st.permutations(list(EXTRACTORS)))
def test_extractor_never_crashes(text, order):
    got = extract_answer(text, order)
    assert got is None or (got.text and got.how in EXTRACTORS)
    plain_number(text)
    clean(text)


def test_extractor_is_fast_on_adversarial_text():
    for text in ["\\boxed{" * 20_000, "#### " * 20_000, "answer is " * 20_000, "1," * 50_000, "{" * 100_000,
                 "the answer is " + "9" * 100_000, ("\\boxed{" + "{" * 500) * 200]:
        t0 = time.perf_counter()
        extract_answer(text)
        plain_number(text)
        assert time.perf_counter() - t0 < 2.0, text[:30]
    assert MAX_SCAN <= 1 << 20


@settings(max_examples=300, deadline=None)
@given(st.fractions(max_denominator=10**6), st.integers(0, 9))
def test_plain_number_reads_back_exact_decimals(q, places):
    s = f"{float(round(q, places)):.{places}f}"
    value, _ = plain_number(s)
    assert value == Fraction(s)


@settings(max_examples=300, deadline=None)
@given(st.integers(-10**30, 10**30), st.integers(-10**30, 10**30))
def test_integers_compare_exactly_even_where_floats_collide(a, b):
    assert numbers_equal(plain_number(str(a)), plain_number(str(b)), 1e-6) == (a == b)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.text(max_size=60), LATEXY.map(lambda s: s[:60])), min_size=1, max_size=8))
def test_comparison_never_crashes_on_arbitrary_answers(pool, answers):
    outs = pool.compare_many([(["\\frac{1}{2}"], a) for a in answers])
    assert len(outs) == len(answers) and all(o.status in ("equal", "different", "timeout", "error") for o in outs)


@pytest.fixture(scope="module")
def pool():
    from codechat.config import AnswerConfig
    with EquivPool(AnswerConfig(timeout_s=3.0, workers=2)) as p:
        yield p
