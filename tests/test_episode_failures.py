"""Episode outcomes (rollout/failures.py): one stored episode per outcome, turn habits, malformed rows refused,
and a fuzz of the row boundary (any JSON value: an outcome or a CodechatError, nothing else)."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codechat import CodechatError
from codechat.rollout.failures import OUTCOMES, advantage_mass, classify, failure_breakdown


def turn(tool, ok, **arguments):
    return {"tool": tool, "ok": ok, "arguments": arguments}


def ep(turns, passed=False, changes=None, submitted=True, status="failed"):
    return {"passed": passed, "changes": changes or {}, "submitted": submitted, "verdict": {"status": status},
            "turns": turns}


READ, TESTS, SUBMIT = turn("read_file", True, path="a.py"), turn("run_tests", True), turn("submit", True)
CASES = {
    "passed": ep([READ, turn("edit", True, path="a.py", old="x", new="y"), SUBMIT], True, {"a.py": "y"},
                 status="passed"),
    "broken": ep([turn("edit", True, path="a.py", old="x", new="(")], changes={"a.py": "("}, status="no_tests"),
    "unsubmitted": ep([turn("edit", True, path="a.py", old="x", new="z")], changes={"a.py": "z"}, submitted=False),
    "wrong_fix": ep([turn("edit", True, path="a.py", old="x", new="z"), SUBMIT], changes={"a.py": "z"}),
    "noop_edit": ep([READ, turn("edit", True, path="a.py", old="x", new="x"), TESTS, SUBMIT]),
    "failed_edit": ep([READ, turn("edit", False, path="a.py", old="nope", new="y"), TESTS, SUBMIT]),
    "no_edit": ep([READ, TESTS, SUBMIT]),
}


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_each_outcome(outcome):
    assert classify(CASES[outcome]) == outcome


def test_a_failed_edit_then_a_noop_counts_as_noop():
    assert classify(ep([turn("edit", False, old="q", new="y"), turn("edit", True, old="x", new="x")])) == "noop_edit"


def test_breakdown_counts_and_recovery():
    # turns: ok, bad, bad, ok | ok, bad -> after an error: bad, ok (1 of 2); after ok: bad, bad, ok (2 of 3)
    a = ep([READ, turn("edit", False), turn("", False), SUBMIT])
    b = ep([READ, turn("edit", False)], submitted=False)
    br = failure_breakdown([a, b, CASES["passed"]])
    assert br.episodes == 3 and br.counts["failed_edit"] == 2 and br.counts["passed"] == 1
    assert sum(br.counts.values()) == 3 and set(br.counts) == set(OUTCOMES)
    assert br.bad_turn_share == pytest.approx(3 / 9)
    assert br.bad_after_error == pytest.approx(1 / 2)
    assert br.bad_after_ok == pytest.approx(2 / 4)  # a: READ->bad, SUBMIT; b: READ->bad; passed: 2 ok->ok
    assert br.shares()["failed_edit"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("bad, msg", [([], "JSON object"), ({"passed": False}, "lacks changes"),
                                      ({**CASES["no_edit"], "turns": "x"}, "list of objects")])
def test_malformed_rows_are_refused_naming_the_row(bad, msg):
    with pytest.raises(CodechatError, match=rf"samples\[1\].*{msg}"):
        failure_breakdown([CASES["no_edit"], bad])


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(
                        ["passed", "changes", "submitted", "verdict", "turns", "tool", "ok", "arguments", "old",
                         "new", "status"]), c, max_size=6), max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(JSON)
def test_any_row_gives_an_outcome_or_a_codechat_error(row):
    try:
        assert classify(row) in OUTCOMES
    except CodechatError:
        pass


def rollout(step, group, reward, completion, finish="stop"):
    return {"step": step, "group": group, "reward": reward, "completion": completion, "finish_reason": finish}


def test_advantage_mass_splits_by_kind_and_ignores_tool_results():
    res = "<tool_response>\n" + "z" * 500 + "\n</tool_response>"
    rows = [rollout(1, 0, 1.0, "a" * 10 + res), rollout(1, 0, 0.0, "b" * 10),
            rollout(1, 0, 0.0, "c" * 40 + res, "length"), rollout(1, 0, 0.0, "d" * 10),
            rollout(1, 1, 0.0, "e" * 999), rollout(1, 1, 0.0, "f" * 999)]  # group 1: no variance, no weight
    m = advantage_mass(rows)
    # mean 0.25, std 0.5: |A| = 1.5 for the pass, 0.5 for each failure
    assert m == pytest.approx({"passed": 15 / 45, "failed": 10 / 45, "truncated": 20 / 45})
    assert advantage_mass(rows[4:]) == {}
    with pytest.raises(CodechatError, match=r"rollouts\[0\]"):
        advantage_mass([{"step": 1}])
