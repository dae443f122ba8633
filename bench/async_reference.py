"""Is an async_steps=1 run exactly the synchronous loop sampling with weights one update behind? On the demo's GRPO
workload (bench/async_quality.py's settings), one seed: the run with the producer thread, and a synchronous run
whose rollout engine holds a model copy loaded one push late (after update s it loads the weights pushed after
update s - 1: version s - 1 samples step s, as the producer does). Equal per-step metrics and final evaluation
say the producer adds nothing to staleness: a quality gap against the synchronous run is the one-update delay
itself. With `--delay 0` the copy is always current, which must equal the synchronous run.

    PYTHONPATH=. python bench/async_reference.py --base /tmp/async_quality/base/final --seed 4 --steps 20

Each run is its own process (OMP_NUM_THREADS=1, passive), both at once. Ends with one JSON line
{"steps", "identical_steps", "differing": {metric: [steps]}, "eval": {"run": ..., "reference": ...}}, "run" being
the run with rl.async_steps = --delay.
The reference's engine lives here (not in codechat): a diagnostic, not a feature.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KEYS = ("pass_rate", "grad_norm", "pg_loss", "loss", "tis_ratio_mean", "logp_gap_max", "entropy")


class LateCopy:
    """A rollout engine sampling its own model copy, refreshed `delay` (0 or 1) weight pushes late."""

    samples_training_weights = False

    def __init__(self, policy, delay: int):
        from codechat.policy.sampler import Sampler  # torch loads after the threading environment is set
        from codechat.train.producer import weights_snapshot
        self.snapshot = weights_snapshot
        self.policy = dataclasses.replace(policy, model=copy.deepcopy(policy.model).eval())
        self.sampler, self.delay = Sampler(self.policy), delay
        self.pending = weights_snapshot(policy.model)

    def sample(self, *args, **kwargs):
        return self.sampler.sample(*args, **kwargs)

    def update_weights(self, model) -> None:
        if self.delay:
            self.policy.model.load_state_dict(self.pending)
            self.pending = self.snapshot(model)
        else:
            self.policy.model.load_state_dict(self.snapshot(model))

    def release_kv(self) -> None:
        self.sampler.release_kv()

    def close(self) -> None:
        pass


def run_child(overrides: list[str], delay: int | None) -> None:
    import codechat.train.rl as rl
    from codechat.config.io import load_config
    from codechat.train import train
    if delay is not None:
        rl.make_engine = lambda policy, *a: LateCopy(policy, delay)
    train(load_config(None, overrides))


def spawn(overrides: list[str], delay: int | None, log: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, __file__, "--child", json.dumps(overrides)]
    cmd += [] if delay is None else ["--child-delay", str(delay)]
    with open(log, "w") as f:
        if subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode != 0:
            sys.exit(f"run failed, see {log}:\n{log.read_text()[-2000:]}")


def steps_of(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "pass_rate" in r]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="start model (bench/async_quality.py's ROOT/base/final); required")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--delay", type=int, choices=(0, 1), default=1, help="1: vs async_steps=1; 0: vs synchronous")
    ap.add_argument("--root", default=None, help="keep the runs here (default: a temporary directory)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-delay", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        return run_child(json.loads(args.child), args.child_delay)
    if not args.base or not Path(args.base).is_dir():
        ap.error(f"--base: need the start model's directory, got {args.base!r}")
    from codechat.demos.demo import DEMO  # config only
    root = Path(args.root or tempfile.mkdtemp(prefix="async_reference_"))
    root.mkdir(parents=True, exist_ok=True)
    common = DEMO + ["eval.n=4", "eval.k=[1]", "log.progress=false", "log.plot=false", "log.audit=false",
                     "stages=[grpo]", f"model.path={args.base}", f"rl.steps={args.steps}", f"seed={args.seed}",
                     "algo.correction=tis", "algo.tis_cap=2"]
    runs = {"run": (common + [f"rl.async_steps={args.delay}", f"run_dir={root / 'run'}"], None),
            "reference": (common + ["rl.async_steps=0", f"run_dir={root / 'reference'}"], args.delay)}
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda kv: spawn(kv[1][0], kv[1][1], root / f"{kv[0]}.log"), runs.items()))
    a, r = steps_of(root / "run"), steps_of(root / "reference")
    differing = {k: [i for i, (x, y) in enumerate(zip(a, r)) if x.get(k) != y.get(k)] for k in KEYS}
    same = sum(all(x.get(k) == y.get(k) for k in KEYS) for x, y in zip(a, r))
    ev = {name: {k: v for k, v in rows[-1].items() if k.startswith("eval/")} for name, rows in (("run", a),
                                                                                                ("reference", r))}
    print(json.dumps({"seed": args.seed, "delay": args.delay, "steps": len(a), "identical_steps": same,
                      "differing": {k: v for k, v in differing.items() if v}, "eval": ev, "root": str(root)}))


if __name__ == "__main__":
    main()
