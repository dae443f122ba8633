"""verl's own SandboxFusion client (`check_correctness`) against `codechat serve`, case by case.

    python bench/serve_verl.py                        # needs verl installed (pip install verl)
    python bench/serve_verl.py --verl-src DIR         # or an unpacked verl wheel/checkout: only its
                                                      # utils/reward_score/sandbox_fusion/utils.py is loaded
                                                      # (stdlib + requests), not the verl package and its deps

Runs right, wrong, runtime-error, timeout, memory and syntax-error programs through
`verl.utils.reward_score.sandbox_fusion.utils.check_correctness(url, {"inputs", "outputs"}, code)` and checks each
per-case result against what SandboxFusion's contract gives
(True / False / -2 runtime error / -3 timeout). Ends with one
JSON line: {"cases": {name: [results]}, "as_sandboxfusion": bool, "seconds"}.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
REL = "verl/utils/reward_score/sandbox_fusion/utils.py"
IO = {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}
CASES = {  # name: (program, what SandboxFusion's check_correctness returns per case)
    "right": ("a, b = map(int, input().split())\nprint(a + b)", [True, True]),
    "wrong": ("a, b = map(int, input().split())\nprint(a * b)", [False, False]),
    "runtime_error": ("a, b = map(int, input().split())\nprint(a / 0)", [-2, -2]),
    "timeout": ("while True:\n    pass", [-3, -3]),
    "memory": ("x = bytearray(1 << 34)\nprint(3)", [-2, -2]),
    "syntax_error": ("def f(:\n  pass", [-2, -2]),
}


def load_client(src: str | None):
    if src is None:
        spec = importlib.util.find_spec("verl")
        if spec is None:
            sys.exit("verl is not installed: pip install verl, or pass --verl-src DIR (an unpacked verl wheel)")
        path = Path(spec.origin).parents[1] / REL
    else:
        path = Path(src) / REL
    if not path.is_file():
        sys.exit(f"{path}: not found (expected verl's sandbox_fusion client there)")
    spec = importlib.util.spec_from_file_location("verl_sandbox_fusion_utils", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--verl-src", default=None)
    ap.add_argument("--timeout", type=int, default=2, help="verl's per-case timeout (run_timeout)")
    a = ap.parse_args()
    client = load_client(a.verl_src)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "codechat", "serve", "--port", "0", "--workers", "2"], env=env,
                            stdout=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    try:
        url = "http://127.0.0.1:" + re.search(r":(\d+)\s*$", proc.stdout.readline()).group(1)
        for _ in range(600):
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        got = {}
        for name, (code, want) in CASES.items():
            results, _ = client.check_correctness(url + "/run_code", IO, code, timeout=a.timeout,
                                                  memory_limit_mb=256)
            got[name] = results
            print(f"{name:<14} {results}  (SandboxFusion: {want})", file=sys.stderr)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    same = all(got[n] == w for n, (_, w) in CASES.items())
    print(json.dumps({"cases": got, "as_sandboxfusion": same, "seconds": round(time.monotonic() - t0, 2)}))


if __name__ == "__main__":
    main()
