"""The judge's runner for a repository's own test command, executed inside the sandbox as
`python -I suite_runner.py RESULT_FD` in a workspace (SWE-bench environments: django's `tests/runtests.py`,
sympy's `bin/test`, pytest for pytest-dev/pytest).

Standalone (imports nothing of codechat). It reads one JSON line on stdin:
    {"nonce", "root", "kind": "unittest"|"sympy"|"pytest", "script": "tests/runtests.py" (unittest, sympy),
     "args": [...], "cwd": "" (relative to root), "pythonpath": [...], "environ": {NAME: VALUE},
     "writable": true (run on a copy of the tree in the run's private /tmp), "home": a directory whose files are
     linked into $HOME first (the files the tests would download there) or ""}
puts `pythonpath` and the root first on sys.path, installs a recorder on the runner's outcome functions *before*
the script runs, runs the script as `__main__` (pytest: `pytest.main(args)`) in this process, writes what it
printed to stdout (the log the official SWE-bench parser reads) and one JSON record with the nonce on RESULT_FD.

The recorder is what makes a log line count: the judge passes a test only when the official parser reads it as
passed *and* the recorder saw the runner report that test as a success and never as a failure, so a printed
`test_x (m.C) ... ok` or `test_x ok` without a test behind it passes nothing.
- unittest (django): `unittest.result.TestResult`'s add* methods (every result class calls them through super);
  the key is `str(test)` and the docstring's first line (django's verbose runner prints it in place of the name).
- sympy: `PyTestReporter`'s entering_test / test_pass / test_fail / test_exception / test_skip / test_xfail /
  test_xpass, which must be the ones the tree's runtests.py defines (the judge keeps that file pristine).
- pytest: a plugin's `pytest_runtest_logreport` (a test passes when setup, call and teardown passed).
The record lists `tampered` when a recorder function or the runner method it wraps was replaced during the run.
Limits: the tests run in the process of the code under test; what that leaves open is in docs/agent.md.
"""
import json
import os
import runpy
import sys

UNITTEST_OUTCOMES = ("addSuccess", "addFailure", "addError", "addSkip", "addExpectedFailure",
                     "addUnexpectedSuccess", "addSubTest")
SYMPY_OUTCOMES = ("entering_test", "test_pass", "test_fail", "test_exception", "test_skip", "test_xfail", "test_xpass")
SYMPY_RUNNERS = ("sympy/testing/runtests.py", "sympy/utilities/runtests.py")


def pytest_args(args: list) -> list:
    """The arguments pytest runs with: the test command's, after `-p no:cacheprovider` (the tree is read-only in the
    sandbox: pytest's cache could only warn, an error under -W error) and, unless the command asks for workers,
    `-p no:xdist`: installed but unused, pytest-xdist makes pytest-rerunfailures (11+) open a socket server on
    `localhost` at configure, a server thread for workers that never come (a run whose localhost does not resolve
    stops there: matplotlib's did)."""
    workers = any(a.startswith(("-n", "--numprocesses", "--dist")) for a in args)
    return ["-p", "no:cacheprovider", *([] if workers else ["-p", "no:xdist"]), *args]


def legacy_namespaces(paths: list) -> list:
    """Pre-create each top-level package of the tree's import directories whose `__init__.py` declares a
    pkg_resources namespace (`declare_namespace(__name__)`: matplotlib's `mpl_toolkits` until 3.7) without running
    that file, as the `-nspkg.pth` of the harness's editable install does for `setup.py`'s `namespace_packages`
    (run, its `import pkg_resources` warns, an error under matplotlib's `filterwarnings = error`, and every test
    module importing pyplot failed to collect). The environment's own `-nspkg.pth` made that namespace at startup
    from the environment's source copy (where the harness's points at the tree under test): it is replaced, or the
    tree's `mpl_toolkits` would be the environment commit's. Returns the names."""
    import importlib.machinery
    import importlib.util
    made = []
    for d in paths:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            init = os.path.join(d, name, "__init__.py")
            have = sys.modules.get(name)
            if not name.isidentifier() or not os.path.isfile(init) or (
                    have is not None and os.path.join(d, name) in list(getattr(have, "__path__", None) or [])):
                continue
            try:
                with open(init, encoding="utf-8", errors="replace") as f:
                    declares = "declare_namespace(__name__)" in f.read(4096)
            except OSError:
                continue
            spec = importlib.machinery.PathFinder.find_spec(name, [d]) if declares else None
            if spec is not None and not any(m.startswith(name + ".") for m in sys.modules):  # nothing under it yet
                sys.modules[name] = importlib.util.module_from_spec(spec)
                made.append(name)
    return made


