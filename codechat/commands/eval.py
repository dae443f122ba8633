"""`codechat eval`: pass@k (unbiased estimator) of a model, or of existing completions, on a task file.

    codechat eval --model runs/x --tasks builtin:synthetic-heldout          # the run's own eval settings
    codechat eval --model runs/x --tasks mbpp.jsonl:test --n 10 --k 1,5,10 --checkpoint best
    codechat eval --completions samples.jsonl --tasks ../shared/data/mbpp/mbpp.jsonl
    codechat eval --compare runs/a/eval/synthetic-heldout runs/b/eval/synthetic-heldout
    codechat eval --endpoint http://localhost:8000 --model Qwen/Qwen2.5-Coder-1.5B-Instruct --tasks builtin --n 5

Defaults are the training evaluation's (codechat/train/common.py `evaluate_now`): for a run directory its
config's eval.n, eval.k, eval.temperature, eval.greedy, sampling (top_p, top_k, max_new_tokens, stop), seed + 99
and prompt format, so the command reproduces the run's logged eval numbers; for other models the same from the
config defaults. Output: RUN/eval/SET[-best] for a run, else eval-NAME/SET (or --out); a folder that holds another
task set's or model's results is never overwritten. summary.json records what was evaluated and how.
With --endpoint the model is served elsewhere (an OpenAI-compatible API: evaluation/endpoint.py) and --model is
its name there; sampling defaults are the config defaults.
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from codechat import CodechatError
from codechat.commands import repo
from codechat.config import EvalConfig, ModelConfig, RunConfig, SamplingConfig, ThinkingConfig, VerifierConfig
from codechat.evaluation.compare import compare
from codechat.evaluation.endpoint import API_KEY_ENV, Endpoint, EndpointConfig, api_key, evaluate_endpoint
from codechat.evaluation.evaluate import evaluate_completions, evaluate_policy
from codechat.evaluation.thinking import load_reference
from codechat.io.rundir import is_run_dir, resolve_model, run_config, section
from codechat.tasks import load_tasks
from codechat.tasks.repo_loaders import is_repo_spec
from codechat.tasks.splits import split_spec
from codechat.verifier.factory import make_verifier


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="model directory, preset name, or run directory (its final checkpoint); "
                                   "with --endpoint: the model's name on the server")
    p.add_argument("--endpoint", metavar="URL",
                   help="evaluate the model served at URL by an OpenAI-compatible API (vllm serve, SGLang, TGI)")
    p.add_argument("--api", default=None, choices=["chat", "completions"],
                   help="--endpoint: /v1/chat/completions with the prompt as one user turn (default) or "
                        "/v1/completions continuing the prompt as it is")
    p.add_argument("--api-key", help=f"--endpoint: bearer token (default ${API_KEY_ENV})")
    p.add_argument("--concurrency", type=int, default=None, help="--endpoint: requests in flight (default 8)")
    p.add_argument("--retries", type=int, default=None,
                   help="--endpoint: retries per request on 429, 5xx and dropped connections (default 5)")
    p.add_argument("--checkpoint", default="final", choices=["final", "best"],
                   help="which checkpoint of a run directory: final (default) or best (eval greedy pass@1)")
    p.add_argument("--tasks", help="task file, FILE:SPLIT for MBPP files (train, test, validation), or builtin[:NAME]")
    p.add_argument("--completions", help="JSONL of {task_id, completion[, sample_id]} to score instead of sampling")
    p.add_argument("--n", type=int, default=None, help="samples per task (default: the training eval's, eval.n)")
    p.add_argument("--k", default=None, help="comma-separated k values, each <= n (default: eval.k)")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature (default eval.temperature)")
    p.add_argument("--top-p", type=float, default=None, help="nucleus sampling mass (default sampling.top_p)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="generation limit (default sampling.max_new_tokens)")
    p.add_argument("--greedy", action=argparse.BooleanOptionalAction, default=None,
                   help="also report greedy pass@1, one extra sample per task (default eval.greedy)")
    p.add_argument("--limit", type=int, default=0, help="evaluate only the first N tasks")
    p.add_argument("--out", help="output directory (default RUN_DIR/eval/SET, else eval-NAME/SET)")
    p.add_argument("--workers", type=int, default=0, help="verifier workers (default: one per core)")
    p.add_argument("--verifier-backend", default="local", choices=["local", "ray"], help="sandbox pool: local or ray")
    p.add_argument("--timeout", type=float, default=None, help="per-program time limit in seconds")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: the run's seed + 99)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two eval output directories")
    p.add_argument("--repos", help="repository tasks: directory holding the SWE-bench checkouts (owner__name)")
    p.add_argument("--envs", help="repository tasks: directory of test environments (codechat repo env build); "
                                  "default: codechat's own interpreter and pytest")
    p.add_argument("--log-dir", help="repository tasks: per-judgement logs LOG_DIR/TASK_ID/N/ "
                                     "(patch, test output, report)")
    p.add_argument("--memory-mb", type=int, default=None,
                   help="repository tasks: memory limit of a test run (default 2048)")
    p.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                   help="strip <think> blocks before verifying and report pass@1 and length by mode "
                        "(default: the run's verifier.thinking, else off)")
    p.add_argument("--reference", metavar="EVAL_DIR",
                   help="an earlier eval output (the reference model's): report by difficulty bucket of its "
                        "per-task pass rates")


def set_name(spec: str) -> str:
    """Folder name of a task set: builtin:synthetic-heldout -> synthetic-heldout, mbpp.jsonl:test -> mbpp-test."""
    if spec.startswith("builtin"):
        return spec.split(":", 1)[1] if ":" in spec else "builtin"
    path, split = split_spec(spec)
    name = Path(path).name
    for suffix in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return (name or "tasks") + (f"-{split}" if split else "")


def eval_settings(args: argparse.Namespace, model_path: str | None) -> dict:
    """The settings of this evaluation: flags given, else the training evaluation's (run config or defaults)."""
    cfg = run_config(model_path) if model_path else None
    ev, sa = {**vars(EvalConfig()), **section(cfg, "eval")}, {**vars(SamplingConfig()), **section(cfg, "sampling")}
    seed = (cfg or {}).get("seed", RunConfig().seed) + 99  # evaluate_now's seed
    s = {"n": ev["n"] if args.n is None else args.n,
         "temperature": ev["temperature"] if args.temperature is None else args.temperature,
         "greedy": ev["greedy"] if args.greedy is None else args.greedy,
         "top_p": sa["top_p"] if args.top_p is None else args.top_p, "top_k": sa["top_k"],
         "max_new_tokens": sa["max_new_tokens"] if args.max_new_tokens is None else args.max_new_tokens,
         "stop": list(sa["stop"]), "seed": seed if args.seed is None else args.seed,
         "chat": section(cfg, "model").get("chat") is True}
    think = {k: v for k, v in section(section(cfg, "verifier"), "thinking").items() if k in ("open", "close")}
    enabled = section(section(cfg, "verifier"), "thinking").get("enabled") is True
    s["thinking"] = {**think, "enabled": enabled if args.thinking is None else args.thinking}
    if args.k is None:
        s["k"] = sorted(set(ev["k"]))
    else:
        try:
            s["k"] = sorted({int(k) for k in args.k.split(",") if k.strip()})
        except ValueError:
            raise CodechatError(f"eval: --k must be comma-separated integers, got '{args.k}'") from None
    if not s["k"] or s["k"][0] < 1:
        raise CodechatError(f"eval: --k values must be >= 1, got {s['k']}")
    if model_path is not None or getattr(args, "endpoint", None):
        if s["n"] < 1:
            raise CodechatError(f"eval: --n must be >= 1 (samples per task), got {s['n']}")
        big = [k for k in s["k"] if k > s["n"]]
        if big:
            raise CodechatError(f"eval: --k {','.join(map(str, big))} exceeds --n {s['n']}: pass@k needs k <= n "
                                f"samples per task (raise --n or lower --k)")
    return s


