"""Soak: 10,000 mixed programs (honest, wrong, hostile) through one Verifier; nothing may be left behind.

    PYTHONPATH=. python bench/verify_soak.py [--n 10000] [--workers 2] [--timeout 0.5]

Checks afterwards: no child processes of ours, no process running under a sandbox uid, the same number of
open fds as before, no new /tmp/codechat-* entries; also that every honest program passed and no other did.
Prints one JSON line; exits 1 if anything was left behind or a verdict was wrong.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from collections import Counter

from codechat.config import VerifierConfig
from codechat.tasks import Task
from codechat.verifier.verify import Verifier

OURS = "/tmp/codechat-[0-9]*-" + "[0-9a-f]" * 12  # procs.Spare temp dirs (only on the host without a mount namespace)
T = Task("f", "", ["assert f(2) == 4", "assert f(0) == 0", "assert f(-3) == -6"], "f")
GOOD = "def f(x):\n    return 2 * x\n"
MIX = [  # (program, should pass)
    (GOOD, True),
    ("def f(x):\n    return x + 2\n", False),
    ("import os\nos._exit(0)\n", False),
    ("import sys\ndef f(x):\n    sys.exit(0)\n", False),
    ("class A:\n    def __eq__(s, o):\n        return True\ndef f(x):\n    return A()\n", False),
    ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n" + GOOD, True),
    ("open('/tmp/junk', 'w').write('x')\n" + GOOD, True),
    ("import threading, time\nthreading.Thread(target=lambda: time.sleep(60)).start()\n" + GOOD, True),
    ("def f(x):\n    print('x' * 200000)\n", False),
    ("def f(x):\n    return f(x)\n", False),
    ("def f(x):\n    return [0] * (1 << 31)\n", False),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", False),
    ("def f(x:\n", False),
]
LOOP = ("def f(x):\n    while True:\n        pass\n", False)  # every 100th: each one costs the full timeout


def children() -> set[int]:
    pid = os.getpid()
    return {int(p) for tid in os.listdir(f"/proc/{pid}/task")
            for p in open(f"/proc/{pid}/task/{tid}/children").read().split()}


def uid_processes(uids: set[int]) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                line = next(ln for ln in f if ln.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(line.split()[1]) in uids:
            found.append(int(pid))
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=float, default=0.5)
    a = ap.parse_args()
    kids0, fds0, tmp0 = children(), len(os.listdir("/proc/self/fd")), set(glob.glob(OURS))
    pairs = [LOOP if i % 100 == 99 else MIX[i % len(MIX)] for i in range(a.n)]
    t0 = time.time()
    with Verifier(VerifierConfig(workers=a.workers, timeout_s=a.timeout, memory_mb=512)) as v:
        uids: set[int] = set()
        wrong, statuses = 0, Counter()
        for (prog, should), verdict in zip(pairs, v.imap((T, p) for p, _ in pairs)):
            statuses[verdict.status] += 1
            wrong += verdict.passed != should
            uids |= set(v.pool.sandbox_uids())
    elapsed = time.time() - t0
    time.sleep(0.2)
    left = {"children": sorted(children() - kids0), "uid_processes": uid_processes(uids),
            "fds": len(os.listdir("/proc/self/fd")) - fds0, "tmp": sorted(set(glob.glob(OURS)) - tmp0)}
    clean = not left["children"] and not left["uid_processes"] and left["fds"] == 0 and not left["tmp"]
    print(json.dumps({"programs": a.n, "seconds": round(elapsed, 1), "per_s": round(a.n / elapsed, 1),
                      "wrong_verdicts": wrong, "statuses": dict(statuses), "left_behind": left, "clean": clean}))
    return 0 if clean and wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
