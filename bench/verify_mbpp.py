"""MBPP agreement: reference solutions through the verifier vs a plain exec of code + tests, every task.

    PYTHONPATH=. python bench/verify_mbpp.py [--sets mbpp,sanitized,originfmt] [--timeout 20] [--workers 2]

The plain side runs each program in a fresh `python` subprocess (as shared/data/check_references.py does:
temp cwd, same timeout), so the two only differ where the verifier's semantics differ. Prints, per set,
the pass counts of both, every task where they differ (with both outcomes), and the pass count of the wrong
completion `def f(*a, **k): return None` (must be 0). Ends with one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from codechat.config import VerifierConfig
from codechat.tasks import load_tasks
from codechat.verifier.verify import Verifier

DATA = Path(os.environ.get("CODECHAT_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data") / "mbpp"
SETS = {"mbpp": "mbpp.jsonl", "sanitized": "sanitized-mbpp.json", "originfmt": "MbppPlus-OriginFmt-v0.2.0.jsonl.gz"}


def plain(program: str, timeout: float) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory(prefix="plain_") as d:
        path = os.path.join(d, "prog.py")
        Path(path).write_text(program)
        try:
            p = subprocess.run([sys.executable, path], cwd=d, capture_output=True, timeout=timeout,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return False, "timeout"
        err = p.stderr.decode(errors="replace").strip().splitlines()
        return p.returncode == 0, (err[-1][:120] if err and p.returncode else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="mbpp,sanitized,originfmt")
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    summary = {}
    with Verifier(VerifierConfig(workers=a.workers, timeout_s=a.timeout)) as v:
        for name in a.sets.split(","):
            tasks = load_tasks(DATA / SETS[name])
            t0 = time.time()
            ours = v.verify_many([(t, t.solution) for t in tasks])
            t_ours = time.time() - t0
            wrong = v.verify_many([(t, f"def {t.entry_point}(*a, **k):\n    return None\n") for t in tasks])
            programs = [t.solution + "\n" + t.setup + "\n" + "\n".join(t.tests) + "\n" for t in tasks]
            with ThreadPoolExecutor(a.workers) as ex:
                theirs = list(ex.map(lambda p: plain(p, a.timeout), programs))
            differ = [(t.task_id, o.status, o.message[:80], th[1]) for t, o, th in zip(tasks, ours, theirs)
                      if o.passed != th[0]]
            n_ours, n_plain = sum(o.passed for o in ours), sum(th[0] for th in theirs)
            print(f"{name}: verifier {n_ours}/{len(tasks)} ({t_ours:.1f}s), plain exec {n_plain}/{len(tasks)}, "
                  f"wrong completion passes {sum(w.passed for w in wrong)}")
            for d in differ:
                print(f"  differs: task {d[0]}: verifier {d[1]} {d[2]!r}; plain {'pass' if not d[3] else d[3]!r}")
            summary[name] = {"tasks": len(tasks), "verifier": n_ours, "plain": n_plain,
                             "differ": [d[0] for d in differ], "wrong_passes": sum(w.passed for w in wrong)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
