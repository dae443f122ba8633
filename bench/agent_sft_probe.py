"""What makes the from-scratch tiny model learn the tool protocol: SFT variants on repository tasks, probed.

    OMP_NUM_THREADS=1 python bench/agent_sft_probe.py --steps 40 \
        --variant json= --variant compact=agent.call_format=compact \
        --variant compact-2k=agent.call_format=compact,model.path=tiny-agent

Each variant is the agent demo's `--quick` SFT run (codechat/demos/agent.py: AGENT + AGENT_QUICK, expert
transcripts of `builtin:repo-mini`) for `--steps` steps with the variant's overrides (comma-separated
`codechat train` overrides after `NAME=`), then `--n` sampled episodes (T=1) per task of the same tasks; with
`--full`, the full demo's SFT run (AGENT: `builtin:repo-train`) evaluated on `builtin:repo-heldout` (its first
`--eval-tasks` tasks). The first
variant is the baseline. Per variant: `valid_calls` (share of model turns that parse as a well-formed call of the
variant's format), `ok_calls` (share whose tool succeeded), `submitted` (share of episodes that call submit),
`resolve@1`, `truncated`, `expert_tokens` (mean tokens of an SFT transcript), `loss` (last SFT step's), `sft_s`
and `eval_s` (wall seconds). Ends with one JSON line: {"steps", "variants": {NAME: {...}}}.
"""
import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from codechat.demos.agent import AGENT_EVAL, agent_config, evaluate_stage
from codechat.train import train
from codechat.train.metrics import read_metrics

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=40)
ap.add_argument("--n", type=int, default=2, help="sampled episodes per task")
ap.add_argument("--variant", action="append", default=[], help="NAME=override,override (first: the baseline)")
ap.add_argument("--run-dir", default="", help="keep the runs here (default: a temporary directory)")
ap.add_argument("--full", action="store_true", help="the full demo's SFT (AGENT: builtin:repo-train), evaluated on "
                "builtin:repo-heldout, instead of --quick's (repo-mini, evaluated on itself)")
ap.add_argument("--eval-tasks", type=int, default=0, help="evaluate on the first K tasks only (0 = all)")
args = ap.parse_args()
torch.set_num_threads(1)

variants = args.variant or ["json=", "compact=agent.call_format=compact"]
root = Path(args.run_dir or tempfile.mkdtemp(prefix="agent-probe-"))
out: dict[str, dict] = {}
for v in variants:
    name, _, rest = v.partition("=")
    overrides = ["log.progress=false", f"sft.steps={args.steps}"] + [o for o in rest.split(",") if o]
    cfg = agent_config(str(root / name), "sft", quick=not args.full, overrides=overrides)
    t0 = time.monotonic()
    train(cfg)
    t1 = time.monotonic()
    m = evaluate_stage(cfg, root / name / "sft", AGENT_EVAL if args.full else cfg.data.train, args.n,
                       root / name / "eval", args.eval_tasks)
    t2 = time.monotonic()
    eps = [json.loads(line) for line in (root / name / "eval" / "samples.jsonl").read_text().splitlines()]
    turns = [u for e in eps for u in e["turns"]]
    logs = read_metrics(root / name / "sft")
    loss = [r["loss"] for r in logs if "loss" in r]
    expert = next((r["sft/expert_tokens_mean"] for r in logs if "sft/expert_tokens_mean" in r), None)
    out[name] = {"overrides": rest, "valid_calls": sum(bool(u["tool"]) for u in turns) / max(1, len(turns)),
                 "ok_calls": sum(u["ok"] for u in turns) / max(1, len(turns)), "submitted": m["submitted"],
                 "resolve@1": m["resolve@1"], "truncated": m["truncated"], "turns": m["turns"],
                 "expert_tokens": expert, "loss": loss[-1] if loss else None,
                 "sft_s": round(t1 - t0, 1), "eval_s": round(t2 - t1, 1)}
    print(name, out[name], flush=True)
print(json.dumps({"steps": args.steps, "n": args.n, "variants": out}))
