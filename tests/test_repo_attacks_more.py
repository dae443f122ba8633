"""More attacks at the patch -> test-runner boundary, written with the judge's code in view: start-up hooks,
configuration in subdirectories, symlinks, deleted tests, early exits, a record forged with the runner's nonce
read from its frames, plugins registered at run time on hooks the judge does not list. Each is a patch of our
own against a small repository; the fix (the same BUGGY -> FIXED change) passes beside them."""
import pytest

from codechat.tasks.repo import RepoTask
from codechat.verifier.repo import RepoJudge

BUGGY = "def clamp(x, lo, hi):\n    if x < lo:\n        return hi\n    if x > hi:\n        return hi\n    return x\n"
FIXED = BUGGY.replace("return hi\n    if x > hi", "return lo\n    if x > hi")
HIDDEN = ("from lib.bounds import clamp\n\ndef test_low():\n    assert clamp(-5, 0, 10) == 0\n\n\n"
          "def test_high():\n    assert clamp(50, 0, 10) == 10\n")
VISIBLE = "from lib.bounds import clamp\n\ndef test_inside():\n    assert clamp(5, 0, 10) == 5\n"
TASK = RepoTask("clamp2", "clamp(-5, 0, 10) returns 10",
                {"lib/__init__.py": "", "lib/bounds.py": BUGGY, "tests/test_visible.py": VISIBLE},
                hidden_tests={"tests/test_hidden.py": HIDDEN}, visible_tests=["tests/test_visible.py"])
# every test a no-op that returns: the payload the attacks below try to get loaded
NOOP = ("import pytest\n\n@pytest.hookimpl(tryfirst=True)\ndef pytest_pyfunc_call(pyfuncitem):\n    return True\n")
# names built at run time, so the text scan sees none of them: what an attacker who read repo_rules.py writes
GETATTR = "_g = lambda o, *n: __import__('functools').reduce(getattr, n, o)\n"


@pytest.fixture(scope="module")
def judge():
    with RepoJudge() as j:
        yield j


def test_the_fix_passes_and_no_change_fails(judge):
    assert judge.judge(TASK, {"lib/bounds.py": FIXED}).passed
    assert judge.judge(TASK, {}).status == "failed"


@pytest.mark.parametrize("path", ["sitecustomize.py", "src/sitecustomize.py", "lib/usercustomize.py",
                                  "lib/evil.pth", "src/evil.pth"])
def test_startup_hooks_are_dropped(judge, path):
    body = "import os\nos._exit(0)\n" if path.endswith(".py") else "import os; os._exit(0)\n"
    v = judge.judge(TASK, {path: body})
    assert not v.passed and f"{path}: protected" in v.dropped


@pytest.mark.parametrize("path", ["tests/pytest.ini", "tests/data/pytest.ini", "lib/tox.ini",
                                  "tests/sub/conftest.py", "tests/conftest.py"])
def test_config_in_a_subdirectory_is_dropped(judge, path):
    body = NOOP if path.endswith(".py") else "[pytest]\naddopts = -p lib.noop\n"
    v = judge.judge(TASK, {path: body, "lib/noop.py": NOOP})
    assert not v.passed and f"{path}: protected" in v.dropped


def test_symlink_in_a_git_diff_is_written_as_text(judge):
    diff = ("diff --git a/lib/bounds2.py b/lib/bounds2.py\nnew file mode 120000\n--- /dev/null\n"
            "+++ b/lib/bounds2.py\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n")
    probe = RepoTask("link", "", TASK.files, hidden_tests={"tests/test_link.py": (
        "import os\n\ndef test_not_a_link():\n    assert not os.path.islink('lib/bounds2.py')\n"
        "    assert open('lib/bounds2.py').read().strip() == '/etc/passwd'\n")})
    v = judge.judge(probe, diff)
    assert v.passed, v.message + v.output_tail


@pytest.mark.parametrize("change", [{"tests/test_visible.py": None},
                                    {"tests/test_visible.py": None, "tests/test_moved.py": VISIBLE}])
def test_deleting_or_renaming_a_visible_test_does_not_help(judge, change):
    v = judge.judge(TASK, {"lib/bounds.py": FIXED, **change})  # tests/* protected: the deletion is dropped
    assert "tests/test_visible.py: protected" in v.dropped and v.pass_to_pass["passed"] == ["tests/test_visible.py::test_inside"]
    open_task = RepoTask("clamp-open", "", TASK.files, hidden_tests=TASK.hidden_tests, visible_tests=TASK.visible_tests,
                         protected=[])  # nothing protected: the test that passed on the base is missing, not passed
    v = judge.judge(open_task, {"lib/bounds.py": FIXED, **change})
    assert not v.passed and v.broken_tests == ["tests/test_visible.py::test_inside"], v.message


