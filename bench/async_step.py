"""Seconds per RL step and samples per second: the synchronous loop (rl.async_steps=0) vs one step off policy
(rl.async_steps=1), the same GRPO workload, in the same run; single answers or multi-turn repository episodes.

Both train `--steps` GRPO steps from the same starting model on the same prompts and seeds; the producer thread
of the async run samples and verifies batch s+1 while the trainer updates on batch s. The steady-state time per
step is the median gap between consecutive step logs after the first (the first batch cannot overlap anything),
pooled over --rounds runs per side, the order alternated (sync, async, async, sync, ...: ABBA, so load drift hits
both alike); samples/s = samples over that steady-state time. Ends with one JSON line {"sync_s_per_step", "async_s_per_step",
"sync_samples_s", "async_samples_s", "ratio", "threads", "wait_policy", ...} (ratio = async / sync samples/s).

Each side runs in its own fresh process with the same threading environment (OMP_NUM_THREADS=--threads,
OMP_WAIT_POLICY=--wait-policy), set before torch loads. Why: with libgomp's default spin-waiting, a 2-thread
OpenMP team on 2 cores that other jobs also use loses most of its time at every parallel region (a spinning
thread holds the core its teammate needs); tiny-model ops are all parallel regions, so the synchronous run
slowed 20-60x (sampling 17 s per step instead of 0.6 s), while the async run, having 4 OpenMP threads on 2
cores, got libgomp's throttled spinning and ran normally: the "10x" of an earlier run was that baseline's
pathology, not overlap. `--wait-policy passive` (the default) or `--threads 1` keeps both sides honest.

    PYTHONPATH=. python bench/async_step.py                     # tiny model, builtin:synthetic-train, 6 steps
    PYTHONPATH=. python bench/async_step.py --model runs/demo/final --steps 8 -P 4 -G 8 --new 96
    PYTHONPATH=. python bench/async_step.py --threads 2 --wait-policy active   # the pathological baseline
    PYTHONPATH=. python bench/async_step.py --workload episodes --steps 4 -P 2 -G 4 --new 48   # multi-turn

`--workload episodes`: GRPO on repository tasks (default builtin:repo-train): G multi-turn episodes per task
(tool calls, the hidden-test judgement as reward; train/episodes.py), acted by the producer's model copy in the
async run; `--new` is then agent.turn_tokens (new tokens per model turn) and a sample is one episode.

Simplifies: one process per side (no DDP); the pass rate after the same samples is not compared here (see
bench/async_quality.py); the async run's producer and trainer share the machine's cores.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def child(args) -> None:
    """One side, in this (fresh) process: train, then print {"per_step", "phases"} as the last line."""
    from codechat.config.io import load_config  # after the parent set the threading environment (torch loads)
    from codechat.train import train
    run_dir = Path(args.run_dir)
    tokens = f"agent.turn_tokens={args.new}" if args.workload == "episodes" else f"sampling.max_new_tokens={args.new}"
    tasks = args.tasks or ("builtin:repo-train" if args.workload == "episodes" else "builtin:synthetic-train")
    over = [f"data.train={tasks}", f"model.path={args.model}", "stages=[grpo]", f"rl.steps={args.steps}",
            f"rl.prompts_per_step={args.P}", f"rl.group_size={args.G}", tokens,
            "log.progress=false", "log.plot=false", "log.audit=false", "checkpoint.every=0", "model.device=cpu",
            f"verifier.workers={args.workers}", f"rl.async_steps={args.child}", f"run_dir={run_dir}",
            f"rollout.verify_while_decoding={'true' if args.verify_while_decoding else 'false'}", *args.override]
    train(load_config(None, over))
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [m for m in lines if "pass_rate" in m]
    stamps = [m["time"] for m in steps]  # seconds since the run started, at each step's log
    per_step = statistics.median(b - a for a, b in zip(stamps, stamps[1:]))
    phases = {k: round(statistics.median(m[k] for m in steps[1:]), 3)
              for k in ("time/sample_s", "time/verify_s", "time/update_s", "async/wait_s", "time/episodes_s",
                        "episode/turns") if k in steps[-1]}
    print(json.dumps({"per_step": per_step, "gaps": [b - a for a, b in zip(stamps, stamps[1:])],
                      "phases": phases}))


def side(args, async_steps: int, run_dir: Path) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OMP_WAIT_POLICY=args.wait_policy,
               PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, __file__, "--child", str(async_steps), "--run-dir", str(run_dir)] + args.passthrough
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"async_steps={async_steps} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def pool(runs: list[dict]) -> dict:
    """One side's rounds -> the median step gap over all of them, the phases' medians over the rounds."""
    phases = {k: round(statistics.median(r["phases"][k] for r in runs), 3) for k in runs[0]["phases"]}
    return {"per_step": statistics.median(g for r in runs for g in r["gaps"]), "phases": phases}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--workload", default="answers", choices=["answers", "episodes"],
                    help="single answers (function tasks) or multi-turn repository episodes")
    ap.add_argument("--tasks", default=None, help="default: builtin:synthetic-train, builtin:repo-train (episodes)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("-P", type=int, default=4)
    ap.add_argument("-G", type=int, default=8)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--verify-while-decoding", action="store_true")
    ap.add_argument("--override", action="append", default=[], help="extra KEY=VALUE config overrides, both sides")
    ap.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of both sides")
    ap.add_argument("--wait-policy", default="passive", choices=["passive", "active"], help="OMP_WAIT_POLICY")
    ap.add_argument("--rounds", type=int, default=2, help="runs per side, alternated (ABBA); medians pool them")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--run-dir", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        return child(args)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    args.passthrough = [a for a in sys.argv[1:]]
    runs: dict[int, list[dict]] = {0: [], 1: []}
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):
            for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                runs[k].append(side(args, k, Path(d) / f"{'async' if k else 'sync'}-{r}"))
    s, a = (pool(runs[k]) for k in (0, 1))
    n = args.P * args.G
    print(json.dumps({"workload": args.workload, "sync_s_per_step": round(s["per_step"], 3), "async_s_per_step": round(a["per_step"], 3),
                      "sync_samples_s": round(n / s["per_step"], 2), "async_samples_s": round(n / a["per_step"], 2),
                      "ratio": round(s["per_step"] / a["per_step"], 3), "threads": args.threads,
                      "wait_policy": args.wait_policy, "rounds": args.rounds, "sync_phases": s["phases"], "async_phases": a["phases"]}))


if __name__ == "__main__":
    main()
