"""Final judgement of a repository task: apply the agent's change to a clean copy, add the hidden tests, run them.

    with RepoJudge() as judge:
        v = judge.judge(task, changes)      # changes: {path: text or None}, or a unified diff (str)
        v.passed, v.status, v.dropped, v.broken_tests

Steps: (1) the change is parsed (`patches.py` for diffs); (2) edits of protected paths are dropped: the
task's `protected` globs, and always conftest.py, pytest/tox/setup.cfg/pyproject configuration, .pth files,
the hidden test paths, and any file named like a module pytest or the standard library imports (`json.py`,
`pytest.py`, `sitecustomize.py`: a shadow module would replace the runner); (3) lines the change adds are
scanned for runner tampering (`_pytest`, `pluggy`, `sys.modules`, `settrace`, `os._exit`, `gc.get_objects`,
`ctypes`, frame walking): such a change is `rejected`; (4) the rest is applied to a fresh clone of the pristine
base, the hidden tests are written and the test patch applied; (5) `repo_runner.py` runs the hidden tests plus
the visible ones under the workspace sandbox (`run_isolated`); its record comes back on a private pipe,
stamped with a nonce, exactly once. Passed iff every required test (the task's `fail_to_pass`, else every
test of the hidden files: at least one) passed and every test that passed before (the task's `pass_to_pass`,
else the visible tests passing on the untouched base, measured once per task) still passes.
Guarantees and limits: docs/agent.md.
"""
from __future__ import annotations

import difflib
import json
import re
import secrets
import sys
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from codechat.sandbox import isolation
from codechat.sandbox.workspace import Workspace, WorkspaceError, run_isolated, safe_path, scratch_dir
from codechat.tasks.repo import RepoTask, materialize
from codechat.verifier.patches import PatchError, apply_diff, parse_diff
from codechat.verifier.verdict import Verdict

RUNNER = str(Path(__file__).resolve().parents[1] / "sandbox" / "repo_runner.py")  # visible in the fresh root
ALWAYS_PROTECTED = ("conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "sitecustomize.py",
                    "usercustomize.py")
SHADOW_NAMES = frozenset(sys.stdlib_module_names) | {"pytest", "_pytest", "pluggy", "iniconfig", "packaging",
                                                     "py", "exceptiongroup", "tomli", "pygments"}
TAMPER = re.compile(r"\b_pytest\b|\bpluggy\b|sys\.modules|settrace|setprofile|\bos\._exit\b|"
                    r"gc\.get_(?:objects|referrers|referents)|\bctypes\b|\bPYTEST_|\bf_back\b|\bf_globals\b|"
                    r"\bpytest_(?:runtest|pyfunc|collect|configure|sessionfinish|report)")
STATUSES = ("passed", "failed", "no_tests", "timeout", "error", "rejected")
"""passed: required tests pass and nothing broke; failed: a required or previously passing test failed;
no_tests: the hidden files yielded no test; timeout: the test run hit its wall clock; error: the change could
not be applied or the runner did not report (early exit, crash); rejected: the change tampers with the runner."""


@dataclass
class TestRun:
    """One runner invocation, as read back from its result pipe."""
    status: str
    """`ok`, `timeout` or `error` (no valid record: exited early, crashed, or more than one record)."""
    tests: dict[str, bool] = field(default_factory=dict)
    """pytest node id -> passed."""
    collect_errors: list[str] = field(default_factory=list)
    tampered: list[str] = field(default_factory=list)
    output: str = ""
    duration_s: float = 0.0


@dataclass
class RepoVerdict:
    status: str
    """One of STATUSES."""
    passed: bool
    """True only when status == 'passed'."""
    reward: float
    """1.0 if passed else 0.0."""
    tests_passed: int = 0
    """Tests of the final run that passed."""
    tests_total: int = 0
    """Tests the final run collected."""
    failed_tests: list[str] = field(default_factory=list)
    """Required tests that did not pass (at most 20)."""
    broken_tests: list[str] = field(default_factory=list)
    """Tests that passed on the base and fail after the change (at most 20)."""
    dropped: list[str] = field(default_factory=list)
    """`path: reason` for every change discarded (protected path, shadow module, hidden test file)."""
    applied: list[str] = field(default_factory=list)
    """Paths the change actually modified in the clean copy."""
    message: str = ""
    """One line of detail."""
    output_tail: str = ""
    """The last lines of pytest's output."""
    duration_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    def verdict(self) -> Verdict:
        """The function-task `Verdict` (for rewards): no_tests counts as failed, rejected as error."""
        status = {"no_tests": "failed", "rejected": "error", "passed": "passed", "failed": "failed",
                  "timeout": "timeout"}.get(self.status, "error")
        return Verdict(status, self.passed, self.reward, self.tests_passed, self.tests_total,
                       None if self.passed else self.status, self.message, self.duration_s)