class Record:
    """Outcomes seen by the recorder: key -> list of outcomes ('pass', 'fail', 'skip', ...)."""

    def __init__(self):
        self.seen: dict = {}

    def add(self, keys, outcome: str) -> None:
        for k in keys:
            if isinstance(k, str) and k:
                self.seen.setdefault(k, []).append(outcome)


def _unittest_keys(test) -> list:
    keys = []
    for get in (lambda: str(test), lambda: test.shortDescription()):
        try:
            k = get()
        except Exception:  # noqa: BLE001 - a test whose str() raises is keyed by what else it gives
            k = None
        if isinstance(k, str):
            keys.append(k.strip())
    return keys


def install_unittest(rec: Record) -> dict:
    import unittest.result as ur
    cls = ur.TestResult
    originals = {name: cls.__dict__[name] for name in UNITTEST_OUTCOMES}
    outcome = {"addSuccess": "pass", "addFailure": "fail", "addError": "fail", "addSkip": "skip",
               "addExpectedFailure": "pass", "addUnexpectedSuccess": "fail"}

    def wrap(name, orig):
        if name == "addSubTest":
            def rec_sub(self, test, subtest, err):
                if err is not None:
                    rec.add(_unittest_keys(test), "fail")
                return orig(self, test, subtest, err)
            return rec_sub

        def rec_outcome(self, test, *a, **k):
            rec.add(_unittest_keys(test), outcome[name])
            return orig(self, test, *a, **k)
        return rec_outcome
    wrapped = {name: wrap(name, f) for name, f in originals.items()}
    for name, f in wrapped.items():
        setattr(cls, name, f)
    return {f"unittest.TestResult.{n}": (lambda n=n: cls.__dict__.get(n), f) for n, f in wrapped.items()}


def install_sympy(rec: Record, root: str) -> dict:
    import importlib
    rel = next((p for p in SYMPY_RUNNERS if os.path.isfile(os.path.join(root, p))), None)
    if rel is None:
        raise RuntimeError("no sympy runtests.py in the tree")
    mod = importlib.import_module(rel[:-3].replace("/", "."))
    cls = mod.PyTestReporter
    here = os.path.realpath(os.path.join(root, rel))
    state = {"name": ""}
    outcome = {"test_pass": "pass", "test_fail": "fail", "test_exception": "fail", "test_skip": "skip",
               "test_xfail": "pass", "test_xpass": "fail"}
    watched = {}
    for name in SYMPY_OUTCOMES:
        orig = cls.__dict__.get(name)
        code = getattr(orig, "__code__", None)
        if code is None or os.path.realpath(code.co_filename) != here:
            raise RuntimeError(f"PyTestReporter.{name} is not the one {rel} defines")

        def wrap(name=name, orig=orig):
            if name == "entering_test":
                def entering(self, f, *a, **k):
                    state["name"] = getattr(f, "__name__", "")
                    return orig(self, f, *a, **k)
                return entering

            def rec_outcome(self, *a, **k):
                rec.add([state["name"]], outcome[name])
                return orig(self, *a, **k)
            return rec_outcome
        w = wrap()
        setattr(cls, name, w)
        watched[f"sympy.PyTestReporter.{name}"] = (lambda n=name: cls.__dict__.get(n), w)
    return watched


class PytestRecorder:
    def __init__(self, rec: Record):
        self.rec, self.phases = rec, {}

    def pytest_runtest_logreport(self, report):
        self.phases.setdefault(report.nodeid, {})[report.when] = report.outcome
        if getattr(report, "wasxfail", None) is not None:
            self.phases[report.nodeid]["xfail"] = report.outcome

    def finish(self) -> None:
        for nodeid, ph in self.phases.items():
            if "xfail" in ph:
                self.rec.add([nodeid], "pass" if ph["xfail"] == "skipped" else "fail")
            elif all(ph.get(w) == "passed" for w in ("setup", "call", "teardown")):
                self.rec.add([nodeid], "pass")
            elif "failed" in ph.values():
                self.rec.add([nodeid], "fail")
            else:
                self.rec.add([nodeid], "skip")


