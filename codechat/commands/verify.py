"""`codechat verify`: run completions against their tasks' tests in the sandbox; or replay a known-attack file.

    codechat verify --tasks T.jsonl --completions C.jsonl --out R.jsonl [--workers N] [--timeout S] [--memory-mb M]
    codechat verify --regress tests/attacks/attacks.jsonl      # exit 1 if any known attack is judged a pass
    codechat verify --check                                    # the sandbox protections active here

A completion line is {"task_id", "completion"} (optionally "sample_id"); a result line is the verdict plus the
ids. Unknown task ids, malformed lines and empty completions are reported (and written as results with
status `error` / `no_code`), never fatal. The directory holding the task file is hidden from the programs.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

from codechat import CodechatError
from codechat.commands import repo_verify
from codechat.config import VerifierConfig
from codechat.io.jsonl import read_jsonl, scan_jsonl, unknown_ids_line
from codechat.sandbox.pool import SandboxPool, protection_report
from codechat.tasks import Task, load_tasks
from codechat.tasks.repo_loaders import is_repo_spec
from codechat.verifier.factory import make_verifier
from codechat.verifier.verdict import Verdict
from codechat.verifier.verify import Verifier


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", help="task file (any format `codechat tasks show` reads) or builtin[:NAME]")
    p.add_argument("--completions", help='JSONL: {"task_id", "completion", "sample_id"?} per line')
    p.add_argument("--out", help="where to write one verdict per completion line (JSONL)")
    p.add_argument("--workers", type=int, default=None, help="sandbox workers (default: one per CPU core)")
    p.add_argument("--timeout", type=float, default=None, help="wall-clock seconds per program (default 5)")
    p.add_argument("--memory-mb", type=int, default=None, help="memory limit per program, all its processes "
                   "together where a memory cgroup is available, else per process (default 1024; see --check)")
    p.add_argument("--percent", choices=["both", "ratio", "number"], default=None,
                   help="answer tasks: 50%% means 0.5 (ratio), 50 (number) or either (both, the default)")
    p.add_argument("--numbers", choices=["strict", "lenient"], default=None,
                   help="answer tasks: exact references exact and decimals at the reference's precision (strict, "
                        "the default), or decimals within verifier.answer.rel_tol (lenient)")
    p.add_argument("--regress", metavar="FILE", help="JSONL of known attacks {task, completion, description}: "
                                                     "exit 1 if any is judged a pass")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-plus", action="store_true", help="judge MBPP+/HumanEval+ tasks by their shown asserts "
                   "only (default: also on evalplus's plus inputs, as the training reward)")
    p.add_argument("--cpu-time", action="store_true", help="judge time limits on CPU time (stdin/stdout tests; "
                   "function tasks: --timeout and --test-timeout)")
    p.add_argument("--test-timeout", type=float, default=None, metavar="S",
                   help="function tasks: limit per test; a test past it fails as timeout, the others still run")
    p.add_argument("--total-timeout-s", type=float, default=None, metavar="S",
                   help="stdin/stdout tasks: limit on a completion's summed test time (default 60, 0 = none)")
    p.add_argument("--stop-at-first-failure", action="store_true",
                   help="stdin/stdout tasks: run no test after a completion's first failing one")
    p.add_argument("--repos", help="repository tasks: directory holding the SWE-bench checkouts (owner__name)")
    p.add_argument("--envs", help="repository tasks: directory of test environments (codechat repo env build); "
                                  "default: codechat's own interpreter and pytest")
    p.add_argument("--log-dir", help="repository tasks: per-judgement logs LOG_DIR/TASK_ID/N/ "
                                     "(patch, test output, report)")
    p.add_argument("--check", action="store_true", help="start one sandbox worker and print the protections "
                                                        "active on this machine, one per line")


def _config(args):
    cfg = VerifierConfig()
    if args.workers is not None:
        if args.workers < 0:
            raise CodechatError(f"--workers must be >= 0 (0 = one per CPU core), got {args.workers}")
        cfg.workers = args.workers
    if args.timeout is not None:
        if args.timeout <= 0:
            raise CodechatError(f"--timeout must be positive, got {args.timeout}")
        cfg.timeout_s = args.timeout
    if args.memory_mb is not None:
        if args.memory_mb < 64:
            raise CodechatError(f"--memory-mb must be at least 64, got {args.memory_mb}")
        cfg.memory_mb = args.memory_mb
    cfg.cpu_time_limit = bool(getattr(args, "cpu_time", False))
    if getattr(args, "test_timeout", None) is not None:
        if not args.test_timeout > 0:
            raise CodechatError(f"--test-timeout must be positive, got {args.test_timeout}")
        cfg.test_timeout_s = args.test_timeout
    total = getattr(args, "total_timeout_s", None)
    if total is not None:
        if not total >= 0:
            raise CodechatError(f"--total-timeout-s must be >= 0 (0 = none), got {total}")
        cfg.total_timeout_s = total
    cfg.stop_at_first_failure = bool(getattr(args, "stop_at_first_failure", False))
    cfg.plus_inputs = not getattr(args, "no_plus", False)
    if args.percent:
        cfg.answer.percent = args.percent
    if args.numbers:
        cfg.answer.numbers = args.numbers
    return cfg


def read_completions(path: str, known: set[str], tasks: str = "the task set") -> tuple[list[dict], list[str]]:
    """Completion records, each with `error` set when the line is unusable (kept as a result), and the warnings:
    first one line for all unknown task ids (`unknown_ids_line`), then one per other bad line."""
    rows, unknown, warnings = [], [], []
    warn = warnings.append
    for lineno, rec, why in scan_jsonl(path, "completions file"):
        if rec is None:
            warn(f"{path}:{lineno}: {why}")
            rows.append({"line": lineno, "error": why})
            continue
        row = {"line": lineno, "task_id": str(rec.get("task_id")), "sample_id": rec.get("sample_id"),
               "completion": rec.get("completion")}
        if "task_id" not in rec:
            row["error"] = "missing task_id"
        elif row["task_id"] not in known:
            row["error"] = f"unknown task_id {row['task_id']!r}"
            unknown.append((lineno, row["task_id"]))
        elif not isinstance(row["completion"], str):
            row["error"] = "missing or non-string completion"
        if "error" in row:
            if not row["error"].startswith("unknown task_id"):
                warn(f"{path}:{lineno}: {row['error']}")
        elif not row["completion"].strip():
            warn(f"{path}:{lineno}: empty completion (task {row['task_id']})")
        rows.append(row)
    line = unknown_ids_line(path, unknown, tasks)
    return rows, ([line] if line else []) + warnings


def _progress(total: int, quiet: bool):
    return Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), disable=quiet, transient=False)


def run_verify(args) -> int:
    if not (args.tasks and args.completions and args.out):
        raise CodechatError("verify needs --tasks, --completions and --out (or --regress FILE)")
    if not Path(args.out).resolve().parent.is_dir():
        raise CodechatError(f"--out {args.out}: directory {Path(args.out).parent} does not exist")
    tasks = {t.task_id: t for t in load_tasks(args.tasks)}
    rows, warnings = read_completions(args.completions, set(tasks), args.tasks)
    for w in warnings[:20]:
        print(f"warning: {w}", file=sys.stderr)
    if len(warnings) > 20:
        print(f"warning: ... and {len(warnings) - 20} more", file=sys.stderr)
    cfg = _config(args)
    if not args.tasks.startswith("builtin"):
        cfg.hide_paths = [str(Path(args.tasks).resolve().parent)]
    good = [r for r in rows if "error" not in r]
    by_line: dict[int, Verdict] = {}
    counts: Counter = Counter()
    with make_verifier(cfg) as v, _progress(len(rows), args.quiet) as bar, \
            open(args.out, "w", encoding="utf-8") as out:
        job = bar.add_task("verifying", total=len(rows))
        for r in rows:
            if "error" in r:
                by_line[r["line"]] = Verdict("error", False, 0.0, error_type="BadInput", message=r["error"])
                bar.advance(job)
        for r, verdict in zip(good, v.imap((tasks[r["task_id"]], r["completion"]) for r in good)):
            by_line[r["line"]] = verdict
            bar.advance(job)
        for r in rows:
            verdict = by_line[r["line"]]
            counts[verdict.status] += 1
            rec = {"task_id": r.get("task_id"), "sample_id": r.get("sample_id"), "line": r["line"]}
            rec.update(verdict.to_dict())
            out.write(json.dumps(rec) + "\n")
    n = len(rows)
    passed = counts.get("passed", 0)
    print(f"verified {n} completions: pass rate {passed / n:.1%} ({passed}/{n})" if n else "no completions")
    for status, c in counts.most_common():
        print(f"  {status:<13} {c}")
    print(f"results: {args.out}")
    return 0


def run_regress(args) -> int:
    attacks = []
    for where, rec in read_jsonl(args.regress, "attack file"):
        try:
            t = rec["task"]
            task = Task(str(t["task_id"]), t.get("prompt", ""), list(t["tests"]), t.get("entry_point"),
                        t.get("setup", ""), t.get("timeout_s"), {})
            attacks.append((rec.get("id", where), rec.get("description", ""), task, rec["completion"]))
        except (ValueError, KeyError, TypeError, CodechatError) as e:
            raise CodechatError(f"{where}: malformed attack record: {e}") from None
    fooled = []
    with Verifier(_config(args)) as v:
        for (aid, desc, _, _), verdict in zip(attacks, v.imap((t, c) for _, _, t, c in attacks)):
            mark = "FOOLED" if verdict.passed else "held  "
            if not args.quiet:
                print(f"{mark} {aid:<32} -> {verdict.status:<12} {desc[:70]}")
            if verdict.passed:
                fooled.append(aid)
    print(f"{len(attacks) - len(fooled)}/{len(attacks)} attacks held" + (f"; FOOLED by: {', '.join(fooled)}"
                                                                        if fooled else ""))
    return 1 if fooled else 0


def run_check(args) -> int:
    pool = SandboxPool(1, warn=False)
    try:
        for line in protection_report(pool.active):
            print(line)
    finally:
        pool.close()
    return 0


def run(args: argparse.Namespace) -> int:
    if args.check:
        return run_check(args)
    if args.tasks and not args.regress and is_repo_spec(args.tasks):  # patches against repository tasks
        return repo_verify.run_verify(args)
    if args.envs or args.log_dir:
        raise CodechatError("verify: --envs and --log-dir apply to repository tasks only")
    if args.regress:
        return run_regress(args)
    return run_verify(args)
