"""`codechat tasks show FILE`: what a task file holds, and what is wrong with it."""
from __future__ import annotations

import argparse
from collections import Counter

HELP = "inspect a task file: format, count, fields, examples, warnings"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="summarise a task file (or builtin / builtin:NAME)")
    show.add_argument("file", help="task file (JSONL / JSON / .gz) or builtin[:NAME]")
    show.add_argument("--limit", type=int, default=2, help="number of example tasks to print (default 2)")
    show.add_argument("--format", default=None, help="force a format instead of detecting it")
    sub.add_parser("list", help="list the built-in task sets")


def summarize(tasks, fmt: str, limit: int = 2) -> str:
    lines = [f"format: {fmt}", f"tasks: {len(tasks)}"]
    fields = Counter(k for t in tasks for k in t.metadata if k != "source")
    lines.append("fields: task_id, prompt, tests, entry_point, setup, timeout_s"
                 + (f"; metadata: {', '.join(sorted(fields))}" if fields else ""))
    n_tests = [len(t.tests) for t in tasks]
    lines.append(f"tests per task: min {min(n_tests)}, mean {sum(n_tests) / len(n_tests):.1f}, max {max(n_tests)}")
    with_solution = sum(1 for t in tasks if t.solution)
    lines.append(f"with reference solution: {with_solution}")
    code = [t for t in tasks if t.kind == "code"]  # answer tasks have a reference answer instead of tests
    if len(code) < len(tasks):
        lines.append(f"answer tasks: {len(tasks) - len(code)}")
    warnings = [f"task {t.task_id}: no tests" for t in code if not t.tests
                and not t.metadata.get("base_input")]
    warnings += [f"task {t.task_id}: no entry point" for t in code if not t.entry_point][:5]
    for t in tasks[:limit]:
        lines.append(f"--- {t.task_id} (entry point: {t.entry_point})")
        lines.append(t.prompt.rstrip()[:600])
        for test in t.tests[:3]:
            lines.append(f"  test: {test.strip()[:200]}")
        if t.kind != "code":
            lines.append(f"  answer: {t.metadata.get('answer')}" + "".join(
                f" | {a}" for a in t.metadata.get("accepted") or []))
    lines += [f"warning: {w}" for w in warnings] or ["warnings: none"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from codechat.tasks import load_tasks_with_format
    from codechat.tasks.builtin import builtin_names, load_builtin

    if args.action == "list":
        for name in builtin_names():
            print(f"builtin:{name}  ({len(load_builtin('builtin:' + name))} tasks)")
        return 0
    if args.file.startswith("builtin"):
        tasks, fmt = load_builtin(args.file), "codechat (built-in)"
    else:
        tasks, fmt = load_tasks_with_format(args.file, args.format)
    print(summarize(tasks, fmt, args.limit))
    return 0
