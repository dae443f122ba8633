"""`codechat compare`: RL algorithms from one SFT checkpoint, at an equal budget of sampled completions, over seeds.

    codechat compare --out runs/compare                       # trains the demo's SFT model first
    codechat compare --sft runs/demo --seeds 0,1,2 --budget 5120 --methods grpo,rft-grpo

Methods (each a list of `codechat train` overrides on top of the demo's settings, see METHODS):
  grpo      group-normalised advantages, PPO clip (clip-higher), 2 inner epochs
  rloo      leave-one-out advantages, same loss and epochs as grpo (only the estimator differs)
  rft       rejection-sampling fine-tuning alone, rounds until the budget is spent
  rft-grpo  one RFT round (the demo's warm-up), then GRPO with the rest of the budget
  dpo       online DPO on (passing, failing) pairs from groups
The budget counts rollout completions (the trainer's cumulative `samples`); evaluation samples are not counted.
Writes OUT/compare.md (final held-out pass@1 mean +- std over seeds, samples to reach a target pass rate,
zero-variance share of groups, clip fraction), OUT/compare.png (held-out pass@1 against samples) and
OUT/compare.json. Runs that finished are reused, so an interrupted compare picks up where it stopped.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "compare GRPO, RLOO, RFT, RFT->GRPO and DPO from one SFT checkpoint at an equal sample budget"

RL = ["rl.prompts_per_step=16", "rl.group_size=8"]
METHODS: dict[str, list[str]] = {
    "grpo": ["stages=[grpo]", *RL],
    "rloo": ["stages=[rloo]", *RL],
    "rft": ["stages=[rft]"],
    "rft-grpo": ["stages=[rft,grpo]", "rft.rounds=1", *RL],
    "dpo": ["stages=[dpo]", "dpo.prompts_per_step=16", "dpo.group_size=8", "dpo.pairs_per_step=32", "dpo.lr=2e-5",
            "algo.dpo_beta=0.1"],
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="runs/compare", help="output directory (default runs/compare)")
    p.add_argument("--sft", help="SFT model dir or run dir to start from (default: train the demo's SFT into OUT/sft)")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated (default {','.join(METHODS)})")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--budget", type=int, default=5120, help="sampled completions per run (default 5120)")
    p.add_argument("--target", type=float, default=0.0,
                   help="held-out pass@1 to reach for the samples-to-target column (default: SFT's + 0.10)")
    p.add_argument("--eval-every", type=int, default=8, help="evaluate every N steps of a stage (default 8)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides for every run, e.g. eval.n=4")


def method_overrides(method: str, budget: int, cfg) -> list[str]:
    """Stage lengths that spend `budget` completions with the method's batch shape (cfg = demo defaults)."""
    per_round = cfg.rft.prompts * cfg.rft.group_size
    per_rl = 16 * 8
    if method in ("grpo", "rloo"):
        return [f"rl.steps={max(1, budget // per_rl)}"]
    if method == "rft":
        return [f"rft.rounds={max(1, budget // per_round)}"]
    if method == "rft-grpo":
        return [f"rl.steps={max(1, (budget - per_round) // per_rl)}"]
    if method == "dpo":
        return [f"dpo.steps={max(1, budget // (16 * 8))}"]
    raise KeyError(method)


def finished(run_dir: Path) -> bool:
    return (run_dir / "metrics.jsonl").is_file() and (run_dir / "done").is_file()


def run_one(run_dir: Path, overrides: list[str]) -> None:
    import shutil

    from codechat.demo import demo_config
    from codechat.train import train

    if finished(run_dir):
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    train(demo_config(str(run_dir), overrides=overrides))
    (run_dir / "done").write_text("")


def curve(run_dir: Path) -> list[tuple[int, float]]:
    """(samples, held-out pass@1) at every evaluation of a run."""
    from codechat.train.metrics import read_metrics

    return [(r.get("samples", 0), r["eval/pass@1"]) for r in read_metrics(run_dir) if "eval/pass@1" in r]


