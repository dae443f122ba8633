"""`codechat compare`: RL algorithms from one SFT checkpoint, as curves of held-out pass@1 against sampled
completions, over seeds; presets for the design notes' claims.

    codechat compare --out runs/compare                                   # preset curves: 5 methods, 3 budgets
    codechat compare --preset rloo-claim --sft runs/compare/sft --out runs/rloo
    codechat compare --preset warmup-claim --methods rft-grpo --seeds 0 --out runs/warmup   # a share of it
    codechat compare --out runs/rloo --preset rloo-claim --report          # the report of what has finished

Each (method, seed) trains once to the largest budget and is evaluated on every held-out task at each budget
(codechat/compare/runs.py); finished points are kept in OUT/results/METHOD-seedS.json and skipped on rerun, and
an interrupted training segment continues with --resume. Methods and presets: codechat/compare/plan.py. Writes
OUT/compare.md (codechat/compare/report.py) and OUT/compare.png.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from codechat import CodechatError
from codechat.compare.plan import METHODS, PRESETS, RUN, min_budget, parse_ints, parse_methods
from codechat.compare.report import load_results, plot, report
from codechat.compare.runs import Evaluator, run_curve
from codechat.demos.demo import demo_config
from codechat.io.rundir import resolve_model
from codechat.tasks import load_tasks
from codechat.train import train
from codechat.verifier.verify import Verifier


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="runs/compare", help="output directory (default runs/compare)")
    p.add_argument("--preset", default="curves", help="curves (default), rloo-claim or warmup-claim")
    p.add_argument("--sft", help="SFT model dir or run dir to start from (default: train the demo's SFT into OUT/sft)")
    p.add_argument("--methods", help="comma-separated (default: the preset's)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--budgets", help="comma-separated increasing sample budgets, the curve's points (default: the "
                                     "preset's)")
    p.add_argument("--target", type=float, default=0.0,
                   help="held-out pass@1 for the samples-to-target column (default: SFT's + 0.10)")
    p.add_argument("--report", action="store_true", help="train nothing: write the report of the results in OUT")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides for every run, e.g. rl.lr=1e-4")


def sft_done(run_dir: Path) -> bool:
    return (run_dir / "metrics.jsonl").is_file() and (run_dir / "done").is_file()


def sft_point(args, out: Path, overrides: list[str], make_eval) -> tuple[str, dict]:
    """The SFT model dir (training the demo's SFT into OUT/sft unless --sft) and its held-out point, evaluated
    once and cached in OUT/sft_eval.json."""
    src = Path(args.sft) if args.sft else out / "sft"
    if not args.sft and not sft_done(src):
        train(demo_config(str(src), overrides=["stages=[sft]", *overrides]), force=True)
        (src / "done").write_text("")
    model = resolve_model(str(src))
    cache = out / "sft_eval.json"
    if cache.is_file() and json.loads(cache.read_text()).get("model") == model:
        return model, json.loads(cache.read_text())
    point = {"model": model, **make_eval()(model)}
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(point, separators=(",", ":")))
    tmp.replace(cache)
    return model, point


def settings_line(results) -> str:
    """The overrides the results were trained with beyond the method's own, the SFT path, seed and RUN (read
    from the results, so a report of old results shows their settings, not the preset's current ones)."""
    rs = [r for runs in results.values() for r in runs]
    skip = set(RUN) | {o for m in METHODS.values() for o in m}
    last = {o.split("=", 1)[0]: o for o in rs[0].overrides}  # a later override of a key wins, as in train
    extra = [o for o in last.values() if o not in skip and not o.startswith(("model.path=", "seed="))]
    return f"Settings of these results (on top of the demo's): {' '.join(f'`{o}`' for o in extra) or 'none'}."


def run(args: argparse.Namespace) -> int:
    if args.preset not in PRESETS:
        raise CodechatError(f"compare: --preset: unknown preset '{args.preset}' (valid: {', '.join(PRESETS)})")
    preset = PRESETS[args.preset]
    methods = parse_methods(args.methods) if args.methods else preset.methods
    seeds = parse_ints(args.seeds, "--seeds", positive=False)
    budgets = parse_ints(args.budgets, "--budgets") if args.budgets else preset.budgets
    if not 0.0 <= args.target <= 1.0:
        raise CodechatError(f"compare: --target: expected a pass rate in [0, 1], got {args.target}")
    out = Path(args.out)
    overrides = [*preset.overrides, *args.overrides]
    base = demo_config(str(out), overrides=args.overrides)
    for m in methods:
        if budgets[0] < min_budget(m, base):
            raise CodechatError(f"compare: --budgets: {m} needs at least {min_budget(m, base)} completions, "
                                f"got {budgets[0]}")
    if args.report:
        cache = out / "sft_eval.json"
        if not cache.is_file():
            raise CodechatError(f"{out}: no sft_eval.json (not a compare output directory)")
        sft = json.loads(cache.read_text())
        results = load_results(out, methods, seeds)
    else:
        out.mkdir(parents=True, exist_ok=True)
        tasks = load_tasks(base.data.eval)[:base.data.max_eval_tasks or None]
        with Verifier(base.verifier) as verifier:
            ev = Evaluator(tasks, verifier, base)
            model, sft = sft_point(args, out, args.overrides, lambda: ev)
            for m in methods:
                for seed in seeds:
                    run_curve(out, m, seed, budgets, model, base, overrides, ev)
        results = load_results(out, methods, seeds)
    if not results:
        raise CodechatError(f"{out}: no results of {', '.join(methods)} for seeds {args.seeds}")
    target = args.target or round(sft["pass1"] + 0.10, 3)
    points = f"Curve points of this report: {' / '.join(f'{b:,}' for b in budgets)} completions; seeds " \
             f"{', '.join(map(str, seeds))}."  # --budgets / --seeds may differ from the preset's
    text = f"Preset `{args.preset}`: {preset.what}.\n\n{points}\n\n{settings_line(results)}\n\n" + \
        report(results, sft, target, budgets, seeds)
    (out / "compare.md").write_text(text + "\n\n![pass@1 vs samples](compare.png)\n")
    plot(results, sft, out / "compare.png")
    print(text)
    print(f"\n{out / 'compare.md'}  {out / 'compare.png'}")
    return 0
