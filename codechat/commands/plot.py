"""`codechat plot RUN_DIR`: a run's curves, one metric per panel, stages shaded, to RUN_DIR/curves.png.
"""
from __future__ import annotations

import argparse

from codechat.io.plotting import plot_run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory holding metrics.jsonl")
    p.add_argument("--out", help="output PNG (default RUN_DIR/curves.png)")


def run(args: argparse.Namespace) -> int:
    print(plot_run(args.run_dir, args.out))
    return 0
