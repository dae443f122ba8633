"""Throughput of the sandboxed verifier vs the HumanEval harness's way (one multiprocessing.Process per program).

    PYTHONPATH=. python bench/verify_throughput.py [--n 500] [--workers 2]

Both sides verify the same N small (task, completion) pairs, half correct, half wrong, with the same number of
parallel workers. The baseline copies human-eval's `check_correctness`: a `multiprocessing.Manager` list for the
result and a `multiprocessing.Process` per program, joined with a timeout, run from a thread pool; it has none
of our protections. Ours runs with every protection on (namespaces, own uid, rlimits, judge process).
Prints programs/s for both, then one JSON line: {"ours_per_s", "baseline_per_s", "ratio"}.

`--parent-mb M` first allocates and touches M MiB in this process, like a trainer holding a model on the
host: the baseline forks this process for every program (and for its Manager), our zygotes do not.
The default (0) is the small-parent case, the least favourable to us.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from codechat.config import VerifierConfig
from codechat.tasks import Task
from codechat.verifier.verify import Verifier

TASKS = [
    ("add", "def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a - b\n",
     ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]),
    ("rev", "def rev(s):\n    return s[::-1]\n", "def rev(s):\n    return s\n",
     ["assert rev('abc') == 'cba'", "assert rev('') == ''", "assert rev('ab') == 'ba'"]),
    ("evens", "def evens(xs):\n    return [x for x in xs if x % 2 == 0]\n", "def evens(xs):\n    return xs\n",
     ["assert evens([1, 2, 3, 4]) == [2, 4]", "assert evens([]) == []", "assert evens([5]) == []"]),
    ("fact", "def fact(n):\n    return 1 if n < 2 else n * fact(n - 1)\n", "def fact(n):\n    return n\n",
     ["assert fact(5) == 120", "assert fact(0) == 1", "assert fact(3) == 6"]),
]


def make_pairs(n: int) -> list[tuple[Task, str]]:
    pairs = []
    for i in range(n):
        name, good, bad, tests = TASKS[i % len(TASKS)]
        task = Task(name, f"Write {name}.", tests, name)
        pairs.append((task, good if i % 2 == 0 else bad))
    return pairs


# --- baseline: human-eval/execution.py check_correctness, minus reliability_guard (it would break the parent)
def _unsafe_execute(program: str, result) -> None:
    try:
        exec(program, {})
        result.append("passed")
    except BaseException as e:  # noqa: BLE001
        result.append(f"failed: {e}")


def baseline_check(program: str, timeout: float = 3.0) -> bool:
    manager = multiprocessing.Manager()
    result = manager.list()
    p = multiprocessing.Process(target=_unsafe_execute, args=(program, result))
    p.start()
    p.join(timeout=timeout + 1)
    if p.is_alive():
        p.kill()
    ok = bool(result) and result[0] == "passed"
    manager.shutdown()
    return ok


def run_baseline(pairs, workers: int) -> tuple[float, int]:
    programs = [c + "\n" + "\n".join(t.tests) + "\n" for t, c in pairs]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        passed = sum(ex.map(baseline_check, programs))
    return len(pairs) / (time.perf_counter() - t0), passed


def run_ours(pairs, workers: int) -> tuple[float, int]:
    with Verifier(VerifierConfig(workers=workers, timeout_s=3)) as v:
        v.verify_many(pairs[: 2 * workers])  # start the zygotes outside the timed part (they are long-lived)
        t0 = time.perf_counter()
        verdicts = v.verify_many(pairs)
        per_s = len(pairs) / (time.perf_counter() - t0)
    return per_s, sum(x.passed for x in verdicts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500, help="number of (task, completion) pairs (default 500)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="parallel workers for both sides")
    ap.add_argument("--parent-mb", type=int, default=0, help="memory this process holds, like a trainer (MiB)")
    a = ap.parse_args()
    ballast = bytearray(a.parent_mb << 20)
    for i in range(0, len(ballast), 4096):  # touch every page, as live model weights would be
        ballast[i] = 1
    multiprocessing.set_start_method("fork", force=True)  # what human-eval gets on Linux
    pairs = make_pairs(a.n)
    ours, ours_pass = run_ours(pairs, a.workers)
    print(f"ours:     {ours:8.1f} programs/s  ({ours_pass}/{a.n} passed)")
    base, base_pass = run_baseline(pairs, a.workers)
    print(f"baseline: {base:8.1f} programs/s  ({base_pass}/{a.n} passed)")
    if ours_pass != base_pass:
        print(f"warning: pass counts differ ({ours_pass} vs {base_pass})", file=sys.stderr)
    print(json.dumps({"ours_per_s": round(ours, 1), "baseline_per_s": round(base, 1), "ratio": round(ours / base, 2),
                      "n": a.n, "workers": a.workers, "parent_mb": a.parent_mb}))


if __name__ == "__main__":
    main()