def out_dir(args: argparse.Namespace, tasks_name: str) -> Path:
    if args.out:
        return Path(args.out)
    if args.model and not getattr(args, "endpoint", None) and is_run_dir(args.model):
        return Path(args.model) / "eval" / (tasks_name + ("-best" if args.checkpoint == "best" else ""))
    source = Path(args.model or args.completions).name.removesuffix(".jsonl") or "model"
    return Path(f"eval-{source}") / tasks_name


def check_out(out: Path, provenance: dict) -> None:
    """Refuse to overwrite results of another task set or model (re-running the same evaluation is fine)."""
    f = out / "summary.json"
    if not f.is_file():
        if out.exists() and any(out.iterdir()):
            raise CodechatError(f"{out}: exists and is not an eval output directory; choose another --out")
        return
    try:
        old = json.loads(f.read_text()).get("provenance") or {}
    except (OSError, ValueError):
        old = {}
    keys = ("tasks", "model_path", "completions", "endpoint") + (("model",) if provenance.get("endpoint") else ())
    for key in keys:
        if old.get(key) != provenance.get(key):
            raise CodechatError(f"{out}: holds the results of {key} {old.get(key)!r}, not {provenance.get(key)!r}; "
                                f"choose another --out (or remove it)")


def markdown_table(metrics: dict, name: str) -> str:
    keys = [k for k in metrics if k.startswith(("pass@", "greedy", "base", "plus"))] + \
           [k for k in metrics if k.startswith("status/")] + [k for k in ("mean_len", "tokens_per_s") if k in metrics]
    keys += [k for k in metrics if k.startswith(("thinking/", "difficulty/"))]  # thinking on, --reference
    rows = [f"| {name} | |", "|---|---|"] + [f"| {k} | {metrics[k]:.4g} |" for k in keys]
    return "\n".join(rows) + "\n"


def write_report(report, out: Path, name: str, provenance: dict | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "samples.jsonl", "w") as f:
        for s in report.samples:
            f.write(json.dumps(s) + "\n")
    (out / "summary.json").write_text(json.dumps({"provenance": provenance or {}, "metrics": report.metrics,
                                                  "per_task": report.per_task}, indent=1))
    (out / "summary.md").write_text(markdown_table(report.metrics, name))


