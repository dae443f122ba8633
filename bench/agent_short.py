"""The agent demo's short run (the suite's rise test) over several seeds: resolve@1 before and after RFT.

    OMP_NUM_THREADS=1 python bench/agent_short.py --seeds 0,1,2,3

Each seed: `codechat/demos/agent.py`'s AGENT + AGENT_QUICK + AGENT_SHORT on repo-mini's first task only (SFT on
its 4 expert transcripts, 8 sampled episodes, one RFT round, 8 episodes again; evaluated on the trained task).
Per seed: resolve@1 after SFT and after RFT, submitted shares, RFT's kept count and the wall seconds. Ends with
one JSON line: {"runs": {SEED: {...}}, "min_rise": .., "rises": N of M}.
"""
import argparse
import json
import tempfile
import time

import torch

from codechat import plugins
from codechat.demos import agent as demo_agent
from codechat.tasks.repo_loaders import load_repo_tasks
from codechat.io.runlog import read_metrics

ap = argparse.ArgumentParser()
ap.add_argument("--seeds", default="0", help="comma-separated seeds")
ap.add_argument("--n", type=int, default=8, help="sampled episodes per evaluation")
ap.add_argument("--threads", type=int, default=1, help="torch threads (the suite runs with 1)")
args = ap.parse_args()
torch.set_num_threads(args.threads)


def first_task(spec, repos=None):
    return load_repo_tasks(spec, repos)[:1]


plugins.load_repo_tasks = demo_agent.load_repo_tasks = first_task  # what the test's fixture does
runs = {}
with tempfile.TemporaryDirectory() as tmp:
    for seed in [int(s) for s in args.seeds.split(",")]:
        t0 = time.monotonic()
        root, (sft, end) = demo_agent.run_agent_demo(f"{tmp}/s{seed}", quick=True, eval_n=args.n,
                                                     overrides=["log.progress=false", f"seed={seed}"]
                                                     + demo_agent.AGENT_SHORT)
        kept = [r["rft/kept"] for r in read_metrics(root / "grpo") if "rft/kept" in r]
        runs[seed] = {"sft": sft.resolve1, "rft": end.resolve1, "rise": end.resolve1 - sft.resolve1,
                      "submitted": [sft.submitted, end.submitted], "kept": kept[0] if kept else 0,
                      "wall_s": round(time.monotonic() - t0, 1)}
        print(seed, runs[seed], flush=True)
rises = [r["rise"] for r in runs.values()]
print(json.dumps({"runs": runs, "min_rise": min(rises), "rises": f"{sum(x > 0 for x in rises)} of {len(rises)}"}))
