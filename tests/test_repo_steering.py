"""Changes that steer the pytest run judging them from inside, cold and warm, one attack per test, each with an
honest twin doing the nearby legitimate thing that still resolves. Every attack spells its names at run time,
so the text scan sees nothing; each resolved before the runner's guard (`sandbox/repo_guard.py`)."""
import pytest

from codechat.tasks.repo import RepoTask
from codechat.verifier.repo import RepoJudge
from codechat.verifier.repo_run import changed_lines

BUGGY = "def clamp(x, lo, hi):\n    if x < lo:\n        return hi\n    if x > hi:\n        return hi\n    return x\n"
FIXED = ("def clamp(x, lo, hi):\n    if lo > hi:\n        raise ValueError('lo > hi')\n    if x < lo:\n"
         "        return lo\n    if x > hi:\n        return hi\n    return x\n")
HIDDEN = ("import pytest\nfrom lib.bounds import clamp\n\n\ndef test_low():\n    assert clamp(-5, 0, 10) == 0\n\n\n"
          "def test_order():\n    with pytest.raises(ValueError):\n        clamp(1, 10, 0)\n")
UNIT = ("import unittest\nfrom lib.bounds import clamp\n\n\nclass ClampTest(unittest.TestCase):\n"
        "    def test_unit_low(self):\n        self.assertEqual(clamp(-5, 0, 10), 0)\n")
PLAIN, UNITTEST = ["tests/test_hidden.py::test_low", "tests/test_hidden.py::test_order"], \
    ["tests/test_unit.py::ClampTest::test_unit_low"]
GETATTR = "import sys\n_g = lambda o, *n: __import__('functools').reduce(getattr, n, o)\n"
PLUGIN = "_P = type('_P', (), {'pytest_' + 'pyfunc_call': lambda self, pyfuncitem: True})\n"
BY_REWRITE_HOOK = ("for _f in sys.meta_path:\n    if getattr(_f, 'config', None) is not None:\n"
                   "        _f.config.pluginmanager.register(_PLUGIN, 'helper')\n        break\n")

NO_OP_LOADER = """
import importlib.machinery
class _Loader:
    def __init__(self, real):
        self.real = real
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        self.real.exec_module(module)
        for v in list(vars(module).values()):
            if isinstance(v, type):
                for k in [k for k in vars(v) if k.startswith('test')]:
                    setattr(v, k, lambda self: None)
"""  # a loader that runs a test module, then makes its TestCase methods no-ops


def forge_from(first_frame: str) -> str:
    """A package that gets a frame by `first_frame` (code setting `f`), walks out to the runner's, and writes a
    record of every test passed with the runner's nonce on its result pipe, then leaves."""
    return f"""
import json
def _forge():
{"".join("    " + l + chr(10) for l in first_frame.strip().splitlines())}    while f is not None:
        loc = _g(f, 'f_' + 'locals')
        if 'nonce' in loc and 'result_fd' in loc:
            ids = ["tests/test_hidden.py::test_low", "tests/test_hidden.py::test_order",
                   "tests/test_unit.py::ClampTest::test_unit_low"]
            rec = {{"nonce": loc['nonce'], "exit": 0, "collected": 3, "collect_errors": [], "tampered": [],
                   "tests": {{n: {{"passed": True, "outcome": "passed", "doc": "", "module": ""}} for n in ids}}}}
            _g(__import__('os'), 'write')(loc['result_fd'], (json.dumps(rec) + "\\n").encode())
            _g(__import__('os'), '_e' + 'xit')(0)
        f = _g(f, 'f_' + 'back')
_forge()
"""


