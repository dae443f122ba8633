"""What gives GRPO variance to learn from on repository episodes: GRPO variants from one SFT model, probed.

    OMP_NUM_THREADS=1 python bench/agent_grpo_probe.py --sft runs/demo-agent-quick/sft \
        --variant base= --variant lr1e-3=rl.lr=1e-3 --variant g8=rl.group_size=8,rl.prompts_per_step=2

Each variant is the agent demo's `--quick` GRPO run (`stages=[rft,grpo]` for the RFT round first, `stages=[rft]`
for RFT alone) (codechat/demos/agent.py: AGENT + AGENT_QUICK) starting from
the weights in `--sft` (a finished demo's sft/ folder, or any model directory) with the variant's overrides
(comma-separated `codechat train` overrides after `NAME=`; commas inside [...] stay: `stages=[rft,grpo]`),
then `--n` sampled episodes (T=1) per task of the
train set (the quick demo evaluates on its train tasks; `--full`: the full demo's GRPO run, evaluated on the first
`--eval-tasks` tasks of `builtin:repo-heldout`, or of `--eval-set`). The SFT model is evaluated once the same way (`sft`; not with
`--no-sft-eval`).
Per variant: `zero_var` (mean share of groups whose episodes all got the same reward, over the steps),
`pass_rates` (the train episodes' resolve rate per step), `resolve@1` and `resolve@N` after, their change from
the SFT model, `submitted`, `truncated`, `grpo_s` and `eval_s` (wall seconds). `--placebo`: each variant is run
a second time as NAME-placebo with `rl.placebo=true` (each step's advantages shuffled across the batch's episodes:
the same size of update, no reward signal; codechat/train/placebo.py), and NAME gets `real-placebo`, the paired
bootstrap interval over tasks of resolve@1 (real - placebo). Ends with one JSON line:
{"sft": {...}, "n": N, "variants": {NAME: {...}}}.
"""
import argparse
import json
import re
import tempfile
import time
from pathlib import Path

import torch

from codechat.demos.agent import AGENT_EVAL, agent_config, evaluate_stage
from codechat.evaluation.stats import paired_bootstrap
from codechat.train import train
from codechat.train.metrics import read_metrics

ap = argparse.ArgumentParser()
ap.add_argument("--sft", required=True, help="the SFT model to start every variant from")
ap.add_argument("--n", type=int, default=4, help="sampled episodes per task of each evaluation")
ap.add_argument("--variant", action="append", default=[], help="NAME=override,override")
ap.add_argument("--run-dir", default="", help="keep the runs here (default: a temporary directory)")
ap.add_argument("--full", action="store_true", help="the full demo's GRPO (AGENT: builtin:repo-train), evaluated "
                "on builtin:repo-heldout, instead of --quick's (repo-mini, evaluated on itself)")
ap.add_argument("--eval-tasks", type=int, default=0, help="evaluate on the first K tasks only (0 = all)")
ap.add_argument("--eval-set", default="", help="evaluate on this task set instead (e.g. builtin:repo-train with "
                "--full, to choose settings without looking at the held-out tasks)")
ap.add_argument("--placebo", action="store_true", help="run each variant again with rl.placebo=true (the control)")
ap.add_argument("--no-sft-eval", action="store_true", help="skip the SFT model's evaluation (done already)")
args = ap.parse_args()
torch.set_num_threads(1)

root = Path(args.run_dir or tempfile.mkdtemp(prefix="agent-grpo-probe-"))
sft_dir = Path(args.sft)


def evaluate(cfg, model: Path, out: Path) -> dict:
    t0 = time.monotonic()
    m = evaluate_stage(cfg, model, args.eval_set or (AGENT_EVAL if args.full else cfg.data.train), args.n, out,
                       args.eval_tasks)
    keys = ("resolve@1", f"resolve@{args.n}", "submitted", "truncated", "tested_before_submit", "turns")
    return {k: m[k] for k in keys} | {"eval_s": round(time.monotonic() - t0, 1)}


base_cfg = agent_config(str(root), "grpo", quick=not args.full, overrides=[f"model.path={sft_dir}"])
sft = {"resolve@1": float("nan")} if args.no_sft_eval else evaluate(base_cfg, sft_dir, root / "eval-sft")
print("sft", sft, flush=True)


def per_task(out_dir: Path) -> dict[str, float]:
    """task id -> share of its evaluated episodes resolved."""
    tasks = json.loads((out_dir / "summary.json").read_text())["per_task"]
    return {t: d["c"] / d["n"] for t, d in tasks.items()}


out: dict[str, dict] = {}
runs = []
for v in args.variant or ["base="]:
    name, _, rest = v.partition("=")
    runs.append((name, rest))
    if args.placebo:
        runs.append((f"{name}-placebo", rest + ",rl.placebo=true" if rest else "rl.placebo=true"))
for name, rest in runs:
    mine = [o for o in re.split(r",(?![^\[]*\])", rest) if o]  # split on commas outside [...]
    cfg = agent_config(str(root / name), "grpo", quick=not args.full,
                       overrides=["log.progress=false", f"model.path={sft_dir}"] + mine)
    t0 = time.monotonic()
    train(cfg)
    grpo_s = round(time.monotonic() - t0, 1)
    steps = [r for r in read_metrics(root / name / "grpo") if r.get("pass_rate") is not None]
    res = evaluate(cfg, root / name / "grpo", root / name / "eval")
    res |= {"overrides": rest, "zero_var": sum(r["zero_var_frac"] for r in steps) / max(1, len(steps)),
            "pass_rates": [round(r["pass_rate"], 3) for r in steps], "grpo_s": grpo_s,
            "d_resolve@1": round(res["resolve@1"] - sft["resolve@1"], 4)}
    out[name] = res
    if name.endswith("-placebo") and name[:-len("-placebo")] in out:
        real, plac = per_task(root / name[:-len("-placebo")] / "eval"), per_task(root / name / "eval")
        ids = sorted(real)
        ci = paired_bootstrap([plac[t] for t in ids], [real[t] for t in ids])
        out[name[:-len("-placebo")]]["real-placebo"] = {"diff": ci.diff, "lo": ci.lo, "hi": ci.hi, "n": ci.n}
        print(name[:-len("-placebo")], "real - placebo resolve@1:", ci, flush=True)
    print(name, res, flush=True)
print(json.dumps({"sft_model": str(sft_dir), "sft": sft, "n": args.n, "variants": out}))
