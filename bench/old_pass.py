"""Benchmark: pi_old's log-probs from the first optimizer step's own forward (train/rl.py `old_logprobs`) against
a separate no-grad pass over every row before the update (what rl_update did before), on the demo's GRPO update,
in one run.

    python bench/old_pass.py                 # ends with one JSON line

Workload: bench/dedup_update.py's replay of a demo GRPO step (the `tiny` preset, 16 prompts x 8 samples, 2 inner
epochs, one minibatch per epoch, zero-variance groups skipped, rl.dedup on, as the demo). With one minibatch per
epoch the first epoch's forward covers every row, so the no-grad pass is skipped entirely; the baseline runs it
(a stand-in for `old_logprobs` that computes every row; the first step then still takes its old log-probs from
its own forward, so the two variants train identically and only the cost differs). Both start from the same
weights, `--repeats` times each, alternating so load drift hits both. Reported: median wall and CPU seconds per
update, and `max_old_logp_diff`, the largest |separate pass - first step's forward| over the old log-probs (what
the values of the first step's rows would have been: float noise). JSON: {"separate_s", "fused_s", "ratio"
(separate/fused, wall), "cpu_ratio", "max_old_logp_diff", "rows"}.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from codechat.train import rl  # noqa: E402
from codechat.train.checkpoint import TrainState  # noqa: E402
from codechat.train.common import Context, make_optimizer  # noqa: E402
from dedup_update import bench_args, demo_policy, replay_groups, update_batch  # noqa: E402

FUSED = rl.old_logprobs


def separate_pass(captured: list):
    """The previous formulation: a no-grad pass over every row before the first optimizer step."""
    def old_logprobs(model, r, rows, first, temperature, dedup, count):
        old = rl.frozen_logprobs(model, r, rows, temperature, dedup=dedup, count=count)  # (N, T)
        captured.append((old, old.clone()))  # the first step overwrites its rows of `old` with its own values
        return old
    return old_logprobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    args = bench_args(ap)
    with tempfile.TemporaryDirectory() as tmp:
        cfg, policy = demo_policy(tmp, args.seed)
        r, algo, adv, rows, _ = update_batch(policy, replay_groups(cfg, 0.585, args.seed), cfg, 2)
        start = {k: v.detach().clone() for k, v in policy.model.state_dict().items()}
        wall: dict[str, list[float]] = {"separate": [], "fused": []}
        cpu: dict[str, list[float]] = {"separate": [], "fused": []}
        captured: list = []
        after = {}
        try:
            for rep in range(args.repeats):
                for name in wall:
                    rl.old_logprobs = separate_pass(captured) if name == "separate" else FUSED
                    policy.model.load_state_dict(start)
                    ctx = Context(cfg, policy, None, None, None, TrainState(), Path(tmp), [])
                    opt, _ = make_optimizer(policy.model, cfg.rl.lr, cfg.rl.warmup, cfg.rl.steps, cosine=False,
                                            cfg=cfg.optim)
                    policy.model.train()
                    t0, c0 = time.perf_counter(), time.process_time()
                    rl.rl_update(ctx, r, adv[rows], rows, None, opt, algo)
                    wall[name].append(time.perf_counter() - t0)
                    cpu[name].append(time.process_time() - c0)
                    after[name] = {k: v.detach().clone() for k, v in policy.model.state_dict().items()}
        finally:
            rl.old_logprobs = FUSED
    same = all(torch.equal(after["separate"][k], after["fused"][k]) for k in start)
    diff = max((filled - sep).abs().max().item() for filled, sep in captured)
    s, f = statistics.median(wall["separate"]), statistics.median(wall["fused"])
    sc, fc = statistics.median(cpu["separate"]), statistics.median(cpu["fused"])
    print(f"{len(rows)} rows, 2 epochs: update s: separate old pass {s:.3f} (cpu {sc:.3f})  from the first step "
          f"{f:.3f} (cpu {fc:.3f})  ({s / f:.2f}x wall, {sc / fc:.2f}x cpu); weights equal: {same}; "
          f"max |old logp diff| {diff:.1e}")
    print(json.dumps({"separate_s": round(s, 4), "fused_s": round(f, 4), "ratio": round(s / f, 3),
                      "cpu_ratio": round(sc / fc, 3), "max_old_logp_diff": diff, "rows": len(rows)}))


if __name__ == "__main__":
    main()
