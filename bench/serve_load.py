"""Load on `codechat serve`: concurrent clients sending SandboxFusion-style single runs and /verify batches,
next to the in-process verifier on the same programs in the same run.

    python bench/serve_load.py                          # 16 and 64 clients, 10 s per phase, 2 workers
    python bench/serve_load.py --clients 16,64,256 --seconds 60 --max-pending 128
    python bench/serve_load.py --baseline-root /work/main    # that checkout's server vs this one's, ABBA

Workload: small function tasks (`add`/`mul`/`rev` with 3 asserts each); completions alternate right and wrong,
so every answer has a known verdict. A single run (/run_code) is one completion with its asserts appended,
run as a program (exit 0 when right, AssertionError when wrong); a batch (/verify) is --group completions
(tasks cycling). The server is started as a subprocess (`codechat serve --workers W`); each client is a thread
with its own keep-alive connection (httpx.Client) sending its next request as soon as the last is answered
(a 429/503 makes it wait Retry-After first). Baseline: `Verifier(workers=W)` behind the same `DedupVerifier` the
server puts in front of its pool (a request's repeated (task, completion) pairs run once on both sides; no
cache across requests on either: the server runs with --cache-size 0), its
`verify_many` on the same batches one after another, for the same time, before the server starts and again after
it stops (so the two never share the cores); the mean of the two. With --rounds R the in-process and server
/verify phases alternate R times (in-process, server, server, in-process, ...; the server stays up between).
Counted per phase: programs/s (answered programs: a batch counts its completions), p50/p99 request latency,
`wrong` (an answer that disagrees with the known verdict), `errors` (transport errors, timeouts, other HTTP
codes; `error_kinds` counts them by exception or HTTP code), `refused` (429/503 with Retry-After: overload
answered; the client waits Retry-After and resends).
With --baseline-root, both servers run side by side (idle while the other is measured) and each (mode, clients)
phase runs old, new, new, old; the JSON line then holds `new_vs_old` (new programs/s over old, per phase) and
the load average. Otherwise ends with one JSON line: {"inproc_programs_per_s", "phases": [{mode, clients,
programs_per_s, p50_s, p99_s, wrong, errors, refused}], "batch_vs_inproc": {clients: ratio}, "dedup"}.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codechat.config import VerifierConfig  # noqa: E402
from codechat.serve.metrics import percentile  # noqa: E402
from codechat.tasks.loaders import tasks_from_records  # noqa: E402
from codechat.verifier.dedup import DedupVerifier  # noqa: E402
from codechat.verifier.verify import Verifier  # noqa: E402

TASKS = [
    {"task_id": "add", "prompt": "", "entry_point": "f", "tests": ["assert f(1, 2) == 3", "assert f(0, 5) == 5",
                                                                   "assert f(-2, 2) == 0"]},
    {"task_id": "mul", "prompt": "", "entry_point": "f", "tests": ["assert f(2, 3) == 6", "assert f(0, 5) == 0",
                                                                   "assert f(-2, 2) == -4"]},
    {"task_id": "rev", "prompt": "", "entry_point": "f", "tests": ["assert f('ab', 1) == 'ba'",
                                                                   "assert f('', 1) == ''", "assert f('x', 1) == 'x'"]},
]
RIGHT = {"add": "def f(a, b):\n    return a + b\n", "mul": "def f(a, b):\n    return a * b\n",
         "rev": "def f(s, _):\n    return s[::-1]\n"}
WRONG = "def f(a, b):\n    return a\n"


def pair(i: int) -> tuple[str, str, bool]:
    """(task_id, completion, is right) of completion i: tasks cycle, right and wrong alternate."""
    t = TASKS[(i // 2) % len(TASKS)]["task_id"]
    return t, RIGHT[t] if i % 2 == 0 else WRONG, i % 2 == 0


def pairs(n: int) -> list[tuple[str, str, bool]]:
    return [pair(i) for i in range(n)]


def inproc(workers: int, group: int, seconds: float, dedup: bool) -> float:
    tasks = {t.task_id: t for t in tasks_from_records(TASKS)}
    with Verifier(VerifierConfig(workers=workers, dedup=False)) as inner:
        v = DedupVerifier(inner, cache_size=0, dedup=dedup)  # what the server runs each /verify through
        v.verify_many([(tasks["add"], RIGHT["add"])])  # warm
        done, t0 = 0, time.monotonic()
        i = 0
        while time.monotonic() - t0 < seconds:
            batch = pairs(group + i % 2)[i % 2:]  # the batches the clients send (the same size, varied)
            verdicts = v.verify_many([(tasks[t], c) for t, c, _ in batch])
            assert all(vd.passed == ok for vd, (_, _, ok) in zip(verdicts, batch))
            done += len(batch)
            i += 1
        return done / (time.monotonic() - t0)


def phase(url: str, mode: str, clients: int, seconds: float, group: int) -> dict:
    tests = {t["task_id"]: t["tests"] for t in TASKS}
    lat: list[float] = []
    counts = {"programs": 0, "wrong": 0, "errors": 0, "refused": 0}
    kinds: dict[str, int] = {}
    lock = threading.Lock()
    stop = [0.0]
    # timing starts once every client is built (each httpx.Client builds an SSL context: ~10 ms of CPU)
    ready = threading.Barrier(clients + 1, action=lambda: stop.__setitem__(0, time.monotonic() + seconds))

    def count(key: str, n: int = 1, kind: str | None = None) -> None:
        with lock:
            counts[key] += n
            if kind:
                kinds[kind] = kinds.get(kind, 0) + 1

    def one(k: int) -> None:
        n = k
        with httpx.Client(base_url=url, timeout=120) as client:
            ready.wait()
            while time.monotonic() < stop[0]:
                n += clients
                if mode == "run_code":
                    t, code, right = pair(n)
                    body = {"code": code + "\n" + "\n".join(tests[t]) + "\n", "stdin": "", "language": "python",
                            "run_timeout": 10, "memory_limit_MB": 512, "files": {}, "fetch_files": []}
                    expect = [right]
                else:
                    batch = pairs(group + n % 2)[n % 2:]
                    body = {"tasks": TASKS, "completions": [{"task_id": t, "completion": c} for t, c, _ in batch]}
                    expect = [ok for _, _, ok in batch]
                t0 = time.monotonic()
                try:
                    r = client.post("/" + mode, json=body)
                except httpx.HTTPError as e:
                    count("errors", kind=type(e).__name__)
                    continue
                if r.status_code in (429, 503):
                    count("refused")
                    time.sleep(float(r.headers.get("retry-after", "1")))
                    continue
                if r.status_code != 200:
                    count("errors", kind=str(r.status_code))
                    continue
                d = r.json()
                got = [d["status"] == "Success"] if mode == "run_code" else [v["passed"] for v in d["verdicts"]]
                with lock:
                    lat.append(time.monotonic() - t0)
                count("wrong", sum(g != e for g, e in zip(got, expect)) + abs(len(got) - len(expect)))
                count("programs", len(got))

    threads = [threading.Thread(target=one, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    ready.wait()
    t_start = time.monotonic()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t_start
    return {"mode": mode, "clients": clients, "programs_per_s": round(counts["programs"] / elapsed, 2),
            "p50_s": round(percentile(lat, 50), 4), "p99_s": round(percentile(lat, 99), 4), "requests": len(lat),
            **{k: counts[k] for k in ("wrong", "errors", "refused")}, "error_kinds": kinds}


def start_server(root: Path, workers: int, max_pending: int, extra: list[str] = ()) -> tuple[subprocess.Popen, str]:
    """`codechat serve` of the checkout at `root` (PYTHONPATH) with `extra` arguments, healthy; (process, URL)."""
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "codechat", "serve", "--port", "0", "--workers", str(workers),
                             "--max-pending", str(max_pending), *extra], env=env, stdout=subprocess.PIPE, text=True,
                            cwd=root)
    url = "http://127.0.0.1:" + re.search(r":(\d+)\s*$", proc.stdout.readline()).group(1)
    for _ in range(600):
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    return proc, url


def compare(a) -> None:
    """--baseline-root: the same phases on the baseline checkout's server and this one, alternated ABBA."""
    servers = {"old": start_server(Path(a.baseline_root), a.workers, a.max_pending),
               "new": start_server(ROOT, a.workers, a.max_pending)}
    phases, ratios = [], {}
    try:
        for mode in ("run_code", "verify"):
            for c in [int(x) for x in a.clients.split(",")]:
                got: dict[str, list[float]] = {"old": [], "new": []}
                for side in ("old", "new", "new", "old"):
                    p = phase(servers[side][1], mode, c, a.seconds, a.group)
                    p["side"] = side
                    phases.append(p)
                    got[side].append(p["programs_per_s"])
                    print(f"{side} {mode:>8} {c:>4} clients: {p['programs_per_s']:8.1f} programs/s  p50 "
                          f"{p['p50_s']:.3f}s  wrong {p['wrong']}  errors {p['errors']}", file=sys.stderr)
                ratios[f"{mode}/{c}"] = round(sum(got["new"]) / max(1e-9, sum(got["old"])), 3)
    finally:
        for proc, _ in servers.values():
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    print(json.dumps({"workers": a.workers, "seconds": a.seconds, "group": a.group, "load": os.getloadavg(),
                      "new_vs_old": ratios, "phases": phases}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", default="16,64", help="comma-separated client counts")
    ap.add_argument("--seconds", type=float, default=10.0, help="per phase (and for the in-process baseline)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--group", type=int, default=8, help="completions per /verify request")
    ap.add_argument("--max-pending", type=int, default=256, help="the server's --max-pending")
    ap.add_argument("--baseline-root", default="",
                    help="another checkout (e.g. main): compare its server with this one's, phases alternated")
    ap.add_argument("--rounds", type=int, default=1, help="in-process / server /verify alternations (ABBA)")
    a = ap.parse_args()
    if a.baseline_root:
        compare(a)
        return
    dedup = True  # as the server: repeated pairs within a request run once
    inprocs = [inproc(a.workers, a.group, a.seconds, dedup)]
    print(f"in-process verify_many: {inprocs[0]:.1f} programs/s", file=sys.stderr)
    proc, url = start_server(ROOT, a.workers, a.max_pending, ["--cache-size", "0"])
    try:
        phases = []
        clients = [int(x) for x in a.clients.split(",")]
        for mode in ("run_code", "verify"):
            for r in range(a.rounds if mode == "verify" else 1):
                if r:  # the in-process side between two server rounds: ABBA over the rounds
                    inprocs.append(inproc(a.workers, a.group, a.seconds, dedup))
                for c in clients:
                    p = phase(url, mode, c, a.seconds, a.group)
                    print(f"{mode:>8} {c:>4} clients: {p['programs_per_s']:8.1f} programs/s  p50 {p['p50_s']:.3f}s  "
                          f"p99 {p['p99_s']:.3f}s  wrong {p['wrong']}  errors {p['errors']}  refused {p['refused']}",
                          file=sys.stderr)
                    phases.append(p)
        metrics = httpx.get(url + "/metrics", timeout=10).json()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    inprocs.append(inproc(a.workers, a.group, a.seconds, dedup))  # again after: evens out load drift
    base = statistics.fmean(inprocs)
    print(f"in-process verify_many, each run: {[round(x, 1) for x in inprocs]} programs/s", file=sys.stderr)
    ratio = {c: round(statistics.fmean(p["programs_per_s"] for p in phases if p["mode"] == "verify"
                                       and p["clients"] == c) / base, 3) for c in clients}
    print(json.dumps({"workers": a.workers, "seconds": a.seconds, "group": a.group,
                      "dedup": "within a request, both sides",
                      "rounds": a.rounds, "inproc_programs_per_s": round(base, 2),
                      "inproc_runs": [round(x, 2) for x in inprocs], "phases": phases,
                      "batch_vs_inproc": ratio,
                      "server_programs": metrics["programs"], "server_responses": metrics["responses"]}))


if __name__ == "__main__":
    main()