def test_hidden_test_deleted_by_the_patch_is_dropped(judge):
    v = judge.judge(TASK, {"lib/bounds.py": FIXED, "tests/test_hidden.py": None})
    assert v.passed and "tests/test_hidden.py: hidden test file" in v.dropped


def test_exit_zero_from_inside_a_test_fails(judge):
    body = BUGGY.replace("def clamp(x, lo, hi):\n", "def clamp(x, lo, hi):\n    _g(__import__('os'), '_e' + 'xit')(0)\n")
    v = judge.judge(TASK, {"lib/bounds.py": body + GETATTR})
    assert v.status == "error" and not v.passed and "ended before reporting" in v.message, v.message


def test_signal_to_the_parent_fails(judge):
    body = BUGGY + ("import os, signal\ntry:\n    os.kill(os.getppid(), signal.SIGKILL)\nexcept OSError:\n"
                    "    pass\n")
    v = judge.judge(TASK, {"lib/bounds.py": body})
    assert not v.passed and v.status in ("failed", "error"), v.message


FORGE = GETATTR + """
import json
def _forge():
    try:
        raise RuntimeError
    except RuntimeError as e:
        f = _g(e, '__traceback__', 'tb_frame')
    while f is not None:
        loc = _g(f, 'f_' + 'locals')
        if 'nonce' in loc and 'result_fd' in loc:
            tests = {n: {"passed": True, "outcome": "passed", "doc": "", "module": ""} for n in (
                "tests/test_hidden.py::test_low", "tests/test_hidden.py::test_high",
                "tests/test_visible.py::test_inside")}
            rec = {"nonce": loc['nonce'], "exit": 0, "collected": 3, "tests": tests, "collect_errors": [],
                   "tampered": []}
            _g(__import__('os'), 'write')(loc['result_fd'], (json.dumps(rec) + "\\n").encode())
            _g(__import__('os'), '_e' + 'xit')(0)
        f = _g(f, 'f_' + 'back')
"""


def test_record_forged_with_the_nonce_from_the_runner_frames_is_rejected(judge):
    # reached through a traceback's frame: refused by the scan; the same walk with every attribute name
    # computed is beyond what a same-process runner can stop (docs/agent.md, "What the judge trusts")
    body = BUGGY.replace("def clamp(x, lo, hi):\n", "def clamp(x, lo, hi):\n    _forge()\n") + FORGE
    v = judge.judge(TASK, {"lib/bounds.py": body})
    assert not v.passed and v.status == "rejected" and "tb_frame" in v.message, v.message


ITEM_HOOK = GETATTR + """
import sys
class _P:
    def pytest_itemcollected(self, item):
        item.obj = lambda *a, **k: None
def _install():
    gc = __import__('g' + 'c')
    for o in _g(gc, 'get_' + 'objects')():
        if type(o).__name__ == 'PytestPluginManager':
            o.register(_P(), 'helper')
            return
_install()
"""


def test_plugin_on_an_unlisted_hook_that_swaps_the_test_callable_is_rejected(judge):
    v = judge.judge(TASK, {"lib/__init__.py": ITEM_HOOK})
    assert not v.passed and v.status == "rejected" and "refused gc.get_objects" in v.message, v.message


def test_module_attribute_that_raises_on_access_is_collected_honestly(judge):
    # flask's `current_app`: a proxy whose every attribute access raises outside an application context
    proxy = ("class _Proxy:\n    def __getattribute__(self, name):\n        raise RuntimeError('outside context')\n\n"
             "current = _Proxy()\n\n")
    task = RepoTask("proxy", "", TASK.files, hidden_tests={"tests/test_hidden.py": proxy + HIDDEN})
    v = judge.judge(task, {"lib/bounds.py": FIXED})
    assert v.passed, v.message + v.output_tail


@pytest.mark.parametrize("path", ["lib/__pycache__/bounds.cpython-39.pyc", "__pycache__/conftest.cpython-39.pyc",
                                  "lib/bounds.pyc", "lib/bounds.pyo"])
def test_bytecode_in_a_change_is_dropped(judge, path):
    # Python 3.9's magic number is ASCII ('a\r\r\n'), so text can be a .pyc there; an unchecked-hash .pyc is
    # imported without its source being read. Bytecode never enters a workspace from a change.
    v = judge.judge(TASK, {path: "a\r\r\n\x03\x00\x00\x00", "lib/bounds.py": FIXED})
    assert v.passed and f"{path}: compiled bytecode" in v.dropped
