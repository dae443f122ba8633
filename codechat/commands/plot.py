"""`codechat plot RUN_DIR`: a run's curves, one metric per panel, stages shaded, to RUN_DIR/curves.png.

Imports of the rest of codechat sit inside the functions: at the top they would load on every `codechat --help`
(bench/cli_startup.py).
"""
from __future__ import annotations

import argparse

HELP = "plot a run's curves (reward, pass rate, eval, KL, entropy, lengths) to a PNG"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory holding metrics.jsonl")
    p.add_argument("--out", help="output PNG (default RUN_DIR/curves.png)")


def run(args: argparse.Namespace) -> int:
    from codechat.plotting import plot_run

    print(plot_run(args.run_dir, args.out))
    return 0