ATTACKS = {
    "frames of every thread": (PLAIN, forge_from("""
import threading
main = threading.main_thread().ident
f = _g(sys, '_current' + '_frames')()[main]""")),
    "frames through inspect": (PLAIN, forge_from("f = __import__('inspect').stack()[0][0]")),
    "frames through a string formatter": (PLAIN, forge_from("""
try:
    raise KeyError
except KeyError as e:
    f = __import__('string').Formatter().get_field('0.tb_' + 'frame', (e.__traceback__,), {})[0]""")),
    "frames through ctypes": (PLAIN, forge_from("""
c = __import__('ct' + 'ypes')
get = _g(c, 'python' + 'api', 'PyEval_' + 'GetFrame')
get.restype = c.py_object
f = get()""")),
    "code compiled under a standard library file name": (PLAIN, forge_from("""
ns = {'sys': sys}
exec(compile("f = sys._get" + "frame(1)", __import__('os').__file__, 'exec'), ns)
f = ns['f']""")),
    "plugin through the assertion-rewrite hook": (PLAIN, PLUGIN + "_PLUGIN = _P()\n" + BY_REWRITE_HOOK),
    "plugin as a module without __file__": (PLAIN, "import types\n_PLUGIN = types.ModuleType('helper')\n"
                                            "setattr(_PLUGIN, 'pytest_' + 'pyfunc_call', lambda pyfuncitem: True)\n"
                                            + BY_REWRITE_HOOK),
    "plugin class claiming to be os": (PLAIN, PLUGIN + "_P.__module__ = 'os'\n_PLUGIN = _P()\n" + BY_REWRITE_HOOK),
    "plugin renaming items and swapping their callables": (PLAIN, (
        "def _collected(self, item):\n    item.originalname = 'elsewhere'\n    item.obj = lambda *a, **k: None\n"
        "_P = type('_P', (), {'pytest_' + 'itemcollected': _collected})\n_PLUGIN = _P()\n") + BY_REWRITE_HOOK),
    "record forged from frames found at run time": (PLAIN + UNITTEST, """
import json
def _forge():
    f = _g(sys, '_get' + 'frame')(0)
    while f is not None:
        loc = _g(f, 'f_' + 'locals')
        if 'nonce' in loc and 'result_fd' in loc:
            ids = ["tests/test_hidden.py::test_low", "tests/test_hidden.py::test_order",
                   "tests/test_unit.py::ClampTest::test_unit_low"]
            rec = {"nonce": loc['nonce'], "exit": 0, "collected": 3, "collect_errors": [], "tampered": [],
                   "tests": {n: {"passed": True, "outcome": "passed", "doc": "", "module": ""} for n in ids}}
            _g(__import__('os'), 'write')(loc['result_fd'], (json.dumps(rec) + "\\n").encode())
            _g(__import__('os'), 'close')(loc['result_fd'])
            _g(__import__('os'), '_e' + 'xit')(0)
        f = _g(f, 'f_' + 'back')
_forge()
"""),
    "runner's records replaced through a traceback's frames": (PLAIN, """
class _Always(dict):
    def __setitem__(self, k, v):
        dict.__setitem__(self, k, 'passed')
class _Phases(dict):
    def setdefault(self, k, d=None):
        return dict.setdefault(self, k, _Always())
class _Returned(dict):
    def __setitem__(self, k, v):
        dict.__setitem__(self, k, True)
    def get(self, k, d=None):
        return True
try:
    raise KeyError
except KeyError as e:
    f = _g(e, '__traceback__', 'tb_' + 'frame')
while f is not None:
    j = _g(f, 'f_' + 'locals').get('judge')
    if j is not None and hasattr(j, 'phases'):
        j.phases, j.returned = _Phases(), _Returned()
        break
    f = _g(f, 'f_' + 'back')
"""),
    "half-imported test module swapped in sys.modules": (PLAIN, """
import types
def test_low():
    pass
def test_order():
    pass
for _n, _m in list(sys.modules.items()):
    if str(getattr(_m, '__file__', '')).endswith('test_hidden.py'):
        _fake = types.ModuleType(_n)
        _fake.__file__, _fake.test_low, _fake.test_order = _m.__file__, test_low, test_order
        sys.modules[_n] = _fake
"""),
    "profile function editing reports": (PLAIN, """
class _Returned(dict):
    def __setitem__(self, k, v):
        dict.__setitem__(self, k, True)
def _prof(frame, event, arg):
    if event == 'call' and _g(frame, 'f_' + 'code', 'co_name') == 'pytest_' + 'runtest_logreport':
        loc = _g(frame, 'f_' + 'locals')
        if 'report' in loc and 'self' in loc and hasattr(loc['self'], 'returned'):
            loc['report'].outcome = 'passed'
            if type(loc['self'].returned) is dict:
                loc['self'].returned = _Returned()
_g(sys, 'set' + 'profile')(_prof)
"""),
    "import hook wrapping test modules' loaders": (UNITTEST, NO_OP_LOADER + """
class _Finder:
    def find_spec(self, name, path=None, target=None):
        if not name.endswith('test_unit'):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            spec.loader = _Loader(spec.loader)
        return spec
sys.meta_path.insert(0, _Finder())
"""),
    "import hook equal to the finder it replaces": (UNITTEST, NO_OP_LOADER + """
class _Finder:
    __eq__ = lambda self, other: True
    __hash__ = object.__hash__
    def find_spec(self, name, path=None, target=None):
        if not name.endswith('test_unit'):
            return importlib.machinery.PathFinder.find_spec(name, path)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            spec.loader = _Loader(spec.loader)
        return spec
sys.meta_path[-1] = _Finder()
"""),
    "test module's pytest rebound to a lenient one": (["tests/test_hidden.py::test_order"], """
import contextlib
class _Lenient:
    def __init__(self, real):
        self.real = real
    def __getattr__(self, name):
        return getattr(self.real, name)
    def raises(self, *a, **k):
        return contextlib.suppress(BaseException)
for _m in list(sys.modules.values()):
    if str(getattr(_m, '__file__', '')).endswith('test_hidden.py') and 'pytest' in vars(_m):
        _m.pytest = _Lenient(_m.pytest)
"""),
    "unittest assertions made no-ops": (UNITTEST, """
import unittest
for _n in [n for n in dir(unittest.TestCase) if n.startswith('assert')]:
    setattr(unittest.TestCase, _n, lambda *a, **k: None)
"""),
    "pytest's call of the test function recompiled": (PLAIN, """
import importlib
_m = importlib.import_module('_' + 'pytest.python')
setattr(_g(_m, 'pytest_' + 'pyfunc_call'), '__co' + 'de__', (lambda pyfuncitem: True).__code__)
"""),
}

