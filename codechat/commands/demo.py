"""`codechat demo`: train a tiny code model from scratch on CPU and show RL lifting its pass rate.

    codechat demo                       # ~15 min on 2 CPU cores -> runs/demo/{report.md,pass_rates.png}
    codechat demo --quick               # a minute or two, on builtin:toy
    codechat demo rl.steps=60 seed=1    # any `codechat train` override
    codechat demo --agent               # repository tasks with tools: SFT on expert episodes -> GRPO (demo_agent.py)
    codechat demo --seeds 0,1,2         # one run per seed (RUN_DIR/seed-N), then the table with mean and range
"""
from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from codechat import CodechatError
from codechat.demos.demo import MODELS, build_demo_model, demo_config, demo_settings, eval_label, run_demo, \
    summarize, table
from codechat.demos.agent import agent_settings, agent_table, resolve_change, run_agent_demo
from codechat.demos.seeds import agent_seed_table, parse_seeds, pooled_resolve_change, read_agent_rows, seed_table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-dir", default=None, help="output directory (default runs/demo, runs/demo-quick with --quick)")
    p.add_argument("--quick", action="store_true", help="a shortened demo (a minute or two) on builtin:toy")
    p.add_argument("--agent", action="store_true",
                   help="the agent demo: SFT on expert repository episodes, then RFT + GRPO on episodes "
                        "(runs/demo-agent, runs/demo-agent-quick with --quick)")
    p.add_argument("--model", default="tiny", choices=MODELS,
                   help="the model trained from scratch: the tiny preset (default) or a Qwen-shaped model with Qwen's "
                        "vocabulary and chat template (qwen2.5, qwen3: needs 'codechat[qwen]'; built in RUN_DIR/model)")
    p.add_argument("--seeds", default=None, metavar="S,S,...",
                   help="run once per seed, one after another, into RUN_DIR/seed-N (default RUN_DIR runs/demo-seeds, "
                        "runs/demo-agent-seeds with --agent) and print the table with mean and range")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. rl.steps=60 seed=1")


def run(args: argparse.Namespace) -> int:
    if args.agent and args.model != "tiny":
        raise CodechatError(f"--model {args.model}: the agent demo trains the tiny-agent preset only")
    if args.seeds is not None:
        return run_seeds(args)
    if args.agent:
        return run_agent(args)
    run_dir = args.run_dir or ("runs/demo-quick" if args.quick else "runs/demo")
    if (Path(run_dir) / "checkpoints").is_dir():
        raise CodechatError(f"{run_dir} holds an earlier demo: remove it or pass --run-dir "
                            f"(continue it with `codechat train --resume {run_dir}`)")
    cfg = demo_config(run_dir, args.quick, args.overrides, args.model)
    build_demo_model(cfg, args.model)
    command = " ".join(["codechat demo"] + (["--quick"] if args.quick else []) +
                       ([f"--model {args.model}"] if args.model != "tiny" else []) +
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
    print(f"codechat demo --agent: sft -> eval -> rft -> eval -> grpo -> eval -> {run_dir}")
    out, rows = run_agent_demo(run_dir, args.quick, args.overrides, command)
    print()
    print(agent_table(rows))
    print(resolve_change(out, "sft", "grpo" if (out / "eval-grpo").is_dir() else "rft"))
    if (out / "eval-grpo").is_dir():
        print("GRPO over RFT alone: " + resolve_change(out, "rft", "grpo"))
    print()
    print(f"report: {out / 'report.md'}   plot: {out / 'resolve.png'}")
    return 0


SEED_ARGS = "demo-args.json"
"""In each RUN_DIR/seed-N: the settings its run was started with, so that `--seeds` reuses a finished run (an
interrupted multi-seed demo goes on where it stopped; seeds run in parallel are gathered into one table)."""


def preset_settings(args: argparse.Namespace) -> list[str]:
    """The overrides the demo itself applies before the user's: a finished seed run is reused only when these are
    the ones it ran with too (a newer codechat with other demo settings runs it again)."""
    return agent_settings(args.quick) if args.agent else demo_settings(args.quick, args.model)


def finished_seed(run_dir: Path, agent: bool, same: dict) -> bool:
    """Does run_dir hold a finished demo started with the settings `same`?"""
    try:
        started = json.loads((run_dir / SEED_ARGS).read_text())
    except (OSError, ValueError):
        return False
    return started == same and (run_dir / ("rows.json" if agent else "report.md")).is_file()


def run_seeds(args: argparse.Namespace) -> int:
    """`codechat demo [--agent] --seeds 0,1,2`: the demo once per seed, then seeds.md (codechat/demos/seeds.py)."""
    seeds = parse_seeds(args.seeds)
    if any(o.split("=", 1)[0] == "seed" for o in args.overrides):
        raise CodechatError("--seeds sets each run's seed: drop the seed=... override")
    root = Path(args.run_dir or ("runs/demo-agent-seeds" if args.agent else "runs/demo-seeds")
                + ("-quick" if args.quick and not args.run_dir else ""))
    results, dirs = {}, {}
    for s in seeds:
        sub = argparse.Namespace(**{**vars(args), "seeds": None, "run_dir": str(root / f"seed-{s}"),
                                    "overrides": [*args.overrides, f"seed={s}"]})
        dirs[s] = root / f"seed-{s}"
        same = {"agent": args.agent, "quick": args.quick, "model": args.model, "overrides": sub.overrides,
                "settings": preset_settings(args)}
        if finished_seed(dirs[s], args.agent, same):
            print(f"=== seed {s}: the finished run in {sub.run_dir} (same settings) is reused")
        else:
            print(f"=== seed {s} -> {sub.run_dir}")
            dirs[s].mkdir(parents=True, exist_ok=True)
            (dirs[s] / SEED_ARGS).write_text(json.dumps(same))
            run_agent(sub) if args.agent else run(sub)
        results[s] = read_agent_rows(dirs[s]) if args.agent else summarize(dirs[s])
    text = agent_seed_table(results, pooled_resolve_change(dirs), pooled_resolve_change(dirs, "rft", "grpo")) \
        if args.agent else seed_table(results)
    command = " ".join(["codechat demo"] + (["--agent"] if args.agent else []) + (["--quick"] if args.quick else [])
                       + ([f"--model {args.model}"] if args.model != "tiny" else [])
                       + [f"--seeds {args.seeds}"]
                       + ([f"--run-dir {shlex.quote(args.run_dir)}"] if args.run_dir else [])
                       + [shlex.quote(o) for o in args.overrides])
    (root / "seeds.md").write_text(f"# {command}\n\n{text}\n")
    print()
    print(text)
    print(f"\ntable: {root / 'seeds.md'}")
    return 0
