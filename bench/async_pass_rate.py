"""Held-out pass rate after the same number of samples: the synchronous loop (rl.async_steps=0) vs one step off
policy (rl.async_steps=1), on the demo's workload, over several seeds.

One SFT run of the demo (`codechat/demo.py` DEMO settings, stages=[sft], shared by every seed), then for each
seed a GRPO stage with the demo's GRPO settings (16 prompts x 8 samples, ppo-clip 0.2/0.28, 2 inner epochs,
zero-variance groups skipped) for `--steps` steps, synchronous and async_steps=1 (algo.correction=tis with
tis_cap 2: the off-policy samples are corrected), then the demo's held-out evaluation (greedy pass@1, pass@1 at
T=1 over eval.n samples). Ends with one JSON line: per-seed figures, their means, and the async - sync
difference of each metric with the spread of the per-seed differences.

    PYTHONPATH=. OMP_NUM_THREADS=1 python bench/async_pass_rate.py --steps 30 --seeds 0 1 2
    PYTHONPATH=. OMP_NUM_THREADS=1 python bench/async_pass_rate.py --quick --steps 20   # builtin:toy, minutes

Simplifies: fewer GRPO steps than the demo (100) so that 6 runs fit a shared 2-core machine; no RFT warm-up
(GRPO starts from the SFT model); the SFT model is the same for every seed (seed varies the GRPO data order and
sampling only).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from codechat.demo import DEMO, QUICK
from codechat.configio import load_config
from codechat.train import train
from codechat.runlog import read_metrics

METRICS = ("eval/greedy_pass@1", "eval/pass@1")


def final_eval(run_dir: Path) -> dict:
    rows = [m for m in read_metrics(run_dir) if any(k in m for k in METRICS)]
    return {k: rows[-1][k] for k in METRICS if k in rows[-1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--eval-n", type=int, default=4)
    ap.add_argument("--root", default=None, help="keep the runs here (default: a temporary directory)")
    ap.add_argument("--quick", action="store_true", help="the demo's --quick workload (builtin:toy, 10 x 8 per step)")
    args = ap.parse_args()
    base = DEMO + (QUICK if args.quick else [])
    root = Path(args.root or tempfile.mkdtemp(prefix="async_pass_rate_"))
    common = [f"eval.n={args.eval_n}", "eval.k=[1]", "log.progress=false", "log.plot=false", "log.audit=false"]
    sft_dir = root / "sft"
    if not (sft_dir / "final").exists():
        train(load_config(None, base + common + ["stages=[sft]", f"run_dir={sft_dir}"]))
    start = final_eval(sft_dir)
    cfg = load_config(None, base)
    out = {"workload": "demo --quick" if args.quick else "demo", "steps": args.steps, "seeds": args.seeds,
           "samples": args.steps * cfg.rl.prompts_per_step * cfg.rl.group_size, "sft": start}
    per = {0: [], 1: []}
    for seed in args.seeds:
        for k in (0, 1):
            d = root / f"seed{seed}-async{k}"
            t0 = time.perf_counter()
            train(load_config(None, base + common + [
                "stages=[grpo]", f"model.path={sft_dir / 'final'}", f"rl.steps={args.steps}", f"seed={seed}",
                f"rl.async_steps={k}", "algo.correction=tis", "algo.tis_cap=2", f"run_dir={d}"]))
            ev = final_eval(d) | {"wall_s": round(time.perf_counter() - t0, 1)}
            per[k].append(ev)
            print(f"seed {seed} async_steps={k}: {ev}", file=sys.stderr, flush=True)
    for k, name in ((0, "sync"), (1, "async")):
        out[name] = per[k]
        out[f"{name}_mean"] = {m: round(statistics.mean(e[m] for e in per[k]), 4) for m in METRICS}
    for m in METRICS:
        diffs = [a[m] - s[m] for s, a in zip(per[0], per[1])]
        out[f"diff/{m}"] = round(statistics.mean(diffs), 4)
        out[f"diff_std/{m}"] = round(statistics.stdev(diffs), 4) if len(diffs) > 1 else None
    print(json.dumps(out))


if __name__ == "__main__":
    main()