def link_home(src: str, home: str) -> int:
    """Link each file under `src` (the environment's `home`: the files the tests would download) to the same
    place under `home` (the run's own, writable: a test may still delete or download one). Returns the count."""
    n = 0
    for d, _, files in os.walk(src):
        rel = os.path.relpath(d, src)
        os.makedirs(os.path.join(home, rel), exist_ok=True)
        for f in files:
            dst = os.path.join(home, rel, f)
            if not os.path.lexists(dst):
                os.symlink(os.path.join(d, f), dst)
                n += 1
    return n


def main() -> None:
    result_fd = int(sys.argv[1])
    write, exit_now, dumps = os.write, os._exit, json.dumps
    spec = json.loads(sys.stdin.readline())
    nonce, root, kind = spec["nonce"], spec["root"], spec["kind"]
    for k in [k for k in os.environ if k.startswith("PYTEST_") or k == "PYTHONPATH"]:
        del os.environ[k]
    os.environ.update({str(k): str(v) for k, v in spec.get("environ", {}).items()})
    if spec.get("environ", {}).get("PYTHONWARNINGS"):  # `-I` ignored it at start-up: apply it as start-up would
        import warnings
        for opt in str(spec["environ"]["PYTHONWARNINGS"]).split(","):
            try:
                warnings._setoption(opt)
            except warnings._OptionError as e:
                print(f"runner: invalid PYTHONWARNINGS entry {opt!r}: {e}", file=sys.stderr)
    if spec.get("home") and os.environ.get("HOME"):  # before any tree code runs, as a download would have left them
        link_home(spec["home"], os.environ["HOME"])
    if spec.get("writable"):  # the sandbox shows the tree read-only; tests that write into it (as they may in
        # the harness's container) run on a copy in the run's private /tmp, made before any tree code runs
        import shutil
        import tempfile
        copy = os.path.join(tempfile.mkdtemp(prefix="tree-", dir="/tmp"), os.path.basename(root))
        shutil.copytree(root, copy, symlinks=True)
        root = copy
    # normalised and once each: a `ws/.` entry imports the tree's modules under a second path, and pytest then
    # refuses a conftest it meets again as a plugin (astropy's root conftest imports `astropy.conftest`)
    paths = list(dict.fromkeys(os.path.normpath(os.path.join(root, p)) for p in [*spec.get("pythonpath", []), "."]))
    # a test that starts `python -m pkg` must import the tree too, as from the harness's editable install
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    os.chdir(os.path.join(root, spec.get("cwd", "")))
    rec, code, watched, error = Record(), None, {}, ""
    script = os.path.join(root, spec["script"]) if spec.get("script") else ""
    sys.path[:0] = ([os.path.dirname(script)] if script else []) + paths
    legacy_namespaces(paths)
    plugin = None
    try:
        if kind == "unittest":
            watched = install_unittest(rec)
        elif kind == "sympy":
            watched = install_sympy(rec, root)
        elif kind == "pytest":
            import pytest
            plugin = PytestRecorder(rec)
            watched = {"recorder.pytest_runtest_logreport": (
                lambda: PytestRecorder.__dict__.get("pytest_runtest_logreport"),
                PytestRecorder.pytest_runtest_logreport)}
        else:
            raise RuntimeError(f"unknown runner kind {kind!r}")
    except Exception as e:  # noqa: BLE001 - the runner could not be set up: the record says so
        error = f"runner setup failed: {type(e).__name__}: {e}"
    if not error:
        try:
            if kind == "pytest":
                code = int(pytest.main(pytest_args(spec["args"]), plugins=[plugin]))
            else:
                sys.argv = [script, *spec["args"]]
                runpy.run_path(script, run_name="__main__")
                code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException as e:  # noqa: BLE001 - a crash of the runner is a failed run, not a pass
            code = -1
            print(f"runner: the test command raised {type(e).__name__}: {e}", file=sys.stderr)
        if plugin is not None:
            plugin.finish()
    tampered = sorted(name for name, (now, mine) in watched.items() if now() is not mine)
    sys.stdout.flush()
    sys.stderr.flush()
    record = {"nonce": nonce, "exit": code, "seen": rec.seen, "tampered": tampered, "error": error}
    data = (dumps(record) + "\n").encode()
    while data:
        data = data[write(result_fd, data):]
    exit_now(0)


if __name__ == "__main__":
    main()
