"""Same seed, same episodes: tool results hold no wall-clock time (pytest's `in 0.13s` is dropped), so an expert
transcript and a seeded episode repeat token for token."""
from hypothesis import given, settings
from hypothesis import strategies as st

from codechat.config import AgentConfig
from codechat.rollout.tools import ToolBox, ToolCall, steady
from codechat.tasks.repo_loaders import load_repo_tasks
from codechat.verifier.repo import RepoJudge

COUNTS = st.lists(st.tuples(st.integers(0, 999), st.sampled_from(["passed", "failed", "error", "errors", "skipped",
                                                                  "warning", "warnings", "deselected"])),
                  min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(counts=COUNTS, secs=st.floats(0, 9999, allow_nan=False), clock=st.booleans(), bar=st.integers(0, 30),
       before=st.text(alphabet="abc .=:\n[]%0123456789", max_size=80))
def test_pytest_summary_loses_its_time_and_nothing_else(counts, secs, clock, bar, before):
    summary = ", ".join(f"{n} {w}" for n, w in counts)
    eq = "=" * bar
    timed = f"{secs:.2f}s" + (" (0:01:05)" if clock else "")
    line = f"{eq} {summary} in {timed} {eq}" if bar else f"{summary} in {timed}"
    want = f"{eq} {summary} {eq}" if bar else summary
    head = before.replace(" in ", " at ") + "\n"  # text above the summary line, with no time of its own
    assert steady(head + line) == steady(head) + want
    assert steady(want) == want


def test_text_without_a_pytest_time_is_unchanged():
    for text in ["ok exit 0\nplain in 3 steps", "1 passed in total", "def f():\n    return 'ran in 2s'", ""]:
        assert steady(text) == text


def test_two_runs_of_the_visible_tests_give_the_same_result():
    task = load_repo_tasks("builtin:repo-train")[0]
    out = []
    with RepoJudge() as judge:
        for _ in range(2):
            ws = judge.clone(task)
            out.append(ToolBox(task, ws, AgentConfig()).call(ToolCall("run_tests")).text)
            ws.remove()
    assert out[0] == out[1] and "passed" in out[0] and " in 0." not in out[0]
