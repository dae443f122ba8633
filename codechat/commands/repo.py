"""Repository tasks in `codechat eval` and `codechat chat` (`codechat verify` on them: commands/repo_verify.py).

    codechat verify --tasks builtin:repo-heldout --completions patches.jsonl --out verdicts.jsonl
    codechat eval --model runs/x --tasks builtin:repo-heldout --n 4 --k 1,4
    codechat eval --model scripted:reference --tasks ../shared/data/repo/quixbugs     # no model: the reference fixes
A patch line is {"task_id", "patch": unified diff} or {"task_id", "files": {path: text or null}} (or either
as "completion"), with an optional "sample_id"; SWE-bench records also need `--repos DIR` (trees or checkouts),
and `--envs DIR` to run each repository's tests in its own environment (codechat repo env build).
"""
from __future__ import annotations

import json
from pathlib import Path

from codechat import CodechatError
from codechat.chat.repo import RepoChat, watch
from codechat.commands import repo_verify
from codechat.config import AgentConfig, EvalConfig, ModelConfig, SamplingConfig
from codechat.evaluation.repo_eval import evaluate_episodes
from codechat.rollout.agents import ModelAgent, ScriptedAgent, reference_script
from codechat.rollout.episode import EpisodeRunner
from codechat.io.rundir import resolve_model
from codechat.verifier.repo import RepoJudge


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
    tasks = list(repo_verify.load_tasks(args).values())
    agent, name = make_agent(args.model, args)
    cfg = AgentConfig(turn_tokens=args.max_new_tokens)
    hide = () if args.tasks.startswith("builtin") else (str(Path(args.tasks).expanduser().resolve().parent),)
    with repo_verify.judge_for(args, hide) as judge:
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

    tasks = repo_verify.load_tasks(args)
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