HONEST = {  # the same neighbourhood, honestly: each with the fix, in the lines the change writes
    "plugin": "_n = len(sys.meta_path)\n",
    "frames": ("import collections, logging, traceback\nPoint = collections.namedtuple('Point', 'x y')\n"
               "logging.getLogger(__name__).warning('clamp loaded')\ntry:\n    raise KeyError('k')\n"
               "except KeyError:\n    _trace = traceback.format_exc()\n"),
    "modules": "_json = sys.modules.get('json')\n",
    "profile": "_p = sys.getprofile()\n",
    "import hook": "import importlib\n_json = importlib.import_module('json')\n",
    "bindings": "import pytest as _pytest_here  # noqa: F401 - a package that imports pytest\n",
    "unittest": ("import unittest\nclass ClampCase(unittest.TestCase):\n    def assertClamped(self, x):\n"
                 "        self.assertTrue(0 <= x <= 10)\n"),
    "code": "_name = clamp.__code__.co_name\n",
}
TWIN = {"frames of every thread": "frames", "frames through inspect": "frames",
        "frames through a string formatter": "frames", "frames through ctypes": "frames",
        "code compiled under a standard library file name": "frames","plugin through the assertion-rewrite hook": "plugin", "plugin as a module without __file__": "plugin",
        "plugin class claiming to be os": "plugin", "plugin renaming items and swapping their callables": "plugin",
        "record forged from frames found at run time": "frames",
        "runner's records replaced through a traceback's frames": "frames",
        "half-imported test module swapped in sys.modules": "modules", "profile function editing reports": "profile",
        "import hook wrapping test modules' loaders": "import hook",
        "import hook equal to the finder it replaces": "import hook",
        "test module's pytest rebound to a lenient one": "bindings", "unittest assertions made no-ops": "unittest",
        "pytest's call of the test function recompiled": "code"}


def task_for(required: list) -> RepoTask:
    return RepoTask("steer", "", {"lib/__init__.py": "", "lib/bounds.py": BUGGY},
                    hidden_tests={"tests/test_hidden.py": HIDDEN, "tests/test_unit.py": UNIT},
                    fail_to_pass=list(required))


@pytest.fixture(scope="module", params=["cold", "warm"])
def judge(request):
    with RepoJudge(warm=request.param == "warm") as j:
        yield j


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_does_not_resolve_and_its_honest_twin_does(judge, name):
    required, code = ATTACKS[name]
    task = task_for(required)
    v = judge.judge(task, {"lib/bounds.py": BUGGY + "\n" + GETATTR + code})
    assert not v.passed and v.status == "rejected", (v.status, v.message, v.output_tail)
    twin = judge.judge(task, {"lib/bounds.py": FIXED + "\n" + GETATTR + HONEST[TWIN[name]]})
    assert twin.passed, (twin.status, twin.message, twin.output_tail)


def test_the_attacks_pass_the_text_scan(judge):
    for name, (required, code) in ATTACKS.items():
        v = judge.judge(task_for(required), {"lib/bounds.py": BUGGY + "\n" + GETATTR + code})
        assert "reaches into the test runner" not in v.message, name


def test_changed_lines_are_the_lines_the_change_wrote():
    assert changed_lines("a\nb\nc\n", "a\nx\nb\nc\ny\n") == [2, 5]
    assert changed_lines("a\nb\n", "a\nB\n") == [2] and changed_lines("a\nb\n", "a\n") == []
    assert changed_lines(None, "new\n") is None  # a new file is the change's whole
