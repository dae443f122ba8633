"""`codechat probe`: the placebo control of an RL stage (train/placebo.py): N RL steps from a model with the
real advantages and with them shuffled across each batch (same size of update, no reward signal), same seeds;
then train pass@1 / pass@k, KL from the start and entropy of both, and real - placebo with a paired interval.

    codechat probe --model RUN --demo tiny --steps 20 --out runs/probe
    codechat probe --model MODEL --config configs/grpo.yaml --steps 30 --out runs/probe rl.lr=5e-5
"""
from __future__ import annotations

import argparse
import json

from codechat import CodechatError
from codechat.demos.demo import DEMO, MODELS, QWEN
from codechat.train.placebo import ARMS, format_report, run_probe


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True,
                   help="the model the RL steps start from: a model directory, a preset or a run directory (its final)")
    p.add_argument("--config", help="YAML config whose RL stage is probed (default: the config defaults)")
    p.add_argument("--demo", choices=MODELS, default=None,
                   help="probe the demo's RL settings instead of a config: tiny, or the Qwen-shaped demo's")
    p.add_argument("--steps", type=int, default=20, help="RL steps per arm (default 20)")
    p.add_argument("--out", required=True, help="output directory: OUT/real, OUT/placebo (runs), OUT/probe.json")
    p.add_argument("--tasks", type=int, default=32, help="measure on the first N training tasks (0 = all; default 32)")
    p.add_argument("--n", type=int, default=8, help="samples per task of each measurement (default 8)")
    p.add_argument("--k", default="1,8", help="comma-separated k values, each <= n (default 1,8)")
    p.add_argument("--arms", default=",".join(ARMS), help="real,placebo (default) or one of them")
    p.add_argument("--force", action="store_true", help="replace the runs already in OUT/real, OUT/placebo")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. rl.lr=5e-5")


def run(args: argparse.Namespace) -> int:
    if args.demo and args.config:
        raise CodechatError(f"--demo {args.demo} and --config {args.config}: give one of them")
    try:
        ks = tuple(int(k) for k in args.k.split(","))
    except ValueError:
        raise CodechatError(f"--k {args.k}: expected comma-separated integers") from None
    base = [] if args.demo is None else DEMO + (QWEN if args.demo != "tiny" else [])
    result = run_probe(base + list(args.overrides), args.config, args.model, args.steps, args.out, args.tasks, args.n,
                       ks, tuple(a for a in args.arms.split(",") if a), args.force)
    print(format_report(result))
    print(json.dumps(result))
    return 0
