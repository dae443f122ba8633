"""What a network namespace of its own, with loopback up, costs a sandboxed process (needs root).

    sudo .venv/bin/python bench/netns_cost.py [--n 300] [--rounds 4]

Three ways to start and end one process, each N times per round, rounds alternating the order (ABBA) so load
drift on a shared machine falls on all: `fork` (fork, exit, wait: the floor), `netns` (the child also unshares a
network namespace, as every repository command does) and `netns_lo` (and brings its loopback up:
`isolation.loopback_up`, what a repository command does now). Measured per process: wall microseconds in the
parent, and busy CPU microseconds of the whole machine (/proc/stat: includes the kernel's deferred teardown of
each namespace, which runs in kernel workers, not in the process; and includes other load, so compare sides of
one run only). Ends with one JSON line: medians per way, and the extra cost of `netns_lo` over `fork` and over
`netns`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from codechat.sandbox import isolation


def busy_ticks() -> int:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # all but idle and iowait


def child(way: str) -> None:
    if way != "fork":
        if isolation._libc.unshare(isolation.CLONE_NEWNET) != 0:
            os._exit(1)
        if way == "netns_lo":
            isolation.loopback_up()


def one_batch(way: str, n: int) -> dict:
    hz = os.sysconf("SC_CLK_TCK")
    t0, c0 = time.perf_counter(), busy_ticks()
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                child(way)
            except BaseException:  # noqa: BLE001 - the child reports by its exit status only
                code = 1
            os._exit(code)
        if os.waitpid(pid, 0)[1] != 0:
            raise SystemExit(f"{way}: a child failed (root needed)")
    time.sleep(0.5)  # let the deferred namespace teardown of this batch run before the CPU count closes
    c1 = busy_ticks()
    wall = time.perf_counter() - t0 - 0.5
    return {"wall_us": round(wall / n * 1e6, 1), "cpu_us": round((c1 - c0) / hz / n * 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("netns_cost: needs root (a network namespace per process)")
    ways = ["fork", "netns", "netns_lo"]
    runs: dict[str, list[dict]] = {w: [] for w in ways}
    for r in range(a.rounds):
        for way in (ways if r % 2 == 0 else ways[::-1]):
            rec = one_batch(way, a.n)
            runs[way].append(rec)
            print(way, rec, file=sys.stderr, flush=True)
    med = {w: {m: statistics.median(x[m] for x in v) for m in ("wall_us", "cpu_us")} for w, v in runs.items()}
    load = float(open("/proc/loadavg").read().split()[0])
    extra = {f"lo_over_{base}": {m: round(med["netns_lo"][m] - med[base][m], 1) for m in ("wall_us", "cpu_us")}
             for base in ("fork", "netns")}
    print(json.dumps({**med, **extra, "n": a.n, "rounds": a.rounds, "load": load}))


if __name__ == "__main__":
    main()
