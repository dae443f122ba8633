"""Final judgement of repository tasks: one attack per test, plus the honest cases."""
import pytest

from codechat.tasks.repo import RepoTask
from codechat.tasks.repo_family import generate_repo_tasks
from codechat.verifier.patches import make_diff
from codechat.verifier.repo import RepoJudge, id_matches
from repo_helpers import BUGGY, FIXED, TASK



@pytest.fixture(scope="module")
def judge():
    with RepoJudge() as j:
        yield j


def test_correct_patch_passes(judge):
    v = judge.judge(TASK, {"lib/bounds.py": FIXED})
    assert v.passed and v.status == "passed" and v.tests_passed == 3 and v.applied == ["lib/bounds.py"]


def test_correct_unified_diff_passes(judge):
    diff = make_diff(lambda p: TASK.files.get(p), {"lib/bounds.py": FIXED})
    assert judge.judge(TASK, diff).passed


def test_no_change_fails(judge):
    v = judge.judge(TASK, {})
    assert v.status == "failed" and v.failed_tests == ["tests/test_hidden.py::test_low"]


def test_editing_a_test_is_dropped_and_fails(judge):
    v = judge.judge(TASK, {"tests/test_bounds.py": "def test_inside():\n    assert True\n",
                           "tests/test_hidden.py": "def test_low():\n    assert True\n"})
    assert not v.passed and "tests/test_bounds.py: protected" in v.dropped
    assert "tests/test_hidden.py: hidden test file" in v.dropped


def test_agent_conftest_is_dropped_and_fails(judge):
    hook = ("import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
            "    out = yield\n    out.get_result().outcome = 'passed'\n")
    for path in ("conftest.py", "lib/conftest.py"):
        v = judge.judge(TASK, {path: hook})
        assert not v.passed and f"{path}: protected" in v.dropped


def test_zero_collected_tests_fail(judge):
    empty = RepoTask("empty", "p", dict(TASK.files, **{"lib/bounds.py": FIXED}),
                     hidden_tests={"tests/test_hidden.py": "def helper():\n    pass\n"}, visible_tests=[])
    v = judge.judge(empty, {})
    assert v.status == "no_tests" and not v.passed


def test_breaking_a_passing_test_fails(judge):
    v = judge.judge(TASK, {"lib/bounds.py": FIXED.replace("    return x\n", "    return x + 1\n")})
    assert not v.passed and v.broken_tests == ["tests/test_bounds.py::test_inside"]


def test_early_interpreter_exit_fails(judge):
    # spelled so the static scan does not see it: the runner must still not report a pass
    sneaky = FIXED + "\nimport os as _o\ngetattr(_o, '_' + 'exit')(0)\n"
    v = judge.judge(TASK, {"lib/bounds.py": sneaky})
    assert v.status == "error" and not v.passed and "before reporting" in v.message


def test_sys_exit_during_collection_fails(judge):
    v = judge.judge(TASK, {"lib/bounds.py": FIXED + "\nraise SystemExit(0)\n"})
    assert not v.passed


def test_code_that_skips_its_tests_fails(judge):
    skip = BUGGY.replace("    if x < lo:", "    import pytest\n    pytest.skip('no')\n    if x < lo:", 1)
    v = judge.judge(TASK, {"lib/bounds.py": skip})
    assert not v.passed and v.status == "failed"
    v = judge.judge(TASK, {"lib/bounds.py": "import pytest\npytest.skip('all', allow_module_level=True)\n" + FIXED})
    assert not v.passed


def test_patched_runner_is_rejected_statically(judge):
    patch = FIXED + "\nimport _pytest.runner\n_pytest.runner.call_and_report = lambda *a, **k: None\n"
    assert judge.judge(TASK, {"lib/bounds.py": patch}).status == "rejected"


def test_patched_runner_is_caught_at_run_time(judge):
    # spelled so the scan misses it: skip every test body, so the buggy code's tests "pass" in pytest's reports;
    # the runner's own wrapper never sees the test functions return, and its identity check names the patch
    patch = ("\nimport importlib\nr = importlib.import_module('_' + 'pytest.python')\n"
             "r.Function.runtest = lambda self: None\n")
    v = judge.judge(TASK, {"lib/bounds.py": BUGGY + patch})
    assert v.status == "rejected" and "python.Function.runtest" in v.message


def test_shadow_module_is_dropped(judge):
    v = judge.judge(TASK, {"lib/bounds.py": FIXED, "pytest.py": "import sys\nsys.exit(0)\n"})
    assert v.passed and "pytest.py: shadows module pytest" in v.dropped


def test_forged_result_record_fails(judge):
    forge = "\nimport os\nfor fd in range(3, 20):\n    try:\n        os.write(fd, b'{\"nonce\": \"x\", \"tests\": {}}\\n')\n" \
            "    except OSError:\n        pass\n"
    v = judge.judge(TASK, {"lib/bounds.py": BUGGY + forge})
    assert not v.passed


def test_bad_patch_is_an_error_not_a_crash(judge):
    assert judge.judge(TASK, "--- a/lib/bounds.py\n+++ b/lib/bounds.py\n@@ -1,2 +1,2 @@\n garbage\n").status == "error"
    assert judge.judge(TASK, {"../escape.py": "x"}).status == "error"


def test_generated_reference_fixes_pass(judge):
    for t in generate_repo_tasks("heldout", 5, seed=0):
        assert judge.judge(t, t.solution).passed, t.task_id
        assert not judge.judge(t, {}).passed, t.task_id


def test_unittest_style_ids_match_pytest_node_ids():
    assert id_matches("test_x (pkg.tests.test_mod.Case)", "pkg/tests/test_mod.py::Case::test_x")
    assert not id_matches("test_x (pkg.tests.test_mod.Case)", "pkg/tests/test_mod.py::Other::test_x")
