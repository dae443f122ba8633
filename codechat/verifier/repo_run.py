"""One test run of a repository workspace: `sandbox/repo_runner.py` under the workspace sandbox, with the
interpreter of the task's environment (or, without one, the interpreter running codechat), its record read
back from the private result pipe. The output is kept up to MAX_OUTPUT_BYTES and its *end* is what verdicts
show (pytest's summary comes last).
"""
from __future__ import annotations

import difflib
import json
import re
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path

from codechat.sandbox import isolation
from codechat.sandbox.workspace import run_isolated
from codechat.verifier.repo_env import TestEnv

RUNNER = str(Path(__file__).resolve().parents[1] / "sandbox" / "repo_runner.py")  # visible in the fresh root
MAX_OUTPUT_BYTES = 8 << 20
_MISSING = re.compile(r"(?:ModuleNotFoundError|ImportError): No module named '([\w.]+)'")


@dataclass
class TestRun:
    """One runner invocation, as read back from its result pipe."""
    status: str
    """`ok`, `timeout`, `error` (no valid record: exited early, crashed, or more than one record) or `env_error`
    (the environment could not run pytest: interpreter, pytest itself, a usage error or INTERNALERROR)."""
    tests: dict[str, bool] = field(default_factory=dict)
    """pytest node id -> passed."""
    collect_errors: list[str] = field(default_factory=list)
    """`node id: last line of the error` per collector that failed."""
    tampered: list[str] = field(default_factory=list)
    output: str = ""
    """The run's output (its first MAX_OUTPUT_BYTES or the caller's cap, whichever is larger)."""
    duration_s: float = 0.0
    docs: dict[str, str] = field(default_factory=dict)
    """node id -> first docstring line."""
    modules: dict[str, str] = field(default_factory=dict)
    """node id -> module defining its class (or function)."""
    exit_code: int | None = None
    message: str = ""


def changed_lines(before: str | None, after: str) -> list[int] | None:
    """The 1-based line numbers of `after` that a change from `before` added or replaced (None: a new file)."""
    if before is None:
        return None
    sm = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    return [j + 1 for tag, _, _, j1, j2 in sm.get_opcodes() if tag in ("replace", "insert") for j in range(j1, j2)]


def missing_module(collect_errors: list[str], root: Path) -> str | None:
    """The module a collection error says is missing, when the tree does not hold it (an environment fault,
    not the patch's): None otherwise."""
    for err in collect_errors:
        m = _MISSING.search(err)
        if m:
            top = m[1].split(".")[0]
            if not any((d / top).exists() or (d / f"{top}.py").exists() for d in (root, root / "src")):
                return m[1]
    return None


def run_tests(root: Path, targets: list[str], timeout_s: float, max_output_bytes: int = 16384,
              hide_paths: tuple[str, ...] = (), env: TestEnv | None = None, memory_mb: int = 2048,
              warm=None, untrusted: dict | None = None) -> TestRun:
    """Run pytest on `targets` in the workspace at root, in the sandbox, through the judge's runner.
    warm: a `repo_warm.WarmRunner` to fork the run from (it says when a run must be cold), or None: cold.
    untrusted: {path: [line numbers] or None (the whole file)}: the code a change wrote (`changed_lines`), which
    the runner's guard keeps from reaching the runner (`sandbox/repo_guard.py`)."""
    nonce = secrets.token_hex(16)
    spec = json.dumps({"nonce": nonce, "root": str(root), "targets": targets,
                       "pythonpath": env.pythonpath if env else [], "untrusted": untrusted or {}}) + "\n"
    limits = isolation.Limits(cpu_s=int(timeout_s) + 1, memory_mb=memory_mb, nproc=64, nofile=256, fsize_mb=16)
    python = env.interpreter if env else sys.executable
    cap, binds = max(max_output_bytes, MAX_OUTPUT_BYTES), tuple(env.host_dirs()) if env else ()
    res = warm.run(python, spec.encode(), root, env.pythonpath if env else [], timeout_s, limits, cap, hide_paths,
                   binds) if warm is not None else None
    if res is None:
        res = run_isolated([python, "-I", RUNNER, "{fd}"], root, timeout_s=timeout_s, limits=limits,
                           max_output_bytes=cap, hide_paths=hide_paths, channel=True, stdin=spec.encode(), binds=binds)
    output = res.output
    if res.status == "timeout":
        return TestRun("timeout", output=output, duration_s=res.duration_s)
    if res.status == "error":
        return TestRun("env_error", output=output, duration_s=res.duration_s, message=res.output.strip()[-300:])
    records = []
    for line in res.channel.decode("utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("nonce") == nonce:
            records.append(rec)
    if len(records) != 1:
        if not records and "codechat sandbox launch failed" in output:  # before any code of the patch ran
            return TestRun("env_error", output=output, duration_s=res.duration_s,
                           message=output.strip().splitlines()[-1][:300])
        if not records and re.search(r"No module named '?(pytest|_pytest|pluggy)'?", output):
            return TestRun("env_error", output=output, duration_s=res.duration_s,
                           message=f"the environment's interpreter {python} has no pytest")
        why = "the test run ended before reporting (early exit or crash)" if not records else \
            "more than one result record (forged)"
        return TestRun("error", output=output + f"\n[judge] {why}", duration_s=res.duration_s, message=why)
    rec = records[0]
    raw = {str(k): v for k, v in rec.get("tests", {}).items() if isinstance(v, dict)}
    run = TestRun("ok", {k: bool(v.get("passed")) for k, v in raw.items()}, list(rec.get("collect_errors", [])),
                  list(rec.get("tampered", [])), output, res.duration_s,
                  {k: str(v.get("doc") or "") for k, v in raw.items()}, {k: str(v.get("module") or "")
                                                                          for k, v in raw.items()}, rec.get("exit"))
    if run.exit_code in (3, 4, -1) and not run.tests:  # INTERNALERROR, usage error, pytest raised
        tail = [l for l in output.strip().splitlines() if l.strip()][-1:] or [f"pytest exit {run.exit_code}"]
        run.status, run.message = "env_error", f"pytest could not run: {tail[0][:300]}"
    return run
