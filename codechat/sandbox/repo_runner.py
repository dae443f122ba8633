"""The judge's pytest runner, executed inside the sandbox as `python -I repo_runner.py RESULT_FD` in a workspace.

Standalone (imports nothing of codechat): it reads one JSON line on stdin, {"nonce", "root", "targets"}, imports
pytest and records the identity of the functions that decide a test's outcome *before* any repository code
can run, puts the workspace root first on sys.path, and runs pytest with a plugin object of its own
(`-p no:cacheprovider`, third-party plugin autoload off through the environment). At the end it writes one
JSON record with the nonce on RESULT_FD (not on stdout, which the repository's code shares) and leaves with
os._exit, so atexit hooks of the repository never run after it.

A test counts as passed only if its setup, call and teardown reports passed *and* this plugin's own wrapper
around the test function saw the function return normally. The record lists `tampered` when any watched
function (pytest's runner, call, report and assertion-rewrite entry points, pluggy's dispatch, this plugin's
hooks, os.write) was replaced during the run. What this cannot stop, because the tests run in the same
process as the code under test, is documented in docs/agent.md.
"""
import json
import os
import sys


def _watch(pytest, modules) -> dict:
    runner, python, reports, rewrite, callers, hooks = modules
    return {"runner.call_and_report": runner.call_and_report, "runner.runtestprotocol": runner.runtestprotocol,
            "runner.CallInfo.from_call": runner.CallInfo.__dict__["from_call"],
            "runner.pytest_runtest_call": runner.pytest_runtest_call,
            "python.pytest_pyfunc_call": python.pytest_pyfunc_call, "python.Function.runtest": python.Function.runtest,
            "reports.TestReport.from_item_and_call": reports.TestReport.__dict__["from_item_and_call"],
            "rewrite.exec_module": rewrite.AssertionRewritingHook.exec_module,
            "rewrite.rewrite_asserts": rewrite.rewrite_asserts, "pluggy._multicall": callers._multicall,
            "pluggy.HookCaller.__call__": hooks.HookCaller.__call__, "os.write": os.write, "os._exit": os._exit,
            "pytest.main": pytest.main}


def main() -> None:
    result_fd = int(sys.argv[1])
    write, exit_now, dumps = os.write, os._exit, json.dumps
    spec = json.loads(sys.stdin.readline())
    nonce, root, targets = spec["nonce"], spec["root"], list(spec["targets"])
    spec.clear()
    import pytest
    import _pytest.assertion.rewrite as rewrite
    import _pytest.python as python
    import _pytest.reports as reports
    import _pytest.runner as runner
    import pluggy._callers as callers
    import pluggy._hooks as hooks

    class Judge:
        def __init__(self):
            self.phases: dict = {}
            self.returned: dict = {}
            self.collect_errors: list = []
            self.collected = 0

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_pyfunc_call(self, pyfuncitem):
            outcome = yield
            self.returned[pyfuncitem.nodeid] = outcome.excinfo is None

        def pytest_runtest_logreport(self, report):
            self.phases.setdefault(report.nodeid, {})[report.when] = report.outcome

        def pytest_collectreport(self, report):
            if report.failed:
                self.collect_errors.append(report.nodeid or "<session>")

        def pytest_collection_finish(self, session):
            self.collected = len(session.items)

    judge = Judge()
    watched = _watch(pytest, (runner, python, reports, rewrite, callers, hooks))
    watched["judge.pytest_pyfunc_call"] = Judge.pytest_pyfunc_call
    watched["judge.pytest_runtest_logreport"] = Judge.pytest_runtest_logreport
    sys.path.insert(0, root)
    try:
        code = int(pytest.main(["-p", "no:cacheprovider", "-q", "-rN", "--rootdir", root, *targets],
                               plugins=[judge]))
    except BaseException as e:  # noqa: BLE001 - an exit raised out of pytest is a failed run, not a pass
        code = -1
        print(f"runner: pytest raised {type(e).__name__}", file=sys.stderr)
    tampered = sorted(k for k, v in _watch(pytest, (runner, python, reports, rewrite, callers, hooks)).items()
                      if watched[k] is not v)
    tampered += [k for k in ("judge.pytest_pyfunc_call", "judge.pytest_runtest_logreport")
                 if getattr(Judge, k.split(".", 1)[1]) is not watched[k]]
    tests = {}
    for nodeid, ph in judge.phases.items():
        ok = ph.get("setup") == "passed" and ph.get("call") == "passed" and ph.get("teardown") == "passed"
        tests[nodeid] = {"passed": bool(ok and judge.returned.get(nodeid)),
                         "outcome": ph.get("call") or ph.get("setup") or "unknown"}
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
