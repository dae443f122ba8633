"""Start-up time of the CLI: `codechat --help`, and `codechat CMD --help` for every command.

    python bench/cli_startup.py [--reps 3]

The dispatcher (codechat/cli.py) imports only the chosen command's module, and command modules import what
they need at the top. So `codechat --help` loads no command module, and `codechat CMD --help` loads what
`codechat CMD` loads. Measured against the baseline of a dispatcher that imports every command module to build
its parser (the way it worked before the registry held the help lines), in the same run and alternating.
Each figure is the median wall time of --reps fresh processes. Ends with one JSON line:
{"help_s", "all_modules_s", "ratio" (all_modules / help), "command_help_s": {CMD: s}}.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codechat.commands import COMMANDS  # noqa: E402  (light: the registry only)

ap = argparse.ArgumentParser()
ap.add_argument("--reps", type=int, default=3)
args = ap.parse_args()


def wall(code: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, check=True)
    return time.perf_counter() - t


def cli(argv: list[str], pre: str = "") -> str:
    return pre + f"import contextlib\nfrom codechat.cli import main\nwith contextlib.suppress(SystemExit):\n" \
                 f"    main({argv!r})\n"


every = "".join(f"import {c.module}\n" for c in COMMANDS.values())
runs: dict[str, list[float]] = {"help": [], "all_modules": []}
runs |= {name: [] for name in COMMANDS}
for _ in range(args.reps):  # alternating, so a change in machine load hits every figure alike
    runs["help"].append(wall(cli(["--help"])))
    runs["all_modules"].append(wall(cli(["--help"], every)))
    for name in COMMANDS:
        runs[name].append(wall(cli([name, "--help"])))
med = {k: statistics.median(v) for k, v in runs.items()}
for k, v in runs.items():
    label = k if k in ("help", "all_modules") else f"{k} --help"
    print(f"{label:16s} median {med[k]:.2f} s  ({', '.join(f'{x:.2f}' for x in v)})")
print(json.dumps({"help_s": round(med["help"], 3), "all_modules_s": round(med["all_modules"], 3),
                  "ratio": round(med["all_modules"] / med["help"], 2),
                  "command_help_s": {name: round(med[name], 3) for name in COMMANDS}}))
