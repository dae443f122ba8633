"""`codechat audit RUN_DIR`: review the samples the reward-hack audit kept during training.

Imports of the rest of codechat sit inside the functions: at the top they would load on every `codechat --help`
(bench/cli_startup.py).
"""
from __future__ import annotations

import argparse

HELP = "review a run's flagged and top-reward samples (reward-hack audit)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory holding audit.jsonl")
    p.add_argument("--limit", type=int, default=20, help="samples to print (default 20, latest first)")
    p.add_argument("--all", action="store_true", help="also print top-reward samples, not only flagged ones")


def run(args: argparse.Namespace) -> int:
    from codechat.rollout.audit import report

    print(report(args.run_dir, args.limit, args.all))
    return 0
