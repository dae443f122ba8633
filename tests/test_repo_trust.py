"""The repository judge at the test-runner boundary: each attack is a patch of our own against a small repository
(configuration that loads a plugin, runner internals replaced from the code under test), plus the honest cases
the runner must count (unittest TestCase, django / sympy / truncated ids, data files in a test patch)."""
import time

import pytest

from codechat.tasks.repo import RepoTask
from codechat.verifier.repo import RepoJudge

BUGGY = "def clamp(x, lo, hi):\n    if x < lo:\n        return hi\n    if x > hi:\n        return hi\n    return x\n"
FIXED = BUGGY.replace("return hi\n    if x > hi", "return lo\n    if x > hi")
HIDDEN = ("from lib.bounds import clamp\n\ndef test_low():\n    assert clamp(-5, 0, 10) == 0\n\n\n"
          "def test_high():\n    assert clamp(50, 0, 10) == 10\n")
TASK = RepoTask("clamp", "clamp(-5, 0, 10) returns 10", {"lib/__init__.py": "", "lib/bounds.py": BUGGY},
                hidden_tests={"tests/test_hidden.py": HIDDEN})
NOOP_PLUGIN = ("import pytest\n\n@pytest.hookimpl(tryfirst=True)\ndef pytest_pyfunc_call(pyfuncitem):\n"
               "    return True\n")


@pytest.fixture(scope="module")
def judge():
    with RepoJudge() as j:
        yield j


@pytest.mark.parametrize("config", ["pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
                                    "setup.cfg", "pyproject.toml"])
def test_pytest_config_loading_a_plugin_is_dropped(judge, config):
    body = "[pytest]\naddopts = -p noop_plugin\n" if config.endswith(".ini") else \
        "[tool:pytest]\naddopts = -p noop_plugin\n" if config == "setup.cfg" else \
        '[pytest]\naddopts = ["-p", "noop_plugin"]\n' if config.endswith("pytest.toml") else \
        '[tool.pytest.ini_options]\naddopts = "-p noop_plugin"\n'
    v = judge.judge(TASK, {config: body, "noop_plugin.py": NOOP_PLUGIN})
    assert not v.passed and f"{config}: protected" in v.dropped


def test_nested_conftest_is_dropped(judge):
    v = judge.judge(TASK, {"lib/conftest.py": NOOP_PLUGIN.replace("pytest_pyfunc_call", "pytest_runtest_call")})
    assert not v.passed and "lib/conftest.py: protected" in v.dropped


def test_pytest_raises_replaced_at_import_is_rejected(judge):
    lib = "import contextlib\nimport pytest\npytest.raises = lambda *a, **k: contextlib.nullcontext()\n"
    task = RepoTask("raises", "", {"lib/__init__.py": lib, "lib/bounds.py": BUGGY},
                    hidden_tests={"tests/test_r.py": "import pytest\nimport lib\n\ndef test_r():\n"
                                  "    with pytest.raises(ValueError):\n        int('1')\n"})
    v = judge.judge(task, {"lib/bounds.py": FIXED})
    assert v.status == "rejected" and "pytest.raises" in v.message


def test_test_callable_replaced_at_import_is_rejected(judge):
    # no hazardous name in the text: the module is reached by a computed name, the property replaced
    hack = ("import importlib\nm = importlib.import_module('_' + 'pytest.python')\n"
            "m.Function.obj = property(lambda self: (lambda *a, **k: None))\n")
    v = judge.judge(TASK, {"lib/__init__.py": hack})
    assert v.status == "rejected" and not v.passed and "Function.obj" in v.message


def test_frame_walking_is_rejected_before_the_run(judge):
    v = judge.judge(TASK, {"lib/bounds.py": FIXED + "import sys\n_f = sys._getframe(1)\n"})
    assert v.status == "rejected" and "_getframe" in v.message


def test_inline_file_map_is_capped(judge):
    v = judge.judge(TASK, {f"lib/f{i}.py": "" for i in range(2001)})
    assert v.status == "error" and "file map" in v.message


UNIT = ("import unittest\nfrom lib.bounds import clamp\n\nclass ClampTest(unittest.TestCase):\n"
        "    def test_low(self):\n        '''Low values clamp to lo.'''\n        self.assertEqual(clamp(-5, 0, 10), 0)\n\n"
        "    def test_high(self):\n        self.assertEqual(clamp(50, 0, 10), 10)\n")


def test_unittest_testcase_passes_and_fails_as_pytest_says(judge):
    task = RepoTask("unit", "", {"lib/__init__.py": "", "lib/bounds.py": BUGGY}, hidden_tests={"tests/test_u.py": UNIT},
                    fail_to_pass=["test_low (tests.test_u.ClampTest)"],
                    pass_to_pass=["Low values clamp to lo.", "tests/test_u.py::ClampTest::test_high"])
    good, bad = judge.judge(task, {"lib/bounds.py": FIXED}), judge.judge(task, {})
    assert good.passed, good.message + good.output_tail
    assert good.fail_to_pass["passed"] == ["test_low (tests.test_u.ClampTest)"]
    assert not bad.passed and bad.fail_to_pass["failed"] == ["test_low (tests.test_u.ClampTest)"]


