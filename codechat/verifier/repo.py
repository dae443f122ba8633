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
import fnmatch
import json
import threading
from pathlib import Path

from codechat.sandbox import isolation
from codechat.sandbox.workspace import Trash, Workspace, WorkspaceError, safe_path, scratch_dir
from codechat.tasks.repo import RepoTask, materialize
from codechat.verifier.patches import PatchError, apply_diff, parse_diff
from codechat.verifier.repo_env import TestEnv, lay_overlay
from codechat.verifier.repo_rules import CONFIG_FILES, drop_reason, hazard, matches, resolve_ids, test_targets
from codechat.verifier.repo_run import RUNNER, TestRun, changed_lines, missing_module, run_tests
from codechat.verifier.repo_suite import directives, path_directives, run_suite, unjudgeable_reason
from codechat.verifier.repo_warm import WarmRunner
from codechat.verifier.repo_verdict import STATUSES, RepoVerdict

__all__ = ["RUNNER", "TestRun", "run_tests", "RepoJudge", "RepoVerdict", "STATUSES", "id_matches", "ALWAYS_PROTECTED"]
ALWAYS_PROTECTED = tuple(sorted(CONFIG_FILES))
MAX_INLINE_FILES, MAX_INLINE_CHARS = 2000, 8 << 20
TAIL_LINES = 25
def id_matches(wanted: str, nodeid: str, doc: str = "") -> bool:
    """A test id from a task (any style `repo_rules.matches` knows) vs a collected pytest node id."""
    return matches(wanted, nodeid, doc)


def added_lines(before: str | None, after: str) -> list[str]:
    old = [] if before is None else before.splitlines()
    return [l[1:] for l in difflib.unified_diff(old, after.splitlines(), lineterm="", n=0)
            if l.startswith("+") and not l.startswith("+++")]


