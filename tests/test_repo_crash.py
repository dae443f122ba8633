"""A change that breaks the test run itself (a syntax error, a removed name, a raise or an exit at import, met
while pytest loads a conftest or collects) fails, in the loss with reward 0; `env_error` is left for what the
environment causes, decided by running the same tests on the untouched base. Cold and warm alike."""
import pytest

from codechat.tasks.repo import RepoTask
from codechat.verifier.repo import RepoJudge
from repo_helpers import FIXED, TASK

CONFTEST = "from lib.bounds import clamp  # noqa: F401 - a conftest importing the package, as flask's does\n"
WITH_CONFTEST = RepoTask("crash", "", {**TASK.files, "tests/conftest.py": CONFTEST}, hidden_tests=TASK.hidden_tests,
                         visible_tests=TASK.visible_tests)
BREAKS = {
    "syntax error": "def clamp(x, lo, hi)\n    return x\n",
    "removed name": "def clip(x, lo, hi):\n    return x\n",
    "raise at import": FIXED + "raise RuntimeError('boom')\n",
    "exit during collection": FIXED + "import sys\nsys.exit(0)\n",
}


@pytest.fixture(scope="module", params=["cold", "warm"])
def judge(request):
    with RepoJudge(warm=request.param == "warm") as j:
        yield j


@pytest.mark.parametrize("task", [WITH_CONFTEST, TASK], ids=["conftest imports it", "tests import it"])
@pytest.mark.parametrize("name", sorted(BREAKS))
def test_a_change_that_breaks_the_run_fails(judge, task, name):
    v = judge.judge(task, {"lib/bounds.py": BREAKS[name]})
    assert v.status in ("failed", "no_tests") and v.reward == 0.0, (v.status, v.message, v.output_tail)
    assert v.verdict().status == "failed"  # in the loss, not left out as infra_error
    honest = judge.judge(task, {"lib/bounds.py": FIXED})
    assert honest.passed, honest.message + honest.output_tail


def test_a_base_that_cannot_run_stays_an_environment_error(judge):
    broken = RepoTask("crash-env", "", {**TASK.files, "tests/conftest.py": "import not_installed_here_either\n"},
                      hidden_tests=TASK.hidden_tests)
    v = judge.judge(broken, {"lib/bounds.py": FIXED})
    assert v.status == "env_error" and v.verdict().status == "infra_error", (v.status, v.message)


def test_the_baseline_run_is_made_once_per_task(judge):
    before = len(judge._base_runs)
    for name in ("syntax error", "raise at import"):
        assert judge.judge(WITH_CONFTEST, {"lib/bounds.py": BREAKS[name]}).status == "failed"
    assert len(judge._base_runs) <= before + 1
    assert judge.base_run(WITH_CONFTEST)[0] == "ok"
