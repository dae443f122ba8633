"""The judge-side output comparison of stdin/stdout tasks (sandbox/stdio_judge.py), fuzzed, and its trailer."""
import struct

from hypothesis import assume, given, settings, strategies as st

from codechat.sandbox.stdio_judge import outputs_match, verdict_of
from codechat.sandbox.stdio_run import TRAILER

lines = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
                         max_size=12), max_size=6)


def _ref(out: str, exp: str) -> bool:
    """A plain reference: the lists of right-trimmed lines, trailing empty lines dropped, are equal."""
    def norm(s):
        xs = [x.rstrip() for x in s.replace("\r\n", "\n").split("\n")]
        while xs and xs[-1] == "":
            xs.pop()
        return xs
    return norm(out) == norm(exp)


@settings(max_examples=300, deadline=None)
@given(lines, lines, st.sampled_from(["\n", "\r\n"]), st.text(alphabet=" \t", max_size=3))
def test_match_agrees_with_the_reference(a, b, sep, pad):
    assume(not any(c in "0123456789" for c in "".join(a + b)))  # numbers: test_real_data_shapes.py's token rule
    out, exp = sep.join(x + pad for x in a) + sep, "\n".join(b)
    assert outputs_match(out, exp) == _ref(out, exp)
    assert outputs_match(out, "\n".join(a))  # trailing whitespace, CRLF, final newline never matter


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6), min_size=1,
                max_size=5), st.floats(min_value=1e-9, max_value=1e-2))
def test_float_tolerance_accepts_within_and_rejects_beyond(xs, tol):
    exp = " ".join(repr(x) for x in xs)
    near = " ".join(repr(x + tol * 0.5 * max(1.0, abs(x)) * 0.5) for x in xs)
    assert outputs_match(near, exp, tol)
    far = " ".join(repr(x + 10 * tol * max(1.0, abs(x))) for x in xs)
    assert not outputs_match(far, exp, tol)
    assert not outputs_match(exp + " 1", exp, tol)  # a token more is never close


def test_decimals_get_1e6_by_default_and_words_stay_exact():
    assert outputs_match("0.5000001", "0.5") and not outputs_match("0.50001", "0.5")
    assert outputs_match("0.50001", "0.5", 1e-4)
    assert not outputs_match("1 0.5", "1  0.5")  # the spaces between tokens are still output
    assert not outputs_match("YES 0.5", "NO 0.5", 1e-3)
    assert outputs_match("nan", "nan", 1e-3) and not outputs_match("nan", "1", 1e-3)


JOB = {"expected": ["3\n"], "stdio": {}}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_any_trailer_bytes_give_a_verdict_never_a_crash(trailer):
    rec = verdict_of(b"3\n", trailer, JOB)
    assert rec["status"] in ("passed", "failed", "error", "timeout", "memory")
    if len(trailer) != 1 + TRAILER.size or trailer[:1] != b"T":
        assert rec["error_type"] == "EarlyExit"


def test_trailer_kinds():
    def t(kind, value, cpu=0.1):
        return b"T" + TRAILER.pack(kind, value, cpu, 0.2)
    assert verdict_of(b"3", t(0, 0), JOB)["status"] == "passed"
    assert verdict_of(b"4", t(0, 0), JOB)["status"] == "failed"
    assert verdict_of(b"3", t(0, 1), JOB)["error_type"] == "NonZeroExit"
    assert verdict_of(b"3", t(1, 24), JOB)["status"] == "timeout"  # SIGXCPU
    assert verdict_of(b"3", t(1, 9), JOB)["error_type"] == "Killed"
    assert verdict_of(b"3", t(1, 999), JOB)["error_type"] == "Killed"  # not a signal number: no crash
    assert verdict_of(b"3", t(2, 1), JOB)["status"] == "memory"
    assert verdict_of(b"3", t(0, 0, cpu=2.0), {**JOB, "stdio": {"cpu_limit_s": 1.0}})["status"] == "timeout"
    assert struct.calcsize(">bidd") == TRAILER.size