class RepoJudge:
    """Judges changes against repository tasks; keeps one pristine base per task (and its baseline run)."""

    def __init__(self, hide_paths: tuple[str, ...] = (), max_output_bytes: int = 16384,
                 envs: dict[str, TestEnv] | None = None, log_dir: str | Path | None = None, memory_mb: int = 2048,
                 warm: bool = False):
        """envs: environments by `repo@version` (repo_env.load_envs); when given, a task whose repository and
        version have none is `env_error`; when None, tests run with codechat's interpreter and its pytest.
        log_dir: LOG_DIR/<task_id>/ gets patch.diff, test_output.txt and report.json per judgement.
        warm: fork every test run from a warm runner per interpreter (`repo_warm.py`) instead of starting one."""
        self.hide_paths, self.max_output_bytes = tuple(hide_paths), max_output_bytes
        self.envs, self.memory_mb = envs, memory_mb
        self.log_dir = Path(log_dir) if log_dir else None
        self.dir = scratch_dir("codechat-judge-")
        self._bases: dict[str, Path] = {}
        self._baselines: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._task_locks: dict[str, threading.RLock] = {}
        self._n = 0
        self._logs: dict[str, int] = {}
        self._base_runs: dict[str, tuple[str, set[str]]] = {}
        self.warm = WarmRunner() if warm else None
        """The warm runner every test run of this judge (and of the agent's run_tests) forks from, or None."""
        self.trash = Trash()

    def __enter__(self) -> "RepoJudge":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.warm is not None:
            self.warm.close()
        self.trash.close()
        isolation.rmtree(str(self.dir))

    def discard(self, ws: Workspace) -> None:
        """Remove a workspace of this judge whose commands are all dead (in the background: `Trash`)."""
        self.trash.put(ws)

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
                base = materialize(task, self.dir / f"base-{n}")
                env = self.env_for(task)
                if env is not None and env.runner == "swebench":
                    lay_overlay(env, base)
                self._bases[task.task_id] = base
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
                # with PASS_TO_PASS or a test patch (SWE-bench), the record says what must keep passing
                if task.visible_tests and not task.pass_to_pass and not task.test_patch:
                    ws = self.clone(task)
                    try:
                        run = self.run_visible(task, ws.root, task.visible_tests)
                    finally:
                        self.discard(ws)
                    passing = {k for k, ok in run.tests.items() if ok} if run.status == "ok" else set()
                self._baselines[task.task_id] = passing
            del base
            return self._baselines[task.task_id]

    def run_visible(self, task: RepoTask, root: Path, targets: list[str], max_output_bytes: int = 16384,
                    hide_paths: tuple[str, ...] | None = None) -> TestRun:
        """Visible tests `targets` of the task in the tree at root, with its environment's runner."""
        env, hide = self.env_for(task), self.hide_paths if hide_paths is None else hide_paths
        if env is not None and env.runner == "swebench":
            return run_suite(root, env, path_directives(env.repo, sorted({t.split("::", 1)[0] for t in targets})),
                             task.limits.test_timeout_s, max_output_bytes, hide, memory_mb=max(self.memory_mb, 4096))
        return run_tests(root, targets, task.limits.test_timeout_s, max_output_bytes, hide, env=env,
                         memory_mb=self.memory_mb, warm=self.warm)

    def env_for(self, task: RepoTask) -> TestEnv | None:
        """The task's environment (None: codechat's interpreter, when no environments were given)."""
        if self.envs is None:
            return None
        env = self.envs.get(f"{task.metadata.get('repo', '')}@{task.metadata.get('version', '')}")
        return env.for_commit(task.metadata.get("base_commit")) if env is not None else None

    def filter_changes(self, task: RepoTask, changes: dict[str, str | None]) -> tuple[dict, list[str]]:
        """(kept changes, dropped `path: reason`)."""
        kept, dropped = {}, []
        base = self.base(task)
        hidden = set(task.hidden_tests) | self._patch_paths(task)
        env = self.env_for(task)
        runner_files = env.protected if env is not None else []
        for path, text in sorted(changes.items()):
            why = "hidden test file" if path in hidden else "the test runner's own file" \
                if any(fnmatch.fnmatchcase(path, g) for g in runner_files) else \
                drop_reason(path, task.is_protected, lambda top: (base / top).exists())
            if why:
                dropped.append(f"{path}: {why}")
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
                if len(change) > MAX_INLINE_FILES or sum(len(v) for v in change.values() if isinstance(v, str)) \
                        > MAX_INLINE_CHARS:
                    raise PatchError(f"a file map over {MAX_INLINE_FILES} files or {MAX_INLINE_CHARS} characters")
                changes = {safe_path(k): v for k, v in change.items()}
                if not all(v is None or isinstance(v, str) for v in changes.values()):
                    raise PatchError("a {path: content} map needs text (or null to delete) for every path")
            else:
                raise PatchError(f"expected a unified diff or a {{path: content}} map, got {type(change).__name__}")
        except (PatchError, WorkspaceError) as e:
            return self._log(task, change, RepoVerdict("error", False, 0.0, message=f"bad patch: {e}"))
        kept, dropped = self.filter_changes(task, changes)
        for path, text in kept.items():
            hit = next((h for l in added_lines(read_base(path), text) if (h := hazard(path, l))), None) \
                if text is not None else None
            if hit:
                return RepoVerdict("rejected", False, 0.0, dropped=dropped,
                                   message=f"{path}: the change reaches into the test runner or the interpreter ({hit})")
        if self.envs is not None and self.env_for(task) is None:
            return self._log(task, change, RepoVerdict("env_error", False, 0.0, dropped=dropped, message=
                             f"no environment for {task.metadata.get('repo')}@{task.metadata.get('version')}"))
        env = self.env_for(task)
        why = unjudgeable_reason(env.repo if env else str(task.metadata.get("repo", "")), task.fail_to_pass,
                                 task.pass_to_pass, env)
        if why:  # never judged on the tests that can run: a required change could pass on 1 of 7 of them
            return self._log(task, change, RepoVerdict(
                "env_error", False, 0.0, dropped=dropped, message=why, env=env.key if env else "codechat",
                warnings=[f"{t!r}: not run ({env.offline_skip[t]})" for t in task.fail_to_pass
                          if env and t in env.offline_skip][:50]))
        keep = self.baseline(task)
        ws = self.clone(task)
        try:
            verdict, output = self._run(task, ws, kept, dropped, keep)
        finally:
            self.discard(ws)
        return self._log(task, change, verdict, output)

    def _log(self, task: RepoTask, change, verdict: RepoVerdict, output: str = "") -> RepoVerdict:
        """LOG_DIR/<task_id>/<n>/ (n-th judgement of the task): patch.diff (or files.json), test_output.txt,
        report.json."""
        if self.log_dir is None:
            return verdict
        with self._lock:
            self._logs[task.task_id] = n = self._logs.get(task.task_id, 0) + 1
        d = self.log_dir / task.task_id.replace("/", "__") / str(n)
        d.mkdir(parents=True, exist_ok=True)
        if isinstance(change, str):
            (d / "patch.diff").write_text(change, encoding="utf-8")
        else:
            (d / "files.json").write_text(json.dumps(change, indent=1, default=str), encoding="utf-8")
        (d / "test_output.txt").write_text(output, encoding="utf-8")
        (d / "report.json").write_text(json.dumps({"task_id": task.task_id, **verdict.to_dict()}, indent=1),
                                       encoding="utf-8")
        return verdict

    def _run(self, task: RepoTask, ws: Workspace, kept: dict, dropped: list[str],
             keep: set[str]) -> tuple[RepoVerdict, str]:
        applied, untrusted = [], {}
        try:
            for path, text in kept.items():
                if text is None:
                    if ws.exists(path):
                        (ws.root / path).unlink()
                        applied.append(path)
                else:
                    f = ws.root / path
                    before = f.read_text(encoding="utf-8", errors="replace") if f.is_file() and not f.is_symlink() \
                        else None
                    ws.write(path, text)
                    applied.append(path)
                    untrusted[path] = changed_lines(before, text)
            self._write_tests(task, ws)
        except (PatchError, WorkspaceError, OSError) as e:
            return RepoVerdict("error", False, 0.0, dropped=dropped, message=f"cannot apply: {e}"), ""
        env = self.env_for(task)
        hidden_files = test_targets(sorted(set(task.hidden_tests) | self._patch_paths(task)))
        run = self._run_hidden(task, ws, untrusted=untrusted)
        return self._decide(task, run, hidden_files, keep, dropped, applied, env.key if env else "codechat",
                            ws.root), run.output

    def base_run(self, task: RepoTask) -> tuple[str, set[str]]:
        """(status, missing modules) of the same tests on the untouched base, in the same environment (run once
        per task, only when a judgement meets an environment-looking failure): an `env_error` must be the
        environment's doing, never the patch's. A base that runs (`ok`) makes the patched run's crash the
        patch's; a missing module counts only if the base lacks it too."""
        with self._task_lock(task.task_id):
            if task.task_id not in self._base_runs:
                ws = self.clone(task)
                try:
                    self._write_tests(task, ws)
                    run = self._run_hidden(task, ws, all_visible=True)
                    gone = missing_module(run.collect_errors, ws.root)
                    self._base_runs[task.task_id] = (run.status, {gone} if gone else set())
                except (PatchError, WorkspaceError, OSError):
                    self._base_runs[task.task_id] = ("env_error", set())
                finally:
                    self.discard(ws)
            return self._base_runs[task.task_id]

    def base_missing(self, task: RepoTask) -> set[str]:
        """Modules the environment lacks that the tests need on the untouched base (`base_run`)."""
        return self.base_run(task)[1]

    def _run_hidden(self, task: RepoTask, ws: Workspace, all_visible: bool = False,
                    untrusted: dict | None = None) -> TestRun:
        """The judgement's test run in ws: the environment's own test command on the test patch's directives
        (runner `swebench`), else the pytest runner on the hidden and visible test files, its guard told which
        lines the change wrote (`untrusted`)."""
        env = self.env_for(task)
        if env is not None and env.runner == "swebench":
            return run_suite(ws.root, env, directives(env.repo, task.test_patch or ""), task.limits.test_timeout_s,
                             self.max_output_bytes, self.hide_paths, memory_mb=max(self.memory_mb, 4096))
        return run_tests(ws.root, self._targets(task, None if all_visible else ws), task.limits.test_timeout_s,
                         self.max_output_bytes, self.hide_paths, env=env, memory_mb=self.memory_mb, warm=self.warm,
                         untrusted=untrusted)

    def _targets(self, task: RepoTask, ws: Workspace | None = None) -> list[str]:
        """Hidden test files and visible ones; in a workspace, only the visible files the change left (a deleted
        test file would make pytest refuse the run: its tests are missing instead, so they count as broken)."""
        hidden_files = test_targets(sorted(set(task.hidden_tests) | self._patch_paths(task)))
        visible = {t.split("::", 1)[0] for t in task.visible_tests}
        if ws is not None:
            visible = {t for t in visible if t in hidden_files or (ws.root / t).exists()}
        return sorted(set(hidden_files) | visible)

    @staticmethod
    def _write_tests(task: RepoTask, ws: Workspace) -> None:
        for path, text in task.hidden_tests.items():
            ws.write(path, text)
        if task.test_patch:
            for path, text in apply_diff(task.test_patch, lambda p: ws.read(p) if ws.exists(p) else None).items():
                if text is None:
                    (ws.root / path).unlink()
                else:
                    ws.write(path, text)

    def _decide(self, task: RepoTask, run: TestRun, hidden_files: list[str], keep: set[str], dropped: list[str],
                applied: list[str], env_name: str, root: Path) -> RepoVerdict:
        tail = "\n".join(run.output.strip().splitlines()[-TAIL_LINES:])
        common = dict(dropped=dropped, applied=applied, output_tail=tail, duration_s=run.duration_s,
                      tests_passed=sum(run.tests.values()), tests_total=len(run.tests), env=env_name)
        if run.status != "ok":
            last = run.message or (run.output.strip().splitlines()[-1:] or [run.status])[0]
            if run.status == "env_error" and applied and self.base_run(task)[0] == "ok":
                # the same tests run on the untouched base: the change broke the run (a syntax error or a raise
                # at import, a removed name, an exit during collection), which is its own failure
                return RepoVerdict("failed", False, 0.0, message=f"the change breaks the test run (the base "
                                   f"runs): {last[:300]}", **common)
            return RepoVerdict(run.status, False, 0.0, message=last, **common)
        if run.tampered:
            return RepoVerdict("rejected", False, 0.0, message=f"test runner patched during the run: "
                               f"{', '.join(run.tampered[:3])}", **common)
        gone = missing_module(run.collect_errors, root)
        if gone and gone in self.base_missing(task):  # a patch that imports a missing module is its own fault
            return RepoVerdict("env_error", False, 0.0, message=f"the environment lacks module {gone!r} "
                               f"(collection: {run.collect_errors[0][:200]})", **common)
        env = self.env_for(task)
        offline = env.offline_skip if env else {}
        warnings = [f"{t!r}: not run ({why})" for t, why in offline.items()
                    if t in task.fail_to_pass or t in task.pass_to_pass]
        if task.fail_to_pass:
            f2p = resolve_ids(task.fail_to_pass, run.tests, run.docs, run.modules)
        else:
            own = {n: ok for n, ok in run.tests.items() if n.split("::", 1)[0] in hidden_files}
            f2p = {"passed": sorted(n for n, ok in own.items() if ok),
                   "failed": sorted(n for n, ok in own.items() if not ok), "unknown": [], "warnings": []}
        p2p = resolve_ids([t for t in (task.pass_to_pass or sorted(keep)) if t not in offline], run.tests, run.docs, run.modules)
        warnings += f2p.pop("warnings") + p2p.pop("warnings")
        common.update(fail_to_pass=f2p, pass_to_pass=p2p, warnings=warnings[:50])
        if not (f2p["passed"] or f2p["failed"] or f2p["unknown"]):
            return RepoVerdict("no_tests", False, 0.0, message="the hidden tests collected no test"
                               + (f" (collection errors: {', '.join(run.collect_errors[:3])})"
                                  if run.collect_errors else ""), **common)
        failed, broken = f2p["failed"] + f2p["unknown"], p2p["failed"] + p2p["unknown"]
        passed = not failed and not broken
        parts = [f"{len(f2p['failed'])} required test(s) fail" if f2p["failed"] else "",
                 f"{len(broken)} previously passing test(s) broken" if broken else "",
                 f"unknown test id(s): {', '.join(f2p['unknown'][:3] + p2p['unknown'][:3])}"
                 if f2p["unknown"] or p2p["unknown"] else "",
                 f"collection errors: {'; '.join(run.collect_errors[:2])}" if run.collect_errors and not passed else ""]
        return RepoVerdict("passed" if passed else "failed", passed, float(passed), failed_tests=failed[:20],
                           broken_tests=broken[:20], message="; ".join(x for x in parts if x), **common)
