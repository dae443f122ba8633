"""`codechat tasks show SPEC`: what a task set holds (any spec data.train takes), and what is wrong with it;
`codechat tasks check FILE`: run each reference solution several times, list failing and flaky tasks
(`--write-quarantine` for data.exclude).
"""
from __future__ import annotations

import argparse
from collections import Counter

from codechat import CodechatError
from codechat.config import VerifierConfig
from codechat.tasks import load_tasks, load_tasks_with_format
from codechat.tasks.builtin import builtin_names, load_builtin
from codechat.tasks.quarantine import write_quarantine
from codechat.tasks.repo_loaders import is_repo_spec, load_repo_tasks
from codechat.tasks.statement import not_unique
from codechat.verifier.check import check_references
from codechat.verifier.verify import Verifier


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="summarise a task set: a file, FILE:SPLIT, A+B, builtin[:NAME]")
    show.add_argument("file", help="task file (JSONL / JSON / .gz), FILE:SPLIT, A+B, builtin[:NAME], or a "
                                   "repository set (builtin:repo-train, a folder of repository tasks)")
    show.add_argument("--limit", type=int, default=2, help="number of example tasks to print (default 2)")
    show.add_argument("--format", default=None, help="force a format instead of detecting it")
    sub.add_parser("list", help="list the built-in task sets")
    check = sub.add_parser("check", help="run each reference solution --runs times; list failing and flaky tasks")
    check.add_argument("file", help="task file (JSONL / JSON / .gz, an APPS folder) or builtin[:NAME]")
    check.add_argument("--runs", type=int, default=5, help="runs per reference solution (default 5)")
    check.add_argument("--format", default=None, help="force a format instead of detecting it")
    check.add_argument("--workers", type=int, default=0, help="sandbox workers (default: one per CPU core)")
    check.add_argument("--timeout", type=float, default=None, help="per-program time limit in seconds")
    check.add_argument("--cpu-time", action="store_true", help="judge stdin/stdout time limits on CPU time")
    check.add_argument("--write-quarantine", metavar="PATH", default=None,
                       help="write the failing and flaky task ids to PATH (a list data.exclude accepts)")


def summarize(tasks, fmt: str, limit: int = 2) -> str:
    lines = [f"format: {fmt}", f"tasks: {len(tasks)}"]
    fields = Counter(k for t in tasks for k in t.metadata if k != "source")
    lines.append("fields: task_id, prompt, tests, entry_point, setup, timeout_s"
                 + (f"; metadata: {', '.join(sorted(fields))}" if fields else ""))
    n_tests = [len(t.stdio.tests) if t.stdio else len(t.tests) for t in tasks]
    kinds = Counter(t.kind for t in tasks)
    lines.append("kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    lines.append(f"tests per task: min {min(n_tests)}, mean {sum(n_tests) / len(n_tests):.1f}, max {max(n_tests)}")
    with_solution = sum(1 for t in tasks if t.solution)
    lines.append(f"with reference solution: {with_solution}")
    if any(t.stdio for t in tasks):
        stdio = [t for t in tasks if t.stdio]
        lines.append(f"stdin/stdout rules from statements: any case {sum(t.stdio.ignore_case for t in stdio)}, "
                     f"stated tolerance {sum(t.stdio.float_tol > 0 for t in stdio)}, "
                     f"several answers without checker {sum(map(not_unique, stdio))} (left out of training)")
    judged_by_tests = [(t, n) for t, n in zip(tasks, n_tests) if t.kind != "answer"]  # answer tasks: a reference answer
    warnings = [f"task {t.task_id}: no tests" for t, n in judged_by_tests if not n
                and not t.metadata.get("base_input")]
    warnings += [f"task {t.task_id}: no entry point" for t, _ in judged_by_tests if not t.entry_point and not t.stdio][:5]
    for t in tasks[:limit]:
        lines.append(f"--- {t.task_id} (entry point: {t.entry_point})")
        lines.append(t.prompt.rstrip()[:600])
        for test in t.tests[:3]:
            lines.append(f"  test: {test.strip()[:200]}")
        for io in (t.stdio.tests[:2] if t.stdio else []):
            lines.append(f"  stdin: {io.input.strip()[:100]!r} -> stdout: {io.output.strip()[:100]!r}")
        if t.kind == "answer":
            lines.append(f"  answer: {t.metadata.get('answer')}" + "".join(
                f" | {a}" for a in t.metadata.get("accepted") or []))
    lines += [f"warning: {w}" for w in warnings] or ["warnings: none"]
    return "\n".join(lines)


def summarize_repo(tasks, limit: int = 2) -> str:
    """`tasks show` of repository tasks: counts, files and tests per task, example issues."""
    lines = ["format: repository tasks", f"tasks: {len(tasks)}",
             f"files per task: min {min(len(t.files) for t in tasks)}, max {max(len(t.files) for t in tasks)}",
             f"hidden test files per task: max {max(len(t.hidden_tests) for t in tasks)}; "
             f"with visible tests: {sum(bool(t.visible_tests) for t in tasks)}"]
    for t in tasks[:limit]:
        lines += [f"--- {t.task_id} ({len(t.files)} files)", t.problem.rstrip()[:600]]
    return "\n".join(lines)


def show(args: argparse.Namespace) -> str:
    """`tasks show`: the summary of any task spec that training accepts as data.train."""
    spec = args.file
    if is_repo_spec(spec):
        return summarize_repo(load_repo_tasks(spec), args.limit)
    if spec.startswith("builtin") and "+" not in spec:
        return summarize(load_builtin(spec), "codechat (built-in)", args.limit)
    try:
        tasks, fmt = load_tasks_with_format(spec, args.format)
    except CodechatError:
        tasks = load_tasks(spec, args.format)  # FILE:SPLIT, A+B: one line of its own when it is not one either
        fmts = Counter(t.metadata.get("source", "codechat") for t in tasks)
        fmt = ", ".join(f"{k} {n}" for k, n in fmts.most_common())
    return summarize(tasks, fmt, args.limit)


def check(args: argparse.Namespace) -> int:
    """`tasks check`: exit 1 when some reference fails or is flaky."""
    if args.runs < 1:
        raise CodechatError(f"--runs must be at least 1, got {args.runs}")
    tasks = load_tasks(args.file, args.format)
    cfg = VerifierConfig(workers=args.workers, cpu_time_limit=args.cpu_time)
    if args.timeout is not None:
        cfg.timeout_s = args.timeout
    with Verifier(cfg) as v:
        report = check_references(v, tasks, args.runs)
    for c in report.problems:
        print(f"{c.task_id}: {c.reason}")
    print(f"checked {len(report.checked)} references x {report.runs} runs: "
          f"{sum(c.failing for c in report.checked)} failing, {sum(c.flaky for c in report.checked)} flaky, "
          f"{len(report.no_reference)} tasks without a reference (not checked)")
    if args.write_quarantine:
        write_quarantine(args.write_quarantine, {c.task_id: c.reason for c in report.problems})
        print(f"wrote {len(report.problems)} task ids to {args.write_quarantine} (use: data.exclude="
              f"{args.write_quarantine})")
    return 1 if report.problems else 0


def run(args: argparse.Namespace) -> int:
    if args.action == "check":
        return check(args)
    if args.action == "list":
        for name in builtin_names():
            print(f"builtin:{name}  ({len(load_builtin('builtin:' + name))} tasks)")
        return 0
    print(show(args))
    return 0
