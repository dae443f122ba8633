"""Seconds per RL step and samples per second: the synchronous loop (rl.async_steps=0) vs one step off policy
(rl.async_steps=1), the same GRPO workload, in the same run.

Both train `--steps` GRPO steps from the same starting model on the same prompts and seeds; the producer thread
of the async run samples and verifies batch s+1 while the trainer updates on batch s. The steady-state time per
step is the median gap between consecutive step logs after the first (the first batch cannot overlap anything);
samples/s = samples over that steady-state time. Ends with one JSON line {"sync_s_per_step", "async_s_per_step",
"sync_samples_s", "async_samples_s", "ratio"} (ratio = async / sync samples/s).

    PYTHONPATH=. python bench/async_step.py                     # tiny model, builtin:synthetic-train, 6 steps
    PYTHONPATH=. python bench/async_step.py --model runs/demo/final --steps 8 -P 4 -G 8 --new 96
    PYTHONPATH=. python bench/async_step.py --verify-while-decoding

Simplifies: one process (no DDP); the pass rate after the same samples is not compared here (3 seeds of the demo
do not fit a 2-minute benchmark on 2 cores); the async run's producer and trainer share the machine's cores.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from codechat.configio import load_config
from codechat.train import train


def run(args, async_steps: int, run_dir: Path) -> tuple[float, float]:
    over = [f"data.train={args.tasks}", f"model.path={args.model}", "stages=[grpo]", f"rl.steps={args.steps}",
            f"rl.prompts_per_step={args.P}", f"rl.group_size={args.G}", f"sampling.max_new_tokens={args.new}",
            "log.progress=false", "log.plot=false", "log.audit=false", "checkpoint.every=0", "model.device=cpu",
            f"verifier.workers={args.workers}", f"rl.async_steps={async_steps}", f"run_dir={run_dir}",
            f"rollout.verify_while_decoding={'true' if args.verify_while_decoding else 'false'}"]
    train(load_config(None, over))
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    stamps = [m["time"] for m in lines if "pass_rate" in m]  # seconds since the run started, at each step's log
    per_step = statistics.median(b - a for a, b in zip(stamps, stamps[1:]))
    return per_step, args.P * args.G / per_step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--tasks", default="builtin:synthetic-train")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("-P", type=int, default=4)
    ap.add_argument("-G", type=int, default=8)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--verify-while-decoding", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        sync_s, sync_r = run(args, 0, Path(d) / "sync")
        async_s, async_r = run(args, 1, Path(d) / "async")
    print(json.dumps({"sync_s_per_step": round(sync_s, 3), "async_s_per_step": round(async_s, 3),
                      "sync_samples_s": round(sync_r, 2), "async_samples_s": round(async_r, 2),
                      "ratio": round(async_r / sync_r, 3)}))


if __name__ == "__main__":
    main()
