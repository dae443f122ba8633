"""CPU time per program, ours vs the baseline: what an idle machine's throughput ratio would be.

    PYTHONPATH=. python bench/verify_cpu.py [--n 500] [--workers 2]

Wall-clock programs/s are noisy on a shared machine; CPU seconds much less so. Ours: this process (all threads)
+ every zygote and each of its live descendants (supervisor, judge, spare), each with its reaped children (the
programs). Baseline: this process + all reaped children (the Manager and Process per program). Prints ms of CPU
per program for each side (the user/sys split is tick-sampled: rough) and page faults per program for ours
(deterministic: the best signal for fork/copy-on-write work), then one JSON line with the CPU ratio.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from verify_throughput import make_pairs, run_baseline  # noqa: E402

from codechat.config import VerifierConfig  # noqa: E402
from codechat.verifier.verify import Verifier  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[float, ...]:
    """utime, stime, cutime, cstime (s), minflt + cminflt (page faults: deterministic, unlike CPU time)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return tuple(int(x) / HZ for x in fields[11:15]) + (int(fields[7]) + int(fields[8]),)


def _kids(pid: int) -> list[int]:
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            out += [int(p) for p in f.read().split()]
    return out


def zygote_tree_cpu(pids: list[int]) -> tuple[float, float, int]:
    """(user, sys, faults) of the zygotes and every live descendant (supervisor, judge, spare), each with its
    reaped children (the candidates)."""
    u = s = 0.0
    f = 0
    todo = list(pids)
    while todo:
        p = todo.pop()
        try:
            pu, ps, cu, cs, pf = _stat(p)
            todo += _kids(p)
        except OSError:
            continue
        u, s, f = u + pu + cu, s + ps + cs, f + pf
    return u, s, f


def cpu_ours(pairs, workers: int) -> dict:
    with Verifier(VerifierConfig(workers=workers, timeout_s=3)) as v:
        v.verify_many(pairs[: 2 * workers])
        zpids = [z.proc.pid for z in v.pool._all]
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t_self0, z0, w0 = os.times(), zygote_tree_cpu(zpids), time.perf_counter()
        verdicts = v.verify_many(pairs)
        wall = time.perf_counter() - w0
        t_self1, z1 = os.times(), zygote_tree_cpu(zpids)
        f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    n = len(pairs)
    pu, ps = t_self1.user - t_self0.user, t_self1.system - t_self0.system
    zu, zs = z1[0] - z0[0], z1[1] - z0[1]
    return {"passed": sum(x.passed for x in verdicts), "per_s": n / wall,
            "parent_ms": 1e3 * (pu + ps) / n, "sandbox_user_ms": 1e3 * zu / n, "sandbox_sys_ms": 1e3 * zs / n,
            "total_ms": 1e3 * (pu + ps + zu + zs) / n, "parent_faults": (f1 - f0) / n,
            "sandbox_faults": (z1[2] - z0[2]) / n}


def cpu_baseline(pairs, workers: int) -> dict:
    r0, c0, w0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    per_s, passed = run_baseline(pairs, workers)
    r1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    n = len(pairs)
    pu, ps = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
    cu, cs = c1.ru_utime - c0.ru_utime, c1.ru_stime - c0.ru_stime
    faults = r1.ru_minflt - r0.ru_minflt + c1.ru_minflt - c0.ru_minflt
    return {"faults": faults / n, "passed": passed, "per_s": per_s, "parent_ms": 1e3 * (pu + ps) / n, "children_user_ms": 1e3 * cu / n,
            "children_sys_ms": 1e3 * cs / n, "total_ms": 1e3 * (pu + ps + cu + cs) / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--skip-baseline", action="store_true")
    a = ap.parse_args()
    multiprocessing.set_start_method("fork", force=True)
    pairs = make_pairs(a.n)
    ours = cpu_ours(pairs, a.workers)
    print("ours:    ", {k: round(v, 3) for k, v in ours.items()})
    out = {"ours_cpu_ms": round(ours["total_ms"], 3), "ours_faults": round(ours["sandbox_faults"] + ours["parent_faults"])}
    if not a.skip_baseline:
        base = cpu_baseline(pairs, a.workers)
        print("baseline:", {k: round(v, 3) for k, v in base.items()})
        out.update(baseline_cpu_ms=round(base["total_ms"], 3), cpu_ratio=round(base["total_ms"] / ours["total_ms"], 2))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
