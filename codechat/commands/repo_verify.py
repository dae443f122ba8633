"""`codechat verify` on repository tasks: patches judged in a RepoJudge, verdicts as JSONL.

Kept apart from the repo agent commands so that `codechat verify` does not import the chat and rollout stack.
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from codechat import CodechatError
from codechat.io.jsonl import scan_jsonl, unknown_ids_line
from codechat.tasks.repo_loaders import load_repo_tasks
from codechat.verifier.repo import RepoJudge, RepoVerdict
from codechat.verifier.repo_env import load_envs


def load_tasks(args) -> dict:
    tasks = load_repo_tasks(getattr(args, "repo_task", None) or args.tasks, repos=getattr(args, "repos", None))
    if getattr(args, "limit", 0):
        tasks = tasks[:args.limit]
    if getattr(args, "timeout", None):
        for t in tasks:
            t.limits.test_timeout_s = float(args.timeout)
    return {t.task_id: t for t in tasks}


def judge_for(args, hide: tuple[str, ...]) -> RepoJudge:
    """The RepoJudge the flags ask for: --envs, --log-dir, --memory-mb."""
    envs = load_envs(args.envs) if getattr(args, "envs", None) else None
    memory = getattr(args, "memory_mb", None)
    if memory is not None and memory < 64:
        raise CodechatError(f"--memory-mb must be at least 64, got {memory}")
    return RepoJudge(hide_paths=hide, envs=envs, log_dir=getattr(args, "log_dir", None), memory_mb=memory or 2048)


def read_patches(path: str, known: set[str]) -> list[dict]:
    rows = []
    for lineno, rec, why in scan_jsonl(path, "patches file"):
        row = {"line": lineno}
        if rec is None:
            rows.append(dict(row, error=why))
            continue
        # SWE-bench predictions ({"instance_id", "model_patch"}) are read as they are
        change = next((rec[k] for k in ("patch", "files", "completion", "model_patch") if k in rec), None)
        row.update(task_id=str(rec.get("task_id", rec.get("instance_id"))), sample_id=rec.get("sample_id"),
                   change=change)
        if row["task_id"] not in known:
            row["error"] = f"unknown task_id {row['task_id']!r}"
        elif not isinstance(change, (str, dict)):
            row["error"] = "needs 'patch' (a unified diff) or 'files' ({path: text})"
        rows.append(row)
    return rows


def run_verify(args) -> int:
    if not (args.tasks and args.completions and args.out):
        raise CodechatError("verify needs --tasks, --completions and --out")
    tasks = load_tasks(args)
    rows = read_patches(args.completions, set(tasks))
    unknown = [(r["line"], r["task_id"]) for r in rows if r.get("error", "").startswith("unknown task_id")]
    line = unknown_ids_line(args.completions, unknown, args.tasks)
    if line:
        print(f"warning: {line}", file=sys.stderr)
    for r in rows:
        if "error" in r and not r["error"].startswith("unknown task_id"):
            print(f"warning: {args.completions}:{r['line']}: {r['error']}", file=sys.stderr)
    hide = tuple({str(Path(args.completions).resolve().parent)} |
                 ({str(Path(args.tasks).expanduser().resolve().parent)} if not args.tasks.startswith("builtin") else set()))
    counts: Counter = Counter()
    with judge_for(args, hide) as judge, ThreadPoolExecutor(max(1, args.workers or 4)) as pool:
        futs = [None if "error" in r else pool.submit(judge.judge, tasks[r["task_id"]], r["change"]) for r in rows]
        with open(args.out, "w", encoding="utf-8") as out:
            for r, f in zip(rows, futs):
                v = f.result() if f else RepoVerdict("error", False, 0.0, message=r["error"])
                counts[v.status] += 1
                out.write(json.dumps({"task_id": r.get("task_id"), "sample_id": r.get("sample_id"),
                                      "line": r["line"], **v.to_dict()}) + "\n")
    n, passed = len(rows), counts.get("passed", 0)
    print(f"verified {n} patches: resolve rate {passed / n:.1%} ({passed}/{n})" if n else "no patches")
    for status, c in counts.most_common():
        print(f"  {status:<10} {c}")
    print(f"results: {args.out}")
    return 0
