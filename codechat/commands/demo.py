"""`codechat demo`: train a tiny code model from scratch on CPU and show RL lifting its pass rate.

    codechat demo                       # ~15 min on 2 CPU cores -> runs/demo/{report.md,pass_rates.png}
    codechat demo --quick               # a minute or two, on builtin:toy
    codechat demo rl.steps=60 seed=1    # any `codechat train` override
    codechat demo --agent               # repository tasks with tools: SFT on expert episodes -> GRPO (demo_agent.py)
"""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from codechat import CodechatError
from codechat.demos.demo import demo_config, eval_label, run_demo, table
from codechat.demos.agent import agent_table, resolve_change, run_agent_demo


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", default=None, help="output directory (default runs/demo, runs/demo-quick with --quick)")
    p.add_argument("--quick", action="store_true", help="a shortened demo (a minute or two) on builtin:toy")
    p.add_argument("--agent", action="store_true",
                   help="the agent demo: SFT on expert repository episodes, then GRPO on episodes (runs/demo-agent)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. rl.steps=60 seed=1")


def run(args: argparse.Namespace) -> int:
    if args.agent:
        return run_agent(args)
    run_dir = args.run_dir or ("runs/demo-quick" if args.quick else "runs/demo")
    if (Path(run_dir) / "checkpoints").is_dir():
        raise CodechatError(f"{run_dir} holds an earlier demo: remove it or pass --run-dir "
                            f"(continue it with `codechat train --resume {run_dir}`)")
    cfg = demo_config(run_dir, args.quick, args.overrides)
    command = " ".join(["codechat demo"] + (["--quick"] if args.quick else []) +
                       ([f"--run-dir {shlex.quote(run_dir)}"] if args.run_dir else []) +
                       [shlex.quote(o) for o in args.overrides])
    print(f"codechat demo: {', '.join(cfg.stages)} of `{cfg.model.path}` -> {run_dir} (seed {cfg.seed})")
    out, rows = run_demo(cfg, command)
    print()
    print(table(rows, eval_label(cfg.data.eval, cfg.data.train)))
    print()
    print(f"report: {out / 'report.md'}   plot: {out / 'pass_rates.png'}")
    print(f"evaluate: codechat eval --model {out} --tasks {cfg.data.eval} --greedy")
    print(f"chat:     codechat chat {out}")
    return 0


def run_agent(args: argparse.Namespace) -> int:
    """`codechat demo --agent [--quick]`: codechat/demos/agent.py."""
    run_dir = args.run_dir or ("runs/demo-agent-quick" if args.quick else "runs/demo-agent")
    if (Path(run_dir) / "sft").exists():
        raise CodechatError(f"{run_dir} holds an earlier agent demo: remove it or pass --run-dir")
    command = " ".join(["codechat demo --agent"] + (["--quick"] if args.quick else []) +
                       ([f"--run-dir {shlex.quote(run_dir)}"] if args.run_dir else []) +
                       [shlex.quote(o) for o in args.overrides])
    print(f"codechat demo --agent: sft -> eval -> rft+grpo -> eval -> {run_dir}")
    out, rows = run_agent_demo(run_dir, args.quick, args.overrides, command)
    print()
    print(agent_table(rows))
    print(resolve_change(out))
    print()
    print(f"report: {out / 'report.md'}   plot: {out / 'resolve.png'}")
    return 0