def test_bare_names_truncated_ids_and_unknown_ids(judge):
    hidden = HIDDEN + "\n\nimport pytest\n\n@pytest.mark.parametrize('s', ['a b', 'a c'])\ndef test_p(s):\n    assert s\n"
    task = RepoTask("ids", "", {"lib/__init__.py": "", "lib/bounds.py": BUGGY}, hidden_tests={"tests/test_i.py": hidden},
                    fail_to_pass=["test_low"], pass_to_pass=["tests/test_i.py::test_p[a", "[100%]"])
    v = judge.judge(task, {"lib/bounds.py": FIXED})
    assert v.passed, v.message
    assert any("truncated id matched by prefix (2 test(s))" in w for w in v.warnings)
    assert any("not a test id" in w for w in v.warnings)
    task.fail_to_pass = ["test_low", "test_nowhere"]
    v = judge.judge(task, {"lib/bounds.py": FIXED})
    assert not v.passed and v.fail_to_pass["unknown"] == ["test_nowhere"] and "unknown test id" in v.message


def test_data_file_in_test_patch_is_written_not_run(judge):
    patch = ("--- /dev/null\n+++ b/tests/static/config.toml\n@@ -0,0 +1 @@\n+key = 1\n"
             "--- /dev/null\n+++ b/tests/test_cfg.py\n@@ -0,0 +1,6 @@\n+import pathlib\n+from lib.bounds import clamp\n+\n"
             "+def test_cfg():\n+    assert (pathlib.Path(__file__).parent / 'static/config.toml').read_text() == 'key = 1\\n'\n"
             "+    assert clamp(-5, 0, 10) == 0\n")
    task = RepoTask("data", "", {"lib/__init__.py": "", "lib/bounds.py": BUGGY}, test_patch=patch,
                    fail_to_pass=["tests/test_cfg.py::test_cfg"])
    v = judge.judge(task, {"lib/bounds.py": FIXED})
    assert v.passed, v.message + v.output_tail


def test_missing_dependency_at_collection_is_env_error(judge):
    task = RepoTask("dep", "", {"lib/__init__.py": "", "lib/bounds.py": BUGGY},
                    hidden_tests={"tests/test_d.py": "import not_installed_anywhere\n\ndef test_d():\n    pass\n"})
    v = judge.judge(task, {"lib/bounds.py": FIXED})
    assert v.status == "env_error" and "not_installed_anywhere" in v.message
    assert v.verdict().status == "infra_error"  # left out of the loss


def test_nested_stdlib_names_are_kept_top_level_dropped(judge):
    v = judge.judge(TASK, {"lib/bounds.py": FIXED, "lib/numbers.py": "X = 1\n", "json.py": "X = 1\n"})
    assert "json.py: shadows module json" in v.dropped and "lib/numbers.py" in v.applied and v.passed


def test_output_tail_is_the_end_of_the_output(judge):
    v = judge.judge(TASK, {"lib/bounds.py": FIXED + "print('x' * 100 + '\\n' * 3000)\n"})
    assert "passed" in v.output_tail.splitlines()[-1]


def test_log_dir_holds_each_judgement(tmp_path):
    with RepoJudge(log_dir=tmp_path) as j:
        j.judge(TASK, {"lib/bounds.py": FIXED})
        j.judge(TASK, "")
    first, second = tmp_path / "clamp" / "1", tmp_path / "clamp" / "2"
    assert '"passed": true' in (first / "report.json").read_text() and (first / "files.json").is_file()
    assert (second / "patch.diff").read_text() == "" and "failed" in (second / "test_output.txt").read_text()


def test_backtracking_search_pattern_is_cut_off(judge):
    from codechat.config import AgentConfig
    from codechat.rollout.tools import SEARCH_TIMEOUT_S, ToolBox, format_call, parse_tool_call
    task = RepoTask("slow", "", {"lib/a.py": "a" * 60 + "!\n"})  # about 2**40 steps without a limit
    ws = judge.clone(task)
    try:
        t0 = time.monotonic()
        res = ToolBox(task, ws, AgentConfig()).call(parse_tool_call(format_call("search", pattern="(a|aa)+$")))
        assert not res.ok and "search took over" in res.text
        assert time.monotonic() - t0 < SEARCH_TIMEOUT_S + 30  # unlimited, it would not end
    finally:
        ws.remove()


def test_plugin_registered_by_the_code_under_test_is_rejected(judge):
    # reaches pytest's Config through an obfuscated gc walk (the text scan misses it) and registers a no-op
    hack = ("_g = __import__('g' + 'c')\n\nclass _P:\n    pass\n\n\n"
            "setattr(_P, 'pytest_' + 'pyfunc_call', lambda self, pyfuncitem: True)\n"
            "for _o in getattr(_g, 'get_' + 'objects')():\n"
            "    if type(_o).__name__ == 'Config' and hasattr(_o, 'pluginmanager'):\n"
            "        _o.pluginmanager.register(_P())\n        break\n")
    v = judge.judge(TASK, {"lib/__init__.py": hack})
    assert v.status == "rejected" and "refused gc.get_objects" in v.message, v.message + v.output_tail


def test_patch_importing_a_missing_module_is_its_own_failure(judge):
    v = judge.judge(TASK, {"lib/bounds.py": "__import__('not_' + 'there')\n" + FIXED})
    assert v.status in ("failed", "no_tests") and "not_there" in v.message  # not env_error: the base collects


def test_imported_testcase_and_python311_unittest_ids(judge):
    task = RepoTask("imported", "", {"lib/__init__.py": "", "lib/bounds.py": BUGGY, "tests/__init__.py": "",
                                     "tests/base_cases.py": UNIT},
                    hidden_tests={"tests/test_sub.py": "from tests.base_cases import ClampTest  # noqa: F401\n"},
                    fail_to_pass=["test_low (tests.base_cases.ClampTest)",
                                  "test_high (tests.base_cases.ClampTest.test_high)"])
    good, bad = judge.judge(task, {"lib/bounds.py": FIXED}), judge.judge(task, {})
    assert good.passed and len(good.fail_to_pass["passed"]) == 2, good.message + good.output_tail
    assert not bad.passed and bad.fail_to_pass["unknown"] == []
