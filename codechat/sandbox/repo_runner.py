"""The judge's pytest runner, executed inside the sandbox as `python -I repo_runner.py RESULT_FD` in a workspace.

Standalone (imports nothing of codechat; loads `repo_guard.py` beside it by path): it reads one JSON line on
stdin, {"nonce", "root", "targets", "pythonpath", "untrusted"}, puts `pythonpath` (tree directories) and the root first on sys.path, clears PYTEST_* and
PYTHONPATH from the environment and sets PYTEST_DISABLE_PLUGIN_AUTOLOAD, imports
pytest and records the identity of the functions that decide a test's outcome *before* any repository code
can run, and runs pytest with a plugin object of its own
(`-p no:cacheprovider`, third-party plugin autoload off through the environment). At the end it writes one
JSON record with the nonce on RESULT_FD (not on stdout, which the repository's code shares) and leaves with
os._exit, so atexit hooks of the repository never run after it.

A test counts as passed only if its setup, call and teardown reports passed *and* this plugin's own wrapper
around the test function saw the function return normally (for a `unittest.TestCase` method, whose failures
pytest reports through the result object rather than by raising: saw the call run), and the callable pytest
calls is the one the test module or class held when it was collected (not one a hook swapped in since). Each test's record holds
its docstring's first line (django's runner names a test by it). The record lists `tampered` when any watched
function (pytest's runner, call, report and assertion-rewrite entry points, pluggy's dispatch, this plugin's
hooks, os.write) was replaced during the run, and whatever the guard (`repo_guard.py`: an audit hook installed
before `pytest.main`, and a snapshot of hook implementations and of pytest's and unittest's functions taken as
the first conftest is about to load) refused or found changed as each test ended; `untrusted` (the lines the
change wrote, per file) tells the guard whose code is whose. What this cannot stop, because the tests run in the
same process as the code under test, is documented in docs/agent.md.
"""
import ast
import importlib.util
import json
import os
import sys
import types

_where = importlib.util.spec_from_file_location("repo_guard", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                          "repo_guard.py"))
repo_guard = importlib.util.module_from_spec(_where)  # by path: `python -I` has no codechat on its path
_where.loader.exec_module(repo_guard)
DECIDING_HOOKS = ("pytest_pyfunc_call", "pytest_runtest_call", "pytest_runtest_makereport", "pytest_runtest_protocol",
                  "pytest_report_teststatus", "pytest_runtest_logreport", "pytest_collection_modifyitems",
                  "pytest_runtest_setup", "pytest_runtest_teardown", "pytest_itemcollected",
                  "pytest_pycollect_makeitem")
BINDING_MODULES = ("pytest", "_pytest", "unittest")

ARGS = ["-p", "no:cacheprovider", "-q", "-rN", "--continue-on-collection-errors"]
"""pytest's arguments before `--rootdir ROOT TARGETS...` (the warm runner builds its configuration from them)."""


def _watch(pytest, modules) -> dict:
    runner, python, reports, rewrite, callers, hooks, unittest = modules
    return {"runner.call_and_report": runner.call_and_report, "runner.runtestprotocol": runner.runtestprotocol,
            "runner.CallInfo.from_call": runner.CallInfo.__dict__["from_call"],
            "runner.pytest_runtest_call": runner.pytest_runtest_call,
            "python.pytest_pyfunc_call": python.pytest_pyfunc_call, "python.Function.runtest": python.Function.runtest,
            "reports.TestReport.from_item_and_call": reports.TestReport.__dict__["from_item_and_call"],
            "rewrite.exec_module": rewrite.AssertionRewritingHook.exec_module,
            "rewrite.rewrite_asserts": rewrite.rewrite_asserts, "pluggy._multicall": callers._multicall,
            "pluggy.HookCaller.__call__": (getattr(hooks, "HookCaller", None) or hooks._HookCaller).__call__,
            "os.write": os.write, "os._exit": os._exit,
            "pytest.main": pytest.main, "pytest.raises": pytest.raises,
            "python.Function.obj": python.Function.__dict__.get("obj"),
            "python.PyobjMixin.obj": getattr(python, "PyobjMixin").__dict__.get("obj"),
            "python.Function._getobj": python.Function.__dict__.get("_getobj"),
            "unittest.TestCaseFunction.runtest": unittest.TestCaseFunction.runtest,
            "unittest.TestCaseFunction.addSuccess": unittest.TestCaseFunction.__dict__.get("addSuccess")}


