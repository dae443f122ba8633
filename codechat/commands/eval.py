"""`codechat eval`: pass@k (unbiased estimator) of a model, or of existing completions, on a task file.

    codechat eval --model runs/x --tasks builtin:synthetic-heldout --n 10 --k 1,5,10
    codechat eval --completions samples.jsonl --tasks ../shared/data/mbpp/mbpp.jsonl
    codechat eval --compare runs/a/eval runs/b/eval
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "evaluate pass@k of a model or of a completions file; compare two evaluations"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="model directory, preset name, or run directory (its best/last checkpoint)")
    p.add_argument("--tasks", help="task file or builtin[:NAME]")
    p.add_argument("--completions", help="JSONL of {task_id, completion[, sample_id]} to score instead of sampling")
    p.add_argument("--n", type=int, default=10, help="samples per task (default 10)")
    p.add_argument("--k", default="1,5,10", help="comma-separated k values (default 1,5,10)")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default 0.8)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="generation limit (default 256)")
    p.add_argument("--greedy", action="store_true", help="also report greedy pass@1 (one extra sample per task)")
    p.add_argument("--limit", type=int, default=0, help="evaluate only the first N tasks")
    p.add_argument("--out", help="output directory (default: RUN_DIR/eval or eval-<name>)")
    p.add_argument("--workers", type=int, default=0, help="verifier workers (default: one per core)")
    p.add_argument("--verifier-backend", default="local", choices=["local", "ray"], help="sandbox pool: local or ray")
    p.add_argument("--timeout", type=float, default=None, help="per-program time limit in seconds")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two eval output directories")


def markdown_table(metrics: dict, name: str) -> str:
    keys = [k for k in metrics if k.startswith(("pass@", "greedy", "base", "plus"))] + \
           [k for k in metrics if k.startswith("status/")] + [k for k in ("mean_len", "tokens_per_s") if k in metrics]
    rows = [f"| {name} | |", "|---|---|"] + [f"| {k} | {metrics[k]:.4g} |" for k in keys]
    return "\n".join(rows) + "\n"


def write_report(report, out: Path, name: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "samples.jsonl", "w") as f:
        for s in report.samples:
            f.write(json.dumps(s) + "\n")
    (out / "summary.json").write_text(json.dumps({"metrics": report.metrics, "per_task": report.per_task}, indent=1))
    (out / "summary.md").write_text(markdown_table(report.metrics, name))


def compare(a: str, b: str) -> str:
    from codechat import CodechatError

    runs = []
    for d in (a, b):
        f = Path(d) / "summary.json"
        if not f.is_file():
            raise CodechatError(f"{d}: no summary.json (not an eval output directory)")
        runs.append(json.loads(f.read_text()))
    lines = [f"| metric | {a} | {b} | delta |", "|---|---|---|---|"]
    for k in sorted(set(runs[0]["metrics"]) & set(runs[1]["metrics"])):
        x, y = runs[0]["metrics"][k], runs[1]["metrics"][k]
        lines.append(f"| {k} | {x:.4f} | {y:.4f} | {y - x:+.4f} |")
    pa, pb = runs[0]["per_task"], runs[1]["per_task"]

    def solved(t):
        return t.get("greedy", t.get("c", 0) > 0)
    gained = sorted(t for t in set(pa) & set(pb) if solved(pb[t]) and not solved(pa[t]))
    lost = sorted(t for t in set(pa) & set(pb) if solved(pa[t]) and not solved(pb[t]))
    lines += ["", f"gained ({len(gained)}): {', '.join(gained[:50])}", f"lost ({len(lost)}): {', '.join(lost[:50])}"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from codechat import CodechatError

    if args.compare:
        print(compare(*args.compare))
        return 0
    if not args.tasks:
        raise CodechatError("eval: --tasks is required (a task file or builtin[:NAME])")
    if bool(args.model) == bool(args.completions):
        raise CodechatError("eval: give exactly one of --model or --completions")
    try:
        ks = sorted({int(k) for k in args.k.split(",") if k.strip()})
    except ValueError:
        raise CodechatError(f"eval: --k must be comma-separated integers, got '{args.k}'") from None
    from codechat.config import SamplingConfig, VerifierConfig
    from codechat.evaluation.evaluate import evaluate_completions, evaluate_policy
    from codechat.tasks import load_tasks
    from codechat.verifier.factory import make_verifier

    tasks = load_tasks(args.tasks)
    if args.limit:
        tasks = tasks[:args.limit]
    vcfg = VerifierConfig(workers=args.workers, backend=args.verifier_backend)
    if args.timeout:
        vcfg.timeout_s = args.timeout
    with make_verifier(vcfg) as verifier:
        if args.completions:
            report = evaluate_completions(verifier, tasks, args.completions, ks)
            name = Path(args.completions).stem
        else:
            from codechat.config import ModelConfig
            from codechat.policy import load_policy
            from codechat.train.checkpoint import resolve_model
            policy = load_policy(ModelConfig(path=resolve_model(args.model)))
            sampling = SamplingConfig(top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=args.seed)
            report = evaluate_policy(policy, verifier, tasks, n=args.n, ks=ks, temperature=args.temperature,
                                     greedy=args.greedy, sampling=sampling, seed=args.seed)
            name = Path(args.model).name
    out = Path(args.out) if args.out else (Path(args.model) / "eval" if args.model and (Path(args.model) / "checkpoints").is_dir()
                                           else Path(f"eval-{name}"))
    write_report(report, out, name)
    print(markdown_table(report.metrics, name), end="")
    print(f"per-sample results: {out / 'samples.jsonl'}; summary: {out / 'summary.json'}")
    return 0
