"""Throughput of stdin/stdout judging: codechat's sandbox vs a plain `subprocess.run` per test case.

    PYTHONPATH=. python bench/verify_stdio.py [--problems 200] [--cases 5] [--workers 2]

Generates `--problems` stdin/stdout problems (five families: sum, max, reverse words, sort, count) with
`--cases` random tests each, and one program per problem: half right, a quarter wrong on some inputs, a
quarter crashing after printing the right answer. Both sides judge every (program, test) with the same rule
(lines compared after trimming trailing whitespace; a nonzero exit fails), with the same number of parallel
workers. The baseline is `subprocess.run([python, "-c", program], input=..., capture_output=True, timeout=...)`
per test case, with no isolation at all; ours runs every protection (namespaces, own uid, rlimits, judge
process, one fresh forked process per test). Every problem's verdict (pass, and tests passed) must agree.
Prints programs/s (one program = all its cases) for both, then one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from codechat.config import VerifierConfig
from codechat.sandbox.stdio_judge import outputs_match
from codechat.tasks import Task
from codechat.tasks.stdio import IOTest, StdioSpec
from codechat.verifier.verify import Verifier

FAMILIES = {  # name: (input maker, reference answer, right program, wrong program)
    "sum": (lambda r: " ".join(str(r.randint(-99, 99)) for _ in range(r.randint(1, 8))),
            lambda s: str(sum(map(int, s.split()))),
            "print(sum(map(int, input().split())))",
            "xs = list(map(int, input().split()))\nprint(sum(xs) if len(xs) % 3 else sum(xs[1:]))"),
    "max": (lambda r: " ".join(str(r.randint(0, 999)) for _ in range(r.randint(1, 8))),
            lambda s: str(max(map(int, s.split()))),
            "import sys\nprint(max(map(int, sys.stdin.read().split())))",
            "xs = input().split()\nprint(max(xs))"),  # string max: wrong on some inputs
    "rev": (lambda r: " ".join(r.choice(["ab", "cd", "ef", "gh", "x"]) for _ in range(r.randint(1, 6))),
            lambda s: " ".join(s.split()[::-1]),
            "print(' '.join(input().split()[::-1]))",
            "w = input().split()\nprint(' '.join(w[::-1] if len(w) > 2 else w))"),
    "sort": (lambda r: " ".join(str(r.randint(0, 50)) for _ in range(r.randint(1, 8))),
             lambda s: " ".join(map(str, sorted(map(int, s.split())))),
             "print(*sorted(map(int, open(0).read().split())))",
             "print(*sorted(input().split()))"),  # lexicographic: wrong on some inputs
    "count": (lambda r: " ".join(r.choice("abc") for _ in range(r.randint(1, 9))),
              lambda s: str(s.split().count("a")),
              "print(input().split().count('a'))",
              "s = input()\nprint(s.count('a') + (len(s) > 9))"),
}


def make_problems(n: int, cases: int, seed: int = 0) -> list[tuple[Task, str]]:
    r = random.Random(seed)
    out = []
    names = sorted(FAMILIES)
    for i in range(n):
        name = names[i % len(names)]
        make, answer, right, wrong = FAMILIES[name]
        inputs = [make(r) for _ in range(cases)]
        tests = [IOTest(s + "\n", answer(s) + "\n") for s in inputs]
        kind = i % 4
        program = right if kind < 2 else wrong if kind == 2 else right + "\nraise RuntimeError('after the answer')"
        out.append((Task(f"{name}-{i}", name, [], stdio=StdioSpec(tests)), program))
    return out


def baseline_case(program: str, test: IOTest, timeout: float) -> bool:
    try:
        p = subprocess.run([sys.executable, "-c", program], input=test.input.encode(), capture_output=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return p.returncode == 0 and outputs_match(p.stdout.decode(errors="replace"), test.output)


def run_baseline(problems, workers: int, timeout: float) -> tuple[float, list[int]]:
    jobs = [(prog, t) for task, prog in problems for t in task.stdio.tests]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        ok = list(ex.map(lambda j: baseline_case(j[0], j[1], timeout), jobs))
    per_s = len(problems) / (time.perf_counter() - t0)
    counts, k = [], 0
    for task, _ in problems:
        n = len(task.stdio.tests)
        counts.append(sum(ok[k:k + n]))
        k += n
    return per_s, counts


def run_ours(problems, workers: int, timeout: float) -> tuple[float, list[int]]:
    with Verifier(VerifierConfig(workers=workers, timeout_s=timeout)) as v:
        v.verify_many(problems[: 2 * workers])  # start the zygotes outside the timed part (they are long-lived)
        t0 = time.perf_counter()
        verdicts = v.verify_many(problems)
        per_s = len(problems) / (time.perf_counter() - t0)
    return per_s, [x.tests_passed for x in verdicts]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=200, help="generated problems (default 200)")
    ap.add_argument("--cases", type=int, default=5, help="test cases per problem (default 5)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="parallel workers for both sides")
    ap.add_argument("--timeout", type=float, default=5.0, help="per-test time limit, seconds")
    a = ap.parse_args()
    problems = make_problems(a.problems, a.cases)
    ours, ours_counts = run_ours(problems, a.workers, a.timeout)
    print(f"ours:     {ours:8.1f} programs/s  ({ours * a.cases:.0f} test runs/s)")
    base, base_counts = run_baseline(problems, a.workers, a.timeout)
    print(f"baseline: {base:8.1f} programs/s  ({base * a.cases:.0f} test runs/s)")
    agree = sum(x == y for x, y in zip(ours_counts, base_counts))
    passed = sum(c == a.cases for c in ours_counts)
    if agree != len(problems):
        print(f"warning: {len(problems) - agree} verdicts differ", file=sys.stderr)
    print(json.dumps({"ours_per_s": round(ours, 1), "baseline_per_s": round(base, 1), "ratio": round(ours / base, 2),
                      "problems": a.problems, "cases": a.cases, "workers": a.workers, "passed": passed,
                      "verdicts_agree": agree, "all_agree": agree == len(problems)}))
    if agree != len(problems):
        sys.exit(1)


if __name__ == "__main__":
    main()