def progress_bar(label: str, total: int):
    """(callback, close) drawing a rich progress bar on a terminal's stderr; no-ops when not a terminal."""
    if not sys.stderr.isatty():
        return None, lambda: None
    bar = Progress(TextColumn("eval {task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("tasks"),
                   TimeRemainingColumn(), transient=True)
    bar.start()
    job = bar.add_task(label, total=total)
    return (lambda done, total: bar.update(job, completed=done, total=total)), bar.stop


def run(args: argparse.Namespace) -> int:
    if args.compare:
        print(compare(*args.compare))
        return 0
    if not args.tasks:
        raise CodechatError("eval: --tasks is required (a task file or builtin[:NAME])")
    if is_repo_spec(args.tasks) and args.endpoint:
        raise CodechatError(f"eval: --endpoint evaluates single-answer task sets; {args.tasks} holds repository "
                            f"tasks (agent episodes need a local model)")
    if is_repo_spec(args.tasks):  # agent episodes on repository tasks
        return repo.run_eval(args)
    repo_only = [f for f, v in (("--envs", args.envs), ("--log-dir", args.log_dir), ("--memory-mb", args.memory_mb))
                 if v]
    if repo_only:
        raise CodechatError(f"eval: {', '.join(repo_only)} apply to repository tasks only ({args.tasks} is not one)")
    if bool(args.model) == bool(args.completions):
        raise CodechatError("eval: give exactly one of --model or --completions")
    endpoint_only = [f for f, v in (("--api", args.api), ("--api-key", args.api_key),
                                    ("--concurrency", args.concurrency), ("--retries", args.retries)) if v is not None]
    if endpoint_only and not args.endpoint:
        raise CodechatError(f"eval: {', '.join(endpoint_only)} apply to --endpoint only")
    if args.endpoint and not args.model:
        raise CodechatError("eval: --endpoint needs --model NAME (the model's name on the server)")
    if args.endpoint and ((args.concurrency or 1) < 1 or (args.retries or 0) < 0):
        raise CodechatError(f"eval: --concurrency must be >= 1 and --retries >= 0, got {args.concurrency} "
                            f"and {args.retries}")

    model_path = resolve_model(args.model, args.checkpoint) if args.model and not args.endpoint else None
    s = eval_settings(args, model_path)
    tasks = load_tasks(args.tasks)
    if args.limit:
        tasks = tasks[:args.limit]
    name = set_name(args.tasks)
    prov = {"tasks": args.tasks, "n_tasks": len(tasks), "limit": args.limit, "model": args.model,
            "model_path": model_path, "checkpoint": args.checkpoint if model_path and is_run_dir(args.model)
            else None, "completions": args.completions}
    if args.endpoint:
        prov.update({"endpoint": args.endpoint, "api": args.api or "chat"})
    prov.update(s if args.model else {"k": s["k"], "thinking": s["thinking"]})
    reference = load_reference(args.reference) if args.reference else None
    prov["reference"] = args.reference
    out = out_dir(args, name)
    check_out(out, prov)
    vcfg = VerifierConfig(workers=args.workers, backend=args.verifier_backend,
                          thinking=ThinkingConfig(**s["thinking"]))
    if args.timeout is not None:
        if not args.timeout > 0:
            raise CodechatError(f"eval: --timeout must be a positive number of seconds, got {args.timeout}")
        vcfg.timeout_s = args.timeout
    client = None
    if args.endpoint:
        client = Endpoint(EndpointConfig(url=args.endpoint, model=args.model, api=args.api or "chat",
                                         api_key=api_key(args.api_key),
                                         retries=5 if args.retries is None else args.retries,
                                         concurrency=args.concurrency or 8))
        client.check()
    with make_verifier(vcfg) as verifier:
        sampling = SamplingConfig(top_p=s["top_p"], top_k=s["top_k"], max_new_tokens=s["max_new_tokens"],
                                  stop=s["stop"], seed=s["seed"])
        if client is None and args.completions:
            report = evaluate_completions(verifier, tasks, args.completions, s["k"], thinking=s["thinking"]["enabled"],
                                          reference=reference)
        else:
            if client is not None:
                run = functools.partial(evaluate_endpoint, client)
            else:
                from codechat.policy import load_policy  # torch: `eval --completions` and repo patch files run without it
                run = functools.partial(evaluate_policy, load_policy(ModelConfig(path=model_path, chat=s["chat"])))
            tick, close = progress_bar(name, len(tasks))
            try:
                report = run(verifier, tasks, n=s["n"], ks=s["k"], temperature=s["temperature"], greedy=s["greedy"],
                             sampling=sampling, seed=s["seed"], progress=tick, thinking=s["thinking"]["enabled"],
                             reference=reference)
            finally:
                close()
    write_report(report, out, name, prov)
    print(markdown_table(report.metrics, name), end="")
    print(f"per-sample results: {out / 'samples.jsonl'}; summary: {out / 'summary.json'}")
    return 0
