"""`codechat verify` through the CLI (start-up included) vs a process-per-program harness, on MBPP.

    PYTHONPATH=. python bench/cli_verify.py [--n 2000] [--workers 2] [--timeout 5]

Programs: the MBPP tasks of shared/data/mbpp/mbpp.jsonl, in turn the reference solution and a wrong completion
(the reference with its first `return` answering None), N in all. Ours: one `python -m codechat verify --tasks
mbpp.jsonl --completions C.jsonl --out R.jsonl --workers W --quiet` subprocess, timed from its start to its
exit, every protection on. Baseline: HumanEval's `check_correctness` done with fresh processes: for each program,
a file of code + tests run by a new `python` in a temporary directory with the timeout, W at a time from a
thread pool; it has none of our protections. Both run in the same run, ours first. Prints both times and pass
counts, then one JSON line: {"ours_s", "baseline_s", "ratio", "ours_passed", "baseline_passed", "n", "workers"}.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codechat.tasks import load_tasks  # noqa: E402
from verify_mbpp import plain  # noqa: E402 - the same fresh-python-per-program harness (bench/ is on the path)

SHARED = Path(os.environ.get("CODECHAT_SHARED_DATA") or ROOT.parent / "shared" / "data")
MBPP = SHARED / "mbpp" / "mbpp.jsonl"


def wrong(solution: str) -> str:
    """The reference with its first return giving None: still runs, fails the tests."""
    out, n = re.subn(r"\breturn\b[^\n]*", "return None", solution, count=1)
    return out if n else solution + "\nraise ValueError('wrong')\n"


def make_programs(n: int) -> list[tuple]:
    tasks = load_tasks(MBPP)
    rows = []
    for i in range(n):
        t = tasks[(i // 2) % len(tasks)]
        rows.append((t, t.solution if i % 2 == 0 else wrong(t.solution), f"s{i}"))
    return rows


def run_ours(rows, workers: int, timeout: float, d: str) -> tuple[float, int]:
    comp, out = os.path.join(d, "completions.jsonl"), os.path.join(d, "verdicts.jsonl")
    with open(comp, "w") as f:
        for t, c, sid in rows:
            f.write(json.dumps({"task_id": t.task_id, "completion": c, "sample_id": sid}) + "\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "codechat", "verify", "--tasks", str(MBPP), "--completions", comp,
                    "--out", out, "--workers", str(workers), "--timeout", str(timeout), "--quiet"],
                   check=True, env=env, cwd=d, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    with open(out) as f:
        passed = sum(bool(json.loads(line).get("passed")) for line in f)
    return wall, passed


def check_correctness(program: str, timeout: float) -> bool:
    return plain(program, timeout)[0]


def run_baseline(rows, workers: int, timeout: float) -> tuple[float, int]:
    programs = [c + "\n" + t.setup + "\n" + "\n".join(t.tests) + "\n" for t, c, _ in rows]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        passed = sum(ex.map(lambda p: check_correctness(p, timeout), programs))
    return time.perf_counter() - t0, passed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="programs (default 2000)")
    ap.add_argument("--workers", type=int, default=2, help="parallel workers for both sides (default 2)")
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds per program, both sides (default 5)")
    ap.add_argument("--skip-baseline", action="store_true", help="time only `codechat verify`")
    a = ap.parse_args()
    rows = make_programs(a.n)
    with tempfile.TemporaryDirectory(prefix="cli_verify_") as d:
        ours, ours_pass = run_ours(rows, a.workers, a.timeout, d)
    print(f"codechat verify: {ours:7.2f} s  {a.n / ours:7.1f} programs/s  ({ours_pass}/{a.n} passed)")
    res = {"ours_s": round(ours, 2), "ours_passed": ours_pass, "n": a.n, "workers": a.workers}
    if not a.skip_baseline:
        base, base_pass = run_baseline(rows, a.workers, a.timeout)
        print(f"per-process:     {base:7.2f} s  {a.n / base:7.1f} programs/s  ({base_pass}/{a.n} passed)")
        res.update(baseline_s=round(base, 2), baseline_passed=base_pass, ratio=round(base / ours, 2))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
