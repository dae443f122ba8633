"""Nothing a completion holds escapes its own verdict on answer tasks: the parent-side checker never raises."""
from hypothesis import given, settings, strategies as st

from codechat.tasks import Task
from codechat.tasks.answer import KIND
from codechat.verifier.answer import AnswerChecker

TASK = Task("a", "q", [], None, "", None, {"answer": "50\\%"}, kind=KIND)
CHECKER = AnswerChecker()


def test_a_huge_percent_gets_its_own_verdict_and_its_neighbours_are_judged():
    honest, hostile, wrong = CHECKER.check_many([(TASK, "\\boxed{50\\%}"), (TASK, "\\boxed{1e5000\\%}"),
                                                  (TASK, "\\boxed{49\\%}")])
    assert honest.passed and not wrong.passed
    assert not hostile.passed and hostile.status in ("failed", "error")


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="0123456789e.-+%\\{}/^()x= ", max_size=40))
def test_any_boxed_text_gives_a_verdict(body):
    (v,) = CHECKER.check_many([(TASK, "The answer is \\boxed{" + body.replace("%", "\\%") + "}")])
    assert v.status in ("passed", "failed", "error", "no_answer", "timeout")
