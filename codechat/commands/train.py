"""`codechat train`: train with a YAML config and key=value overrides, or resume a run.
"""
from __future__ import annotations

import argparse
import os
import sys

import yaml

from codechat import CodechatError
from codechat.config.io import load_config, to_dict
from codechat.train import train
from codechat.train.dryrun import dry_run, print_report


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML config file (see configs/)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last complete checkpoint")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. rl.lr=3e-5 stages=[sft,grpo]")
    p.add_argument("--force", action="store_true",
                   help="start afresh in a run_dir that holds a run (its config, logs and checkpoints are deleted)")
    p.add_argument("--print-config", action="store_true", help="print the resolved config (YAML) and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="load tasks and model, check the context, sample and verify one batch, report time and "
                        "memory per step, exit (nothing written)")
    p.set_defaults(_usage=p.format_usage)


def run(args: argparse.Namespace) -> int:
    if args.resume and args.config:
        raise CodechatError(f"--resume {args.resume} continues with the run's own config.yaml; --config "
                            f"{args.config} cannot change it (start a new run_dir instead)")
    if args.print_config or args.dry_run:  # the defaults too: `codechat train --print-config`
        return _inspect(args)
    if not (args.config or args.resume or args.overrides):  # not a random model into runs/default by accident
        print(args._usage(), end="", file=sys.stderr)
        print("codechat train: give --config FILE (see configs/), KEY=VALUE overrides, or --resume RUN_DIR",
              file=sys.stderr)
        return 2
    if args.resume:
        run_dir = train(resume=args.resume, overrides=args.overrides)
    else:
        run_dir = train(load_config(args.config, args.overrides), force=args.force)
    if os.environ.get("RANK", "0") == "0":  # under torchrun: once
        print(f"run finished: {run_dir} (metrics.jsonl, checkpoints/, curves.png)")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    """--print-config and --dry-run: the resolved config (of --resume's run dir too), then exit."""
    if args.resume:
        path = os.path.join(args.resume, "config.yaml")
        if not os.path.isfile(path):
            raise CodechatError(f"{args.resume}: not a run directory (no config.yaml)")
        cfg = load_config(path, args.overrides)
    else:
        cfg = load_config(args.config, args.overrides)
    if args.print_config:
        print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
    if args.dry_run:
        print_report(dry_run(cfg))
    return 0
