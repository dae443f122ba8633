"""Pass rate after the same samples, asynchronous rollouts with and without the default correction: two GRPO runs
of `rl.async_steps = --k` from the same start model, seed and data order, one with algo.tis_cap unset (the
default: capped at 2 under async, train/rl.py ASYNC_TIS_CAP) and one with algo.tis_cap=0 (stale batches trained
as if on policy, the earlier default).

The start model is the demo's SFT + RFT model on the `--quick` workload (`tiny` preset, builtin:toy; trained once
into `--root`/base and reused). Each GRPO run takes the demo's quick settings (10 prompts x 8 samples per step,
ppo-clip 0.2/0.28, 2 inner epochs) for `--steps` steps at `--lr`, then the demo's held-out evaluation. Reports the
training pass rate (mean over the last `--tail` steps), the held-out greedy pass@1 and pass@1, the mean
`tis_clipped_frac` (share of tokens whose ratio hit the cap) and `logp_gap_mean` (how stale the batches were).
Ends with one JSON line {"corrected": {...}, "uncorrected": {...}, "diff/<metric>": corrected - uncorrected, ...}.

    PYTHONPATH=. python bench/async_correction.py --root /tmp/async_correction            # ~10 min on 2 cores
    PYTHONPATH=. python bench/async_correction.py --seeds 0 1 2 --k 2 --lr 3e-4

Simplifies: one workload, few seeds (the differences are noisy; read them with the per-seed values).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from async_quality import METRICS, final_eval, spawn  # noqa: E402  (the sibling bench: its child runner)

MODES = {"corrected": [], "uncorrected": ["algo.tis_cap=0"]}


def train_figures(run_dir: Path, tail: int) -> dict:
    from codechat.io.runlog import read_metrics
    rows = [m for m in read_metrics(run_dir) if "pass_rate" in m]
    mean = lambda k, rs: round(statistics.mean(m.get(k, 0.0) for m in rs), 4)  # noqa: E731
    return {"train_pass_rate_tail": mean("pass_rate", rows[-tail:]), "train_pass_rate_mean": mean("pass_rate", rows),
            "tis_clipped_frac": mean("tis_clipped_frac", rows), "logp_gap_mean": mean("logp_gap_mean", rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--k", type=int, default=2, help="rl.async_steps of both runs")
    ap.add_argument("--lr", type=float, default=3e-4, help="rl.lr (larger: staler batches matter more)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--tail", type=int, default=5)
    ap.add_argument("--eval-n", type=int, default=4)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--root", default=None, help="keep the runs here (default: a temporary directory)")
    args = ap.parse_args()
    from codechat.demos.demo import DEMO, QUICK
    base = DEMO + QUICK
    root = Path(args.root or tempfile.mkdtemp(prefix="async_correction_"))
    root.mkdir(parents=True, exist_ok=True)
    common = [f"eval.n={args.eval_n}", "eval.k=[1]", "log.progress=false", "log.plot=false", "log.audit=false"]
    t0 = time.perf_counter()
    start = root / "base" / "final"
    if not start.exists():
        spawn(base + common + ["stages=[sft,rft]", f"run_dir={root / 'base'}"], root / "base.log")

    def one(job):
        seed, mode = job
        d = root / f"seed{seed}-{mode}"
        if not (d / "final").exists():
            spawn(base + common + ["stages=[grpo]", f"model.path={start}", f"rl.steps={args.steps}", f"seed={seed}",
                                   f"rl.lr={args.lr}", f"rl.async_steps={args.k}", f"run_dir={d}", *MODES[mode]],
                  root / f"seed{seed}-{mode}.log")
        out = final_eval(d) | train_figures(d, args.tail) | {"seed": seed}
        print(f"seed {seed} {mode}: {out}", file=sys.stderr, flush=True)
        return job, out

    with ThreadPoolExecutor(args.parallel) as pool:
        done = dict(pool.map(one, [(s, m) for s in args.seeds for m in MODES]))
    out: dict = {"workload": "demo --quick", "k": args.k, "lr": args.lr, "steps": args.steps, "seeds": args.seeds,
                 "samples": args.steps * 10 * 8}
    keys = list(METRICS) + ["train_pass_rate_tail", "train_pass_rate_mean", "tis_clipped_frac", "logp_gap_mean"]
    for mode in MODES:
        out[mode] = {k: round(statistics.mean(done[(s, mode)][k] for s in args.seeds), 4) for k in keys}
        out[f"{mode}/per_seed"] = [done[(s, mode)] for s in args.seeds]
    for k in keys[:4]:
        out[f"diff/{k}"] = round(out["corrected"][k] - out["uncorrected"][k], 4)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