def _plain_function(obj):
    """The function object behind a test callable (a function, a bound method, a static or class method), or
    None for anything else; looks at type() only, since an attribute access can run code (a flask LocalProxy)."""
    t = type(obj)
    if t is types.FunctionType:
        return obj
    if t in (types.MethodType, staticmethod, classmethod):
        f = obj.__func__
        return f if type(f) is types.FunctionType else None
    return None


def _expected_bindings(path: str, modules: dict) -> dict:
    """{name: object} for the names the test module at `path` imports at its top level from pytest, _pytest or
    unittest (`import pytest`, `import pytest as pt`, `from unittest import TestCase`), resolved in `modules` (the
    modules as they were before any repository code ran). The file is the judge's: its text is trusted."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return {}
    out, body = {}, list(tree.body)
    while body:
        node = body.pop(0)
        if isinstance(node, (ast.If, ast.Try)):
            body[:0] = list(node.body) + [n for h in getattr(node, "handlers", []) for n in h.body] + list(node.orelse)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in BINDING_MODULES:
                    mod = modules.get(a.name if a.asname else a.name.split(".")[0])
                    if mod is not None:
                        out[a.asname or a.name.split(".")[0]] = mod
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                and node.module.split(".")[0] in BINDING_MODULES:
            mod = modules.get(node.module)
            for a in node.names:
                obj = getattr(mod, a.name, None) if mod is not None else None
                if obj is not None and a.name != "*":
                    out[a.asname or a.name] = obj
    return out


def main() -> None:
    result_fd = int(sys.argv[1])
    write, exit_now, dumps = os.write, os._exit, json.dumps
    spec = json.loads(sys.stdin.readline())
    nonce, root, targets = spec["nonce"], spec["root"], list(spec["targets"])
    untrusted = {str(k): v for k, v in dict(spec.get("untrusted") or {}).items()}
    paths = [os.path.join(root, p) for p in spec.get("pythonpath", [])] + [root]
    spec.clear()
    for k in [k for k in os.environ if k.startswith("PYTEST_") or k == "PYTHONPATH"]:
        del os.environ[k]
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # no entry-point plugins, whatever the config says
    # pytest is imported before the tree is on the path, so a module of the tree cannot stand in for one pytest
    # imports; a repository that is pytest itself (its own _pytest/) is put first so that its own code is tested
    own_runner = any(os.path.isdir(os.path.join(p, "_pytest")) for p in paths)
    if own_runner and "_pytest" in sys.modules:  # a warm runner's pytest is the environment's, not the tree's
        print("runner: a tree holding _pytest/ cannot be tested by a warm runner", file=sys.stderr)
        exit_now(71)
    if own_runner:
        sys.path[:0] = paths
    import pytest
    import _pytest.assertion.rewrite as rewrite
    import _pytest.python as python
    import _pytest.reports as reports
    import _pytest.runner as runner
    try:
        import pluggy._callers as callers
        import pluggy._hooks as hooks
    except ImportError:  # pluggy < 1.0 (environments with an older pytest)
        import pluggy.callers as callers
        import pluggy.hooks as hooks
    import _pytest.unittest as unittest
    if not own_runner:
        sys.path[:0] = paths

    class Judge:
        def __init__(self):
            self.phases: dict = {}
            self.returned: dict = {}
            self.collect_errors: list = []
            self.collected = 0
            self.docs: dict = {}
            self.modules: dict = {}
            self.unit: set = set()
            self.made: dict = {}
            self.items: dict = {}
            self.bindings: dict = {}
            self.swapped: list = []
            self.problems: list = []
            self.snapshot = None
            self.modules_by_id: dict = {}
            self.sys_modules: dict = {}

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_load_initial_conftests(self, early_config):
            # the last moment before any repository code runs (conftests import the package): what decides
            # outcomes is recorded now, and the audit hook goes in
            self.config = early_config
            self.snapshot = repo_guard.Snapshot(early_config.pluginmanager, self.guard, watched_objects(),
                                                per_test=quick_objects, per_test_hooks=DECIDING_HOOKS)
            self.guard.finders = (tuple(sys.meta_path), tuple(sys.path_hooks))
            self.sys_modules = dict(sys.modules)
            yield

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_pycollect_makeitem(self, collector, name, obj):
            # the callable as the test module or class defines it, before any other hook sees the item
            yield
            f = _plain_function(obj)
            if f is not None:
                self.made[(collector.nodeid, name)] = f
                code = f.__code__
                if self.guard.written(code.co_filename, code.co_firstlineno) \
                        and str(getattr(collector, "path", "")) not in self.guard.untrusted:
                    # a trusted test file's test whose code the change wrote: the module was swapped or filled
                    self.problems.append(f"test {collector.nodeid}::{name} defined by code the change wrote")

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_pyfunc_call(self, pyfuncitem):
            entry = self.items.get(id(pyfuncitem))
            if entry is None or entry[0] is not pyfuncitem:  # an item that was not collected
                self.swapped.append(pyfuncitem.nodeid)
            elif entry[1] is not None and _plain_function(pyfuncitem.obj) is not entry[1]:
                self.swapped.append(entry[2])  # item.obj or the module's attribute replaced since collection
            outcome = yield
            self.returned[pyfuncitem.nodeid] = outcome.excinfo is None and pyfuncitem.nodeid not in self.swapped

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_runtest_call(self, item):
            yield
            if item.nodeid in self.unit:  # the TestCase ran; its outcome is in the call report
                self.returned[item.nodeid] = True

        def pytest_runtest_logreport(self, report):
            self.phases.setdefault(report.nodeid, {})[report.when] = report.outcome
            if report.when == "teardown" and self.snapshot is not None and len(self.problems) < 20:
                self.problems += self.snapshot.changes(full=False)
                self.guard.check_finders()
                mod = self.modules_by_id.get(report.nodeid)
                if mod is not None:
                    self.problems += self.rebound(mod)

        def pytest_collectreport(self, report):
            self.guard.check_finders()  # (a test module was just imported)
            if report.failed:
                lines = str(report.longreprtext).strip().splitlines()
                self.collect_errors.append(f"{report.nodeid or '<session>'}: {lines[-1][:300] if lines else ''}")

        def pytest_configure(self, config):
            self.config = config

        def pytest_collection_finish(self, session):
            items = session.items
            self.collected = len(items)
            self.modules_by_id = {}
            for item in items:
                parent = getattr(item, "parent", None)
                made = self.made.get((getattr(parent, "nodeid", None), getattr(item, "originalname", None)))
                self.items[id(item)] = (item, made, item.nodeid)
                if isinstance(item, unittest.TestCaseFunction):
                    self.unit.add(item.nodeid)
                owner = getattr(item, "cls", None) or getattr(item, "obj", None)
                mod = getattr(owner, "__module__", None)
                if isinstance(mod, str):
                    self.modules[item.nodeid] = mod
                doc = getattr(getattr(item, "obj", None), "__doc__", None)
                if isinstance(doc, str) and doc.strip():
                    self.docs[item.nodeid] = doc.strip().splitlines()[0].strip()
                module = getattr(item, "module", None)
                path = str(getattr(item, "path", ""))
                if isinstance(module, types.ModuleType) and path.endswith(".py") and path not in self.guard.untrusted:
                    if path not in self.bindings:
                        self.bindings[path] = (module, _expected_bindings(path, self.sys_modules))
                    self.modules_by_id[item.nodeid] = path
                    if len(self.problems) < 20:
                        self.problems += self.rebound(path)

        def rebound(self, path) -> list:
            """The names the test module at `path` imports from pytest or unittest, when bound elsewhere now."""
            module, expected = self.bindings[path]
            d = vars(module)
            return [f"{os.path.basename(path)}: {name} rebound" for name, obj in expected.items()
                    if d.get(name, obj) is not obj][:1]

    trusted_dirs = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.abspath(__file__))]
    trusted_dirs += [p for p in sys.path if p and os.path.isabs(p) and p not in paths]
    guard = repo_guard.Guard(root, untrusted, trusted_dirs)
    judge = Judge()
    judge.guard = guard
    watched = _watch(pytest, (runner, python, reports, rewrite, callers, hooks, unittest))
    watched["judge.pytest_pyfunc_call"] = Judge.pytest_pyfunc_call
    watched["judge.pytest_runtest_logreport"] = Judge.pytest_runtest_logreport
    watched["judge.pytest_runtest_call"] = Judge.pytest_runtest_call
    watched["judge.pytest_pycollect_makeitem"] = Judge.pytest_pycollect_makeitem
    watched["judge.pytest_load_initial_conftests"] = Judge.pytest_load_initial_conftests

    def watched_objects() -> list:
        mods = [pytest, runner, python, reports, rewrite, callers, hooks, unittest, sys.modules.get("unittest.case"),
                sys.modules.get("unittest"), sys.modules.get("_pytest.outcomes"), sys.modules.get("_pytest.python_api"),
                sys.modules.get("_pytest.raises"), sys.modules.get("_pytest.fixtures"), sys.modules.get("pluggy._manager")]
        classes = [python.Function, getattr(python, "PyobjMixin"), python.Module, python.Class, unittest.TestCaseFunction,
                   reports.TestReport, runner.CallInfo, rewrite.AssertionRewritingHook, Judge, test_case,
                   getattr(hooks, "HookCaller", None) or hooks._HookCaller, type(judge.config.pluginmanager)]
        classes += list(type(judge.config.pluginmanager).__mro__[1:-1])
        return [o for o in mods + classes if o is not None]

    test_case = sys.modules["unittest"].TestCase
    quick_objects = (test_case, pytest, python.Function, runner, sys.modules.get("unittest.case"))
    if hasattr(sys, "addaudithook"):  # Python >= 3.8; an older environment runs with the identity checks only
        sys.addaudithook(guard.hook)  # before pytest.main: pytest's own code is never refused; the tree's is judged
    try:
        code = int(pytest.main([*ARGS, "--rootdir", root, *targets], plugins=[judge]))
    except BaseException as e:  # noqa: BLE001 - an exit raised out of pytest is a failed run, not a pass
        code = -1
        print(f"runner: pytest raised {type(e).__name__}", file=sys.stderr)
    tampered = sorted(k for k, v in _watch(pytest, (runner, python, reports, rewrite, callers, hooks, unittest)).items()
                      if watched[k] is not v)
    tampered += [k for k in ("judge.pytest_pyfunc_call", "judge.pytest_runtest_logreport", "judge.pytest_runtest_call",
                             "judge.pytest_pycollect_makeitem")
                 if getattr(Judge, k.split(".", 1)[1]) is not watched[k]]
    tampered += [f"test callable replaced after collection: {n}" for n in judge.swapped[:3]]
    if judge.snapshot is not None:
        tampered += judge.snapshot.changes(full=True)
    tampered += judge.problems + guard.violations
    tampered = list(dict.fromkeys(tampered))[:20]
    tests = {}
    for nodeid, ph in judge.phases.items():
        ok = ph.get("setup") == "passed" and ph.get("call") == "passed" and ph.get("teardown") == "passed"
        tests[nodeid] = {"passed": bool(ok and judge.returned.get(nodeid)),
                         "outcome": ph.get("call") or ph.get("setup") or "unknown", "doc": judge.docs.get(nodeid, ""),
                         "module": judge.modules.get(nodeid, "")}
    record = {"nonce": nonce, "exit": code, "collected": judge.collected, "tests": tests,
              "collect_errors": judge.collect_errors, "tampered": tampered}
    data = (dumps(record) + "\n").encode()
    while data:
        data = data[write(result_fd, data):]
    sys.stdout.flush()
    sys.stderr.flush()
    exit_now(0)


if __name__ == "__main__":
    main()
