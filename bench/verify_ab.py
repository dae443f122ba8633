"""The sandboxed verifier's throughput and CPU per program on two source trees, alternated in one run (ABBA).

    python bench/verify_ab.py --baseline-src /path/to/other/checkout [--n 400] [--rounds 4] [--workers 2]

Each side runs `bench/verify_throughput.py`'s own side (`run_ours`: N small tasks, half right, half wrong) in a
fresh interpreter with that tree first on PYTHONPATH: this tree, and `--baseline-src` (e.g. a checkout of the
main branch, read-only). Rounds alternate the order (A B, B A, ...) so load drift on a shared machine falls on
both. Measured per run: programs/s and CPU ms per program (every process of the verifier's pools, reaped:
zygotes, supervisors, judges, programs). Ends with one JSON line: {"new": {...}, "baseline": {...}, "cpu_ratio",
"per_s_ratio", "runs"}: medians per side, ratios new / baseline.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CHILD = r'''
import json, resource, sys
sys.path.insert(0, sys.argv[3])
from verify_throughput import make_pairs, run_ours
pairs = make_pairs(int(sys.argv[1]))
c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
per_s, passed = run_ours(pairs, int(sys.argv[2]))
c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) / (len(pairs) + 2 * int(sys.argv[2])) * 1000
print(json.dumps({"per_s": round(per_s, 1), "cpu_ms": round(cpu, 2), "passed": passed}))
'''


def run(src: Path, n: int, workers: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(n), str(workers), str(HERE / "bench")], cwd=src,
                         env=env, capture_output=True, text=True, check=True)
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    rec["load"] = float(open("/proc/loadavg").read().split()[0])
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-src", required=True, help="the other source tree (a checkout of main)")
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    sides = {"new": HERE, "baseline": Path(a.baseline_src).resolve()}
    runs: dict[str, list[dict]] = {"new": [], "baseline": []}
    for r in range(a.rounds):
        for side in (["baseline", "new"] if r % 2 == 0 else ["new", "baseline"]):
            rec = run(sides[side], a.n, a.workers)
            runs[side].append(rec)
            print(side, rec, file=sys.stderr, flush=True)
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("per_s", "cpu_ms")} for k, v in runs.items()}
    print(json.dumps({**med, "cpu_ratio": round(med["new"]["cpu_ms"] / med["baseline"]["cpu_ms"], 2),
                      "per_s_ratio": round(med["new"]["per_s"] / med["baseline"]["per_s"], 2), "runs": runs}))


if __name__ == "__main__":
    main()
