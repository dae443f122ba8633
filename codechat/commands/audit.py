"""`codechat audit RUN_DIR`: review the samples the reward-hack audit kept during training.
"""
from __future__ import annotations

import argparse

from codechat.rollout.audit import report


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory holding audit.jsonl")
    p.add_argument("--limit", type=int, default=20, help="samples to print (default 20, latest first)")
    p.add_argument("--all", action="store_true", help="also print top-reward samples, not only flagged ones")


def run(args: argparse.Namespace) -> int:
    print(report(args.run_dir, args.limit, args.all))
    return 0
