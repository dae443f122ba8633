"""Time of `codechat eval` per 100 tasks at n=10 on the tiny preset (sampling + verification), split by phase.

    python bench/eval_speed.py [--tasks builtin:synthetic-heldout] [--n 10] [--limit 100] [--max-new-tokens 96]
Ends with one JSON line: {"tasks", "n", "seconds", "s_per_100_tasks", "sample_s", "verify_s", "tokens_per_s"}.
"""
import argparse
import json
import time

import codechat.rollout.collect as rollout
from codechat.config import ModelConfig, SamplingConfig, VerifierConfig
from codechat.evaluation.evaluate import evaluate_policy
from codechat.policy import load_policy
from codechat.tasks import load_tasks
from codechat.verifier.verify import Verifier

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="tiny")
ap.add_argument("--tasks", default="builtin:synthetic-heldout")
ap.add_argument("--n", type=int, default=10)
ap.add_argument("--limit", type=int, default=100)
ap.add_argument("--max-new-tokens", type=int, default=96)
args = ap.parse_args()

tasks = load_tasks(args.tasks)[: args.limit]
policy = load_policy(ModelConfig(path=args.model))
phases = {"sample_s": 0.0, "verify_s": 0.0}
collect = rollout.collect


def timed_collect(*a, **k):
    r = collect(*a, **k)
    phases["sample_s"] += r.sample_s
    phases["verify_s"] += r.verify_s
    return r


rollout.collect = timed_collect
t0 = time.time()
with Verifier(VerifierConfig()) as v:
    rep = evaluate_policy(policy, v, tasks, n=args.n, ks=[1], temperature=1.0, greedy=False,
                          sampling=SamplingConfig(max_new_tokens=args.max_new_tokens))
secs = time.time() - t0
print(f"{len(tasks)} tasks x n={args.n}: {secs:.1f}s ({secs * 100 / len(tasks):.1f}s per 100 tasks); "
      f"sampling {phases['sample_s']:.1f}s, verifying {phases['verify_s']:.1f}s")
print(json.dumps({"tasks": len(tasks), "n": args.n, "seconds": round(secs, 2),
                  "s_per_100_tasks": round(secs * 100 / len(tasks), 2), **{k: round(v, 2) for k, v in phases.items()},
                  "tokens_per_s": round(rep.metrics["tokens_per_s"], 1)}))