def run_stats(run_dir: Path, target: float) -> dict:
    from codechat.train.metrics import read_metrics

    rows = read_metrics(run_dir)
    ev = [r for r in rows if "eval/pass@1" in r]

    def mean(key):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return sum(vals) / len(vals) if vals else None
    clip = [r.get("clip_frac_low", 0) + r.get("clip_frac_high", 0) for r in rows if "clip_frac_low" in r]
    reach = next((r.get("samples", 0) for r in ev if r["eval/pass@1"] >= target), None)
    steps = [r["eval/pass@1"] for r in ev]
    return {"final_pass1": ev[-1]["eval/pass@1"], "final_greedy": ev[-1].get("eval/greedy_pass@1"),
            "samples": ev[-1].get("samples", 0), "reach": reach, "zero_var": mean("zero_var_frac"),
            "clip": sum(clip) / len(clip) if clip else None,
            "wobble": sum(abs(a - b) for a, b in zip(steps[1:], steps[:-1])) / max(len(steps) - 1, 1),
            "time_s": rows[-1]["time"]}


def mean_std(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    return m, (sum((x - m) ** 2 for x in xs) / max(len(xs) - 1, 1)) ** 0.5


def fmt(v, pct=True):
    return "–" if v is None else (f"{v:.1%}" if pct else f"{v:.0f}")


def table(stats: dict[str, list[dict]], sft_pass1: float, target: float, budget: int) -> str:
    out = [f"SFT checkpoint: held-out pass@1 {sft_pass1:.1%}; target {target:.1%}; budget {budget} completions per run.",
           "", "| method | final pass@1 (mean ± std) | final greedy | samples to target (reached/seeds) | "
               "zero-variance groups | clip fraction | eval-to-eval change | wall time / run |",
           "|---|---|---|---|---|---|---|---|"]
    for m, runs in stats.items():
        p, s = mean_std([r["final_pass1"] for r in runs])
        g = [r["final_greedy"] for r in runs if r["final_greedy"] is not None]
        reached = [r["reach"] for r in runs if r["reach"] is not None]
        zv = [r["zero_var"] for r in runs if r["zero_var"] is not None]
        cl = [r["clip"] for r in runs if r["clip"] is not None]
        out.append(f"| {m} | {p:.1%} ± {s:.1%} | {fmt(sum(g) / len(g) if g else None)} | "
                   f"{fmt(sum(reached) / len(reached) if reached else None, False)} ({len(reached)}/{len(runs)}) | "
                   f"{fmt(sum(zv) / len(zv) if zv else None)} | {fmt(sum(cl) / len(cl) if cl else None)} | "
                   f"{mean_std([r['wobble'] for r in runs])[0]:.1%} | "
                   f"{mean_std([r['time_s'] for r in runs])[0] / 60:.1f} min |")
    return "\n".join(out)


def differences(stats: dict[str, list[dict]], seeds: list[int]) -> list[str]:
    """Final held-out pass@1 of each method minus the first method's, with a bootstrap interval paired by seed
    (run i of every method used seed i: same SFT start and data order). Few seeds make it coarse."""
    from codechat.evaluation.stats import paired_bootstrap

    methods = list(stats)
    if len(methods) < 2:
        return []
    base = [r["final_pass1"] for r in stats[methods[0]]]
    lines = [f"Difference in final pass@1 from {methods[0]}, paired by seed ({len(seeds)} seeds):"]
    for m in methods[1:]:
        lines.append(f"- {m} - {methods[0]}: {paired_bootstrap(base, [r['final_pass1'] for r in stats[m]])}")
    return lines


def plot(curves: dict[str, list[list[tuple[int, float]]]], sft_pass1: float, out: Path) -> None:
    from codechat.plotting import figure, save

    fig, ax = figure(7, 4)
    for i, (m, runs) in enumerate(curves.items()):
        for j, c in enumerate(runs):
            xs, ys = zip(*([(0, sft_pass1)] + c))
            ax.plot(xs, ys, color=f"C{i}", alpha=0.35, lw=1)
        n = min(len(c) for c in runs)
        if n:
            xs = [sum(c[k][0] for c in runs) / len(runs) for k in range(n)]
            ys = [sum(c[k][1] for c in runs) / len(runs) for k in range(n)]
            ax.plot([0] + xs, [sft_pass1] + ys, color=f"C{i}", lw=2, marker="o", ms=3, label=f"{m} (mean)")
    ax.set_xlabel("sampled completions (rollouts)")
    ax.set_ylabel("held-out pass@1 (T=1)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, out)


def sft_model(args, out: Path, cfg) -> tuple[str, float]:
    """The SFT model directory (training it with the demo's settings if --sft is not given) and its held-out
    pass@1 under the runs' eval settings (evaluated once, cached in OUT/sft_eval.json)."""
    from codechat.rundir import resolve_model

    src = Path(args.sft) if args.sft else out / "sft"
    if not args.sft:
        run_one(src, ["stages=[sft]", *args.overrides])
    model = resolve_model(str(src))
    cache = out / "sft_eval.json"
    if cache.is_file() and json.loads(cache.read_text()).get("model") == model:
        return model, json.loads(cache.read_text())["pass@1"]
    from codechat.config import ModelConfig
    from codechat.evaluation.evaluate import evaluate_policy
    from codechat.policy import load_policy
    from codechat.tasks import load_tasks
    from codechat.verifier.verify import Verifier

    tasks = load_tasks(cfg.data.eval)[:cfg.data.max_eval_tasks or None]
    with Verifier(cfg.verifier) as verifier:
        rep = evaluate_policy(load_policy(ModelConfig(path=model)), verifier, tasks, n=cfg.eval.n, ks=[1],
                              temperature=cfg.eval.temperature, greedy=cfg.eval.greedy, sampling=cfg.sampling,
                              seed=cfg.seed + 99)
    cache.write_text(json.dumps({"model": model, **rep.metrics}))
    return model, rep.metrics["pass@1"]


def run(args: argparse.Namespace) -> int:
    from codechat import CodechatError
    from codechat.demo import demo_config

    methods = [m for m in args.methods.split(",") if m]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise CodechatError(f"compare: unknown method(s) {', '.join(bad)} (valid: {', '.join(METHODS)})")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = demo_config(str(out), overrides=args.overrides)
    model, sft_pass1 = sft_model(args, out, base)
    target = args.target or round(sft_pass1 + 0.10, 3)
    stats, curves = {}, {}
    for m in methods:
        for seed in seeds:
            run_dir = out / f"{m}-seed{seed}"
            print(f"compare: {m} seed {seed} -> {run_dir}")
            run_one(run_dir, [*METHODS[m], f"model.path={model}", f"seed={seed}", f"eval.every={args.eval_every}",
                              *method_overrides(m, args.budget, base), *args.overrides])
            stats.setdefault(m, []).append(run_stats(run_dir, target))
            curves.setdefault(m, []).append(curve(run_dir))
    text = "\n\n".join([table(stats, sft_pass1, target, args.budget), "\n".join(differences(stats, seeds))])
    (out / "compare.md").write_text(text + "\n\n![pass@1 vs samples](compare.png)\n")
    (out / "compare.json").write_text(json.dumps({"sft_model": model, "sft_pass1": sft_pass1, "target": target,
                                                  "budget": args.budget, "seeds": seeds, "runs": stats,
                                                  "curves": curves}, indent=1))
    plot(curves, sft_pass1, out / "compare.png")
    print(text)
    print(f"\n{out / 'compare.md'}  {out / 'compare.png'}")
    return 0
