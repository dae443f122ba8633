"""Repository tasks in `codechat verify` and `codechat eval` (those commands hand over here for repo task sets).

    codechat verify --tasks builtin:repo-heldout --completions patches.jsonl --out verdicts.jsonl
    codechat eval --model runs/x --tasks builtin:repo-heldout --n 4 --k 1,4
    codechat eval --model scripted:reference --tasks ../shared/data/repo/quixbugs     # no model: the reference fixes
A patch line is {"task_id", "patch": unified diff} or {"task_id", "files": {path: text or null}} (or either
as "completion"), with an optional "sample_id"; SWE-bench records also need `--repos DIR` (trees or checkouts),
and `--envs DIR` to run each repository's tests in its own environment (codechat repo env build).
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from codechat import CodechatError
from codechat.chat.repo import RepoChat, watch
from codechat.config import AgentConfig, EvalConfig, ModelConfig, SamplingConfig
from codechat.evaluation.repo_eval import evaluate_episodes
from codechat.io.jsonl import scan_jsonl
from codechat.rollout.agents import ModelAgent, ScriptedAgent, reference_script
from codechat.rollout.episode import EpisodeRunner
from codechat.io.rundir import resolve_model
from codechat.tasks.repo_loaders import load_repo_tasks
from codechat.verifier.repo import RepoJudge, RepoVerdict
from codechat.verifier.repo_env import load_envs


def _tasks(args) -> dict:
    tasks = load_repo_tasks(getattr(args, "repo_task", None) or args.tasks, repos=getattr(args, "repos", None))
    if getattr(args, "limit", 0):
        tasks = tasks[:args.limit]
    if getattr(args, "timeout", None):
        for t in tasks:
            t.limits.test_timeout_s = float(args.timeout)
    return {t.task_id: t for t in tasks}


def judge_for(args, hide: tuple[str, ...]) -> RepoJudge:
    """The RepoJudge the flags ask for: --envs, --log-dir, --memory-mb."""
    envs = load_envs(args.envs) if getattr(args, "envs", None) else None
    memory = getattr(args, "memory_mb", None)
    if memory is not None and memory < 64:
        raise CodechatError(f"--memory-mb must be at least 64, got {memory}")
    return RepoJudge(hide_paths=hide, envs=envs, log_dir=getattr(args, "log_dir", None), memory_mb=memory or 2048)


def read_patches(path: str, known: set[str]) -> list[dict]:
    rows = []
    for lineno, rec, why in scan_jsonl(path, "patches file"):
        row = {"line": lineno}
        if rec is None:
            rows.append(dict(row, error=why))
            continue
        change = next((rec[k] for k in ("patch", "files", "completion") if k in rec), None)
        row.update(task_id=str(rec.get("task_id")), sample_id=rec.get("sample_id"), change=change)
        if row["task_id"] not in known:
            row["error"] = f"unknown task_id {row['task_id']!r}"
        elif not isinstance(change, (str, dict)):
            row["error"] = "needs 'patch' (a unified diff) or 'files' ({path: text})"
        rows.append(row)
    return rows


def run_verify(args) -> int:
    if not (args.tasks and args.completions and args.out):
        raise CodechatError("verify needs --tasks, --completions and --out")
    tasks = _tasks(args)
    rows = read_patches(args.completions, set(tasks))
    for r in rows:
        if "error" in r:
            print(f"warning: {args.completions}:{r['line']}: {r['error']}", file=sys.stderr)
    hide = tuple({str(Path(args.completions).resolve().parent)} |
                 ({str(Path(args.tasks).expanduser().resolve().parent)} if not args.tasks.startswith("builtin") else set()))
    counts: Counter = Counter()
    with judge_for(args, hide) as judge, ThreadPoolExecutor(max(1, args.workers or 4)) as pool:
        futs = [None if "error" in r else pool.submit(judge.judge, tasks[r["task_id"]], r["change"]) for r in rows]
        with open(args.out, "w", encoding="utf-8") as out:
            for r, f in zip(rows, futs):
                v = f.result() if f else RepoVerdict("error", False, 0.0, message=r["error"])
                counts[v.status] += 1
                out.write(json.dumps({"task_id": r.get("task_id"), "sample_id": r.get("sample_id"),
                                      "line": r["line"], **v.to_dict()}) + "\n")
    n, passed = len(rows), counts.get("passed", 0)
    print(f"verified {n} patches: resolve rate {passed / n:.1%} ({passed}/{n})" if n else "no patches")
    for status, c in counts.most_common():
        print(f"  {status:<10} {c}")
    print(f"results: {args.out}")
    return 0


def make_agent(spec: str, args):
    if spec == "scripted:reference":
        return ScriptedAgent(reference_script), "reference"
    from codechat.policy import load_policy  # torch: scripted agents and patch files run without it
    policy = load_policy(ModelConfig(path=resolve_model(spec)))
    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    return ModelAgent(policy, sampling), Path(spec).name


def markdown(metrics: dict, name: str) -> str:
    return "\n".join([f"| {name} | |", "|---|---|"] + [f"| {k} | {v:.4g} |" for k, v in metrics.items()]) + "\n"


def _eval_defaults(args) -> None:
    """`codechat eval` leaves unset flags None (their defaults come from a run's config); repository tasks take
    the config defaults: eval.n, eval.k, eval.temperature, the agent's tokens per turn, seed 0."""
    ev, sampling = EvalConfig(), SamplingConfig()
    args.n = ev.n if args.n is None else args.n
    args.k = ",".join(map(str, ev.k)) if args.k is None else args.k
    args.temperature = ev.temperature if args.temperature is None else args.temperature
    args.top_p = sampling.top_p if args.top_p is None else args.top_p
    args.max_new_tokens = AgentConfig().turn_tokens if args.max_new_tokens is None else args.max_new_tokens
    args.seed = 0 if args.seed is None else args.seed
    if args.n < 1:
        raise CodechatError(f"eval: --n must be >= 1 (episodes per task), got {args.n}")


def run_eval(args) -> int:

    _eval_defaults(args)
    if not args.model:
        raise CodechatError("eval on repository tasks needs --model (a model, or scripted:reference)")
    try:
        ks = sorted({int(k) for k in args.k.split(",") if k.strip()})
    except ValueError:
        raise CodechatError(f"eval: --k must be comma-separated integers, got '{args.k}'") from None
    if any(k > args.n or k < 1 for k in ks):
        raise CodechatError(f"eval: every --k must be in 1..n={args.n}, got '{args.k}'")
    tasks = list(_tasks(args).values())
    agent, name = make_agent(args.model, args)
    cfg = AgentConfig(turn_tokens=args.max_new_tokens)
    hide = () if args.tasks.startswith("builtin") else (str(Path(args.tasks).expanduser().resolve().parent),)
    with judge_for(args, hide) as judge:
        report = evaluate_episodes(EpisodeRunner(agent, judge, cfg), tasks, args.n, ks, seed=args.seed)
    out = Path(args.out) if args.out else Path(f"eval-{name}")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "samples.jsonl", "w") as f:
        for s in report.samples:
            f.write(json.dumps(s) + "\n")
    (out / "summary.json").write_text(json.dumps({"metrics": report.metrics, "per_task": report.per_task}, indent=1))
    (out / "summary.md").write_text(markdown(report.metrics, name))
    print(markdown(report.metrics, name), end="")
    print(f"episodes with transcripts: {out / 'samples.jsonl'}; summary: {out / 'summary.json'}")
    return 0


def run_chat(args) -> int:
    """`codechat chat [MODEL] --repo-task TASKS [--task-id ID]`."""

    tasks = _tasks(args)
    task = tasks.get(args.task_id) if args.task_id else next(iter(tasks.values()))
    if task is None:
        raise CodechatError(f"--task-id {args.task_id!r}: no such task in {args.repo_task}")
    spec = args.repo_task
    hide = () if spec.startswith("builtin") else (str(Path(spec).expanduser().resolve().parent),)
    with RepoJudge(hide_paths=hide) as judge:
        if args.model:
            agent, _ = make_agent(args.model, args)
            (result,) = EpisodeRunner(agent, judge, AgentConfig(turn_tokens=args.max_new_tokens)).run([(task, 0)],
                                                                                                     seed=args.seed)
            print(watch(result))
            return 0
        chat = RepoChat(task, judge)
        print(f"task {task.task_id}\n{task.problem}\n(/tools for help, /quit to leave)")
        try:
            while True:
                try:
                    line = input("tool> ")
                except EOFError:
                    break
                reply = chat.handle(line)
                if reply is None:
                    break
                print(reply)
        finally:
            chat.close()
    return 0
