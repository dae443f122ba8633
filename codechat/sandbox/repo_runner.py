"""The judge's pytest runner, executed inside the sandbox as `python -I repo_runner.py RESULT_FD` in a workspace.

Standalone (imports nothing of codechat): it reads one JSON line on stdin, {"nonce", "root", "targets",
"pythonpath"}, puts `pythonpath` (tree directories) and the root first on sys.path, clears PYTEST_* and
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
hooks, os.write) was replaced during the run. What this cannot stop, because the tests run in the same
process as the code under test, is documented in docs/agent.md.
"""
import json
import os
import sys
import types

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


def _foreign_impls(config, judge, root: str) -> list:
    """(hook, plugin) for implementations of the outcome-deciding hooks whose code lives in the tree under test
    and is not one of its conftest files (whose edits the judge drops): a plugin the code under test registered
    at run time. pytest's own plugins and the environment's (site-packages) are not the tree's."""
    out = []
    if config is None:
        return out
    prefix = os.path.join(os.path.realpath(root), "")
    for hook in ("pytest_pyfunc_call", "pytest_runtest_call", "pytest_runtest_makereport", "pytest_runtest_protocol",
                 "pytest_report_teststatus", "pytest_runtest_logreport", "pytest_collection_modifyitems"):
        caller = getattr(config.hook, hook, None)
        for impl in (caller.get_hookimpls() if caller is not None else []):
            plugin = impl.plugin
            if plugin is judge:
                continue
            mod = plugin if isinstance(plugin, type(os)) else sys.modules.get(type(plugin).__module__)
            file = os.path.realpath(str(getattr(mod, "__file__", "") or ""))
            runner_code = {"_pytest", "pytest", "pluggy"} & set(file[len(prefix):].split(os.sep)[:-1])
            if file.startswith(prefix) and os.path.basename(file) != "conftest.py" and not runner_code:
                out.append((hook, getattr(mod, "__name__", "?")))
    return out


def main() -> None:
    result_fd = int(sys.argv[1])
    write, exit_now, dumps = os.write, os._exit, json.dumps
    spec = json.loads(sys.stdin.readline())
    nonce, root, targets = spec["nonce"], spec["root"], list(spec["targets"])
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
            self.swapped: list = []

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_pycollect_makeitem(self, collector, name, obj):
            # the callable as the test module or class defines it, before any other hook sees the item
            yield
            f = _plain_function(obj)
            if f is not None:
                self.made[(collector.nodeid, name)] = f

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_pyfunc_call(self, pyfuncitem):
            made = self.made.get((pyfuncitem.parent.nodeid, pyfuncitem.originalname), self)
            if made is not self and _plain_function(pyfuncitem.obj) is not made:  # item.obj or the module's attribute replaced since
                self.swapped.append(pyfuncitem.nodeid)
            outcome = yield
            self.returned[pyfuncitem.nodeid] = outcome.excinfo is None and pyfuncitem.nodeid not in self.swapped

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_runtest_call(self, item):
            yield
            if item.nodeid in self.unit:  # the TestCase ran; its outcome is in the call report
                self.returned[item.nodeid] = True

        def pytest_runtest_logreport(self, report):
            self.phases.setdefault(report.nodeid, {})[report.when] = report.outcome

        def pytest_collectreport(self, report):
            if report.failed:
                lines = str(report.longreprtext).strip().splitlines()
                self.collect_errors.append(f"{report.nodeid or '<session>'}: {lines[-1][:300] if lines else ''}")

        def pytest_configure(self, config):
            self.config = config

        def pytest_collection_finish(self, session):
            items = session.items
            self.collected = len(items)
            for item in items:
                if isinstance(item, unittest.TestCaseFunction):
                    self.unit.add(item.nodeid)
                owner = getattr(item, "cls", None) or getattr(item, "obj", None)
                mod = getattr(owner, "__module__", None)
                if isinstance(mod, str):
                    self.modules[item.nodeid] = mod
                doc = getattr(getattr(item, "obj", None), "__doc__", None)
                if isinstance(doc, str) and doc.strip():
                    self.docs[item.nodeid] = doc.strip().splitlines()[0].strip()

    judge = Judge()
    watched = _watch(pytest, (runner, python, reports, rewrite, callers, hooks, unittest))
    watched["judge.pytest_pyfunc_call"] = Judge.pytest_pyfunc_call
    watched["judge.pytest_runtest_logreport"] = Judge.pytest_runtest_logreport
    watched["judge.pytest_runtest_call"] = Judge.pytest_runtest_call
    watched["judge.pytest_pycollect_makeitem"] = Judge.pytest_pycollect_makeitem
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
    tampered += [f"plugin {name} implements {hook}"
                 for hook, name in _foreign_impls(getattr(judge, "config", None), judge, root)]
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