def id_matches(wanted: str, nodeid: str) -> bool:
    """A test id from a task (pytest node id, or unittest style `test_x (pkg.mod.Class)`) vs a pytest node id."""
    if wanted == nodeid:
        return True
    m = re.fullmatch(r"(\w+) \(([\w.]+)\)", wanted)
    if not m:
        return False
    name, dotted = m.groups()
    mod, _, cls = dotted.rpartition(".")
    path, _, rest = nodeid.partition("::")
    return rest == f"{cls}::{name}" and path[:-3].replace("/", ".").endswith(mod)


def run_tests(root: Path, targets: list[str], timeout_s: float, max_output_bytes: int = 16384,
              hide_paths: tuple[str, ...] = ()) -> TestRun:
    """Run pytest on `targets` in the workspace at root, in the sandbox, through the judge's runner."""
    nonce = secrets.token_hex(16)
    spec = json.dumps({"nonce": nonce, "root": str(root), "targets": targets}) + "\n"
    limits = isolation.Limits(cpu_s=int(timeout_s) + 1, memory_mb=2048, nproc=64, nofile=256, fsize_mb=16)
    res = run_isolated([sys.executable, "-I", RUNNER, "{fd}"], root, timeout_s=timeout_s, limits=limits,
                       max_output_bytes=max_output_bytes, hide_paths=hide_paths, channel=True,
                       stdin=spec.encode())
    if res.status == "timeout":
        return TestRun("timeout", output=res.output, duration_s=res.duration_s)
    records = []
    for line in res.channel.decode("utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("nonce") == nonce:
            records.append(rec)
    if len(records) != 1:
        why = "the test run ended before reporting (early exit or crash)" if not records else \
            "more than one result record (forged)"
        return TestRun("error", output=res.output + f"\n[judge] {why}", duration_s=res.duration_s)
    rec = records[0]
    tests = {str(k): bool(v.get("passed")) for k, v in rec.get("tests", {}).items() if isinstance(v, dict)}
    return TestRun("ok", tests, list(rec.get("collect_errors", [])), list(rec.get("tampered", [])),
                   res.output, res.duration_s)


def added_lines(before: str | None, after: str) -> list[str]:
    old = [] if before is None else before.splitlines()
    return [l[1:] for l in difflib.unified_diff(old, after.splitlines(), lineterm="", n=0)
            if l.startswith("+") and not l.startswith("+++")]


class RepoJudge:
    """Judges changes against repository tasks; keeps one pristine base per task (and its baseline run)."""

    def __init__(self, hide_paths: tuple[str, ...] = (), max_output_bytes: int = 16384):
        self.hide_paths, self.max_output_bytes = tuple(hide_paths), max_output_bytes
        self.dir = scratch_dir("codechat-judge-")
        self._bases: dict[str, Path] = {}
        self._baselines: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._task_locks: dict[str, threading.RLock] = {}
        self._n = 0

    def __enter__(self) -> "RepoJudge":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        isolation.rmtree(str(self.dir))

    def _task_lock(self, task_id: str):
        with self._lock:
            return self._task_locks.setdefault(task_id, threading.RLock())

    def base(self, task: RepoTask) -> Path:
        """The pristine starting tree of the task (written once)."""
        with self._task_lock(task.task_id):
            if task.task_id not in self._bases:
                with self._lock:
                    self._n += 1
                    n = self._n
                self._bases[task.task_id] = materialize(task, self.dir / f"base-{n}")
            return self._bases[task.task_id]

    def clone(self, task: RepoTask) -> Workspace:
        base = self.base(task)
        with self._lock:
            self._n += 1
            n = self._n
        return Workspace.clone(base, self.dir, f"ws-{n}")

    def baseline(self, task: RepoTask) -> set[str]:
        """Node ids of the visible tests that pass on the untouched base (run once per task)."""
        base = self.base(task)
        with self._task_lock(task.task_id):
            if task.task_id not in self._baselines:
                passing: set[str] = set()
                if task.visible_tests:
                    ws = self.clone(task)
                    try:
                        run = run_tests(ws.root, task.visible_tests, task.limits.test_timeout_s, hide_paths=self.hide_paths)
                    finally:
                        ws.remove()
                    passing = {k for k, ok in run.tests.items() if ok} if run.status == "ok" else set()
                self._baselines[task.task_id] = passing
            del base
            return self._baselines[task.task_id]

    def filter_changes(self, task: RepoTask, changes: dict[str, str | None]) -> tuple[dict, list[str]]:
        """(kept changes, dropped `path: reason`)."""
        kept, dropped = {}, []
        hidden = set(task.hidden_tests) | self._patch_paths(task)
        for path, text in sorted(changes.items()):
            name = path.rsplit("/", 1)[-1]
            parts = path.split("/")
            stems = {p[:-3] if p.endswith(".py") else p for p in (parts[0], parts[-1])}
            if path in hidden:
                dropped.append(f"{path}: hidden test file")
            elif task.is_protected(path) or name in ALWAYS_PROTECTED or name.endswith(".pth"):
                dropped.append(f"{path}: protected")
            elif stems & SHADOW_NAMES:
                dropped.append(f"{path}: shadows module {sorted(stems & SHADOW_NAMES)[0]}")
            else:
                kept[path] = text
        return kept, dropped

    @staticmethod
    def _patch_paths(task: RepoTask) -> set[str]:
        return {fp.path for fp in parse_diff(task.test_patch)} if task.test_patch else set()

    def judge(self, task: RepoTask, change: dict[str, str | None] | str) -> RepoVerdict:
        base = self.base(task)

        def read_base(p: str) -> str | None:
            f = base / p
            return f.read_text(encoding="utf-8", errors="replace") if f.is_file() else None
        try:
            if isinstance(change, str):
                changes = apply_diff(change, read_base) if change.strip() else {}
            elif isinstance(change, dict):
                changes = {safe_path(k): v for k, v in change.items()}
                if not all(v is None or isinstance(v, str) for v in changes.values()):
                    raise PatchError("a {path: content} map needs text (or null to delete) for every path")
            else:
                raise PatchError(f"expected a unified diff or a {{path: content}} map, got {type(change).__name__}")
        except (PatchError, WorkspaceError) as e:
            return RepoVerdict("error", False, 0.0, message=f"bad patch: {e}")
        kept, dropped = self.filter_changes(task, changes)
        for path, text in kept.items():
            if text is not None and any(TAMPER.search(l) for l in added_lines(read_base(path), text)):
                return RepoVerdict("rejected", False, 0.0, dropped=dropped,
                                   message=f"{path}: the change reaches into the test runner or the interpreter")
        keep = self.baseline(task)
        ws = self.clone(task)
        try:
            return self._run(task, ws, kept, dropped, keep)
        finally:
            ws.remove()

    def _run(self, task: RepoTask, ws: Workspace, kept: dict, dropped: list[str], keep: set[str]) -> RepoVerdict:
        applied = []
        try:
            for path, text in kept.items():
                if text is None:
                    if ws.exists(path):
                        (ws.root / path).unlink()
                        applied.append(path)
                else:
                    ws.write(path, text)
                    applied.append(path)
            for path, text in task.hidden_tests.items():
                ws.write(path, text)
            if task.test_patch:
                for path, text in apply_diff(task.test_patch, lambda p: ws.read(p) if ws.exists(p) else None).items():
                    if text is None:
                        (ws.root / path).unlink()
                    else:
                        ws.write(path, text)
        except (PatchError, WorkspaceError, OSError) as e:
            return RepoVerdict("error", False, 0.0, dropped=dropped, message=f"cannot apply: {e}")
        hidden_files = sorted(set(task.hidden_tests) | self._patch_paths(task))
        targets = sorted(set(hidden_files) | {t.split("::", 1)[0] for t in task.visible_tests})
        run = run_tests(ws.root, targets, task.limits.test_timeout_s, self.max_output_bytes, self.hide_paths)
        tail = "\n".join(run.output.strip().splitlines()[-15:])
        common = dict(dropped=dropped, applied=applied, output_tail=tail, duration_s=run.duration_s,
                      tests_passed=sum(run.tests.values()), tests_total=len(run.tests))
        if run.status != "ok":
            return RepoVerdict(run.status, False, 0.0, message=run.output.strip().splitlines()[-1:][0]
                               if run.output.strip() else run.status, **common)
        if run.tampered:
            return RepoVerdict("rejected", False, 0.0, message=f"test runner patched during the run: "
                               f"{', '.join(run.tampered[:3])}", **common)
        if task.fail_to_pass:
            required = {w: any(id_matches(w, n) and ok for n, ok in run.tests.items()) for w in task.fail_to_pass}
        else:
            required = {n: ok for n, ok in run.tests.items() if n.split("::", 1)[0] in hidden_files}
        if not required:
            return RepoVerdict("no_tests", False, 0.0, message="the hidden tests collected no test"
                               + (f" (collection errors: {', '.join(run.collect_errors[:3])})"
                                  if run.collect_errors else ""), **common)
        before = set(task.pass_to_pass) or keep
        broken = sorted(w for w in before if not any(id_matches(w, n) and ok for n, ok in run.tests.items()))
        failed = sorted(w for w, ok in required.items() if not ok)
        passed = not failed and not broken
        msg = "" if passed else (f"{len(failed)} required test(s) fail" if failed else "") + \
            ("; " if failed and broken else "") + (f"{len(broken)} previously passing test(s) broken" if broken else "")
        return RepoVerdict("passed" if passed else "failed", passed, float(passed), failed_tests=failed[:20],
                           broken_tests=broken[:20], message=msg, **common)

