"""Held-out pass rate after the same number of samples: the synchronous loop (rl.async_steps=0) vs one step off
policy (rl.async_steps=1), on the demo's GRPO workload, over several seeds.

The start model is the demo's SFT + RFT model (`codechat/demos/demo.py` DEMO settings, stages=[sft,rft], trained once
into `--root`/base and reused, or `--base DIR`). For each seed, two GRPO runs from it with the demo's GRPO
settings (16 prompts x 8 samples, ppo-clip 0.2/0.28, 2 inner epochs, zero-variance groups skipped, lr 2e-4) for
`--steps` steps: the same config except `rl.async_steps` 0 or 1 (both with algo.correction=tis, tis_cap 2; on
policy the ratio is ~1). Then the demo's held-out evaluation (builtin:synthetic-heldout: greedy pass@1 and pass@1
at T=1 over `--eval-n` samples per task). The quality target: the paired difference async - sync, averaged over
seeds, within noise: |mean| <= 2 standard errors (SE = stdev of the per-seed differences / sqrt(seeds)).

Each GRPO run is its own process with OMP_NUM_THREADS=1 and OMP_WAIT_POLICY=passive (`--parallel` at a time,
default 2). Ends with one JSON line {"sync": [...], "async": [...], "diff/<metric>", "se/<metric>",
"within_noise/<metric>", "samples", ...}.

    PYTHONPATH=. python bench/async_quality.py --steps 30 --seeds 0 1 2 --root /tmp/async_quality
    PYTHONPATH=. python bench/async_quality.py --quick --steps 20          # builtin:toy, a few minutes

Simplifies: fewer GRPO steps than the demo (100) so that 6 runs fit a shared 2-core machine; the start model is
the same for every seed (seed varies the GRPO data order and sampling only); 3 seeds give a rough SE.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

METRICS = ("eval/greedy_pass@1", "eval/pass@1")
REPO = Path(__file__).resolve().parents[1]


def final_eval(run_dir: Path) -> dict:
    from codechat.io.runlog import read_metrics  # after the threading environment is set (torch loads)
    rows = [m for m in read_metrics(run_dir) if any(k in m for k in METRICS)]
    return {k: rows[-1][k] for k in METRICS if k in rows[-1]}


def run_child(extra: list[str]) -> None:
    """One training run in this (fresh) process: `extra` are config overrides on top of the demo's."""
    from codechat.config.io import load_config
    from codechat.train import train
    train(load_config(None, extra))


def spawn(overrides: list[str], log: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    with open(log, "w") as f:
        rc = subprocess.run([sys.executable, __file__, "--child", json.dumps(overrides)], env=env,
                            stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        sys.exit(f"run failed (rc {rc}), see {log}:\n{log.read_text()[-2000:]}")


def summarize(per: dict[int, list[dict]]) -> dict:
    """Means per mode, paired async - sync difference per metric, its standard error and the 2-SE verdict."""
    out = {}
    for k, name in ((0, "sync"), (1, "async")):
        out[name] = per[k]
        out[f"{name}_mean"] = {m: round(statistics.mean(e[m] for e in per[k]), 4) for m in METRICS}
    for m in METRICS:
        diffs = [a[m] - s[m] for s, a in zip(per[0], per[1])]
        mean = statistics.mean(diffs)
        se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else None
        out[f"diff/{m}"] = round(mean, 4)
        out[f"se/{m}"] = None if se is None else round(se, 4)
        out[f"within_noise/{m}"] = None if se is None else abs(mean) <= 2 * se
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--eval-n", type=int, default=4)
    ap.add_argument("--parallel", type=int, default=2, help="GRPO runs at a time (one thread each)")
    ap.add_argument("--root", default=None, help="keep the runs here (default: a temporary directory)")
    ap.add_argument("--base", default=None, help="start model directory (default: train the demo's sft+rft)")
    ap.add_argument("--quick", action="store_true", help="the demo's --quick workload (builtin:toy, 10 x 8 per step)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for both runs of every seed (repeatable)")
    ap.add_argument("--async-override", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for the async_steps=1 runs only (repeatable), e.g. a correction")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        return run_child(json.loads(args.child))
    from codechat.demos.demo import DEMO, QUICK  # config only: torch is not used in this parent process
    base = DEMO + (QUICK if args.quick else [])
    root = Path(args.root or tempfile.mkdtemp(prefix="async_quality_"))
    root.mkdir(parents=True, exist_ok=True)
    common = [f"eval.n={args.eval_n}", "eval.k=[1]", "log.progress=false", "log.plot=false", "log.audit=false"]
    t0 = time.perf_counter()
    start = Path(args.base) if args.base else root / "base" / "final"
    if not args.base and not start.exists():
        spawn(base + common + ["stages=[sft,rft]", f"run_dir={root / 'base'}"], root / "base.log")
    base_s = round(time.perf_counter() - t0, 1)
    jobs = [(seed, k) for seed in args.seeds for k in (0, 1)]

    def one(job):
        seed, k = job
        d = root / f"seed{seed}-async{k}"
        t = time.perf_counter()
        if not (d / "final").exists():
            spawn(base + common + ["stages=[grpo]", f"model.path={start}", f"rl.steps={args.steps}", f"seed={seed}",
                                   f"rl.async_steps={k}", "algo.correction=tis", "algo.tis_cap=2", f"run_dir={d}",
                                   *args.override, *(args.async_override if k else [])],
                  root / f"seed{seed}-async{k}.log")
        ev = final_eval(d) | {"seed": seed, "wall_s": round(time.perf_counter() - t, 1)}
        print(f"seed {seed} async_steps={k}: {ev}", file=sys.stderr, flush=True)
        return job, ev

    with ThreadPoolExecutor(args.parallel) as pool:
        done = dict(pool.map(one, jobs))
    per = {k: [done[(s, k)] for s in args.seeds] for k in (0, 1)}
    rl = {o.split("=")[0]: o.split("=")[1] for o in base if o.startswith("rl.")}
    samples = args.steps * int(rl["rl.prompts_per_step"]) * int(rl["rl.group_size"])
    out = {"workload": "demo --quick" if args.quick else "demo", "steps": args.steps, "seeds": args.seeds,
           "override": args.override, "async_override": args.async_override,
           "samples": samples, "eval_n": args.eval_n, "start": str(start),
           "start_eval": final_eval(start.parent) if (start.parent / "metrics.jsonl").exists() else None, **summarize(per),
           "base_s": base_s, "wall_s": round(time.perf_counter() - t0, 1)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
