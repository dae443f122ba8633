"""Benchmark: does `model.compute_dtype: bfloat16` change what GRPO learns? The demo's GRPO stage twice from one checkpoint.

    python bench/autocast_outcome.py --out /tmp/ac            # SFT + RFT once, then GRPO in fp32 and in bf16
    python bench/autocast_outcome.py --out /tmp/ac --base /tmp/ac/base --steps 40 --seeds 0,1

Runs `make demo`'s settings (codechat/demos/demo.py `DEMO`) with `stages=[sft,rft]` into OUT/base (skipped when --base
names a finished run), then for every seed one `stages=[grpo]` run from those weights in fp32 and one with
`model.compute_dtype=bfloat16` (same seed, so the same first batch of prompts), each ending with the demo's held-out
evaluation (`builtin:synthetic-heldout`, 8 samples per task at T=1 and greedy). Reported per variant: held-out
pass@1 and greedy pass@1 at the end (mean over seeds), the GRPO train pass rate over the last 10 steps, and the
median update seconds per step (`time/update_s`). bf16 autocast runs only where the CPU (or GPU) has native bf16
(`policy/precision.py` refuses it elsewhere), so on an AVX2-only machine this script stops with that line.
Ends with one JSON line: {"fp32_pass1", "bf16_pass1", "fp32_greedy", "bf16_greedy", "fp32_update_s",
"bf16_update_s", "update_ratio" (fp32 / bf16), "pass1_diff" (bf16 - fp32, points), "seeds", "steps"}.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from codechat.demos.demo import DEMO  # noqa: E402
from codechat.config.io import load_config  # noqa: E402
from codechat.policy.precision import bf16_native  # noqa: E402
from codechat.train import train  # noqa: E402
from codechat.train.metrics import read_metrics  # noqa: E402


def run(overrides: list[str]) -> Path:
    return Path(train(load_config(None, DEMO + ["log.progress=false", "log.plot=false"] + overrides)))


def figures(run_dir: Path) -> dict:
    rows = list(read_metrics(run_dir))
    ev = [r for r in rows if "eval/pass@1" in r][-1]
    steps = [r for r in rows if r.get("stage") == "grpo" and "time/update_s" in r]
    rates = [r["pass_rate"] for r in steps if r.get("pass_rate") is not None][-10:]
    return {"pass1": ev["eval/pass@1"], "greedy": ev.get("eval/greedy_pass@1", float("nan")),
            "train_pass_last10": statistics.mean(rates) if rates else float("nan"),
            "update_s": statistics.median(r["time/update_s"] for r in steps)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for the runs")
    ap.add_argument("--base", default="", help="a finished sft+rft run to start GRPO from (default: run it)")
    ap.add_argument("--steps", type=int, default=100, help="GRPO steps (the demo's: 100)")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds of the GRPO runs")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    if not bf16_native(a.device):
        sys.exit(f"autocast_outcome: {a.device} has no native bf16, where model.compute_dtype=bfloat16 is emulated and slow")
    out = Path(a.out)
    base = Path(a.base) if a.base else run(["stages=[sft,rft]", f"run_dir={out}/base", f"model.device={a.device}"])
    seeds = [int(s) for s in a.seeds.split(",")]
    res: dict[str, list[dict]] = {"fp32": [], "bf16": []}
    for seed in seeds:
        for name in res:
            d = run(["stages=[grpo]", f"model.path={base}", f"run_dir={out}/{name}-s{seed}", f"seed={seed}",
                     f"rl.steps={a.steps}", f"model.device={a.device}", f"model.compute_dtype={'bfloat16' if name == 'bf16' else 'float32'}"])
            res[name].append(figures(d))
            print(f"[autocast_outcome] seed {seed} {name}: {res[name][-1]}", flush=True)
    mean = {n: {k: statistics.mean(f[k] for f in fs) for k in fs[0]} for n, fs in res.items()}
    print("variant  held-out pass@1  greedy  train pass (last 10)  update s/step")
    for n, m in mean.items():
        print(f"{n:8} {m['pass1']:15.1%} {m['greedy']:7.1%} {m['train_pass_last10']:21.1%} {m['update_s']:14.3f}")
    f, b = mean["fp32"], mean["bf16"]
    print(json.dumps({"fp32_pass1": round(f["pass1"], 4), "bf16_pass1": round(b["pass1"], 4),
                      "fp32_greedy": round(f["greedy"], 4), "bf16_greedy": round(b["greedy"], 4),
                      "fp32_update_s": round(f["update_s"], 4), "bf16_update_s": round(b["update_s"], 4),
                      "update_ratio": round(f["update_s"] / b["update_s"], 3),
                      "pass1_diff": round((b["pass1"] - f["pass1"]) * 100, 2), "seeds": seeds, "steps": a.steps}))


if __name__ == "__main__":
    main()
