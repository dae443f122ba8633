"""Where an agent GRPO step's episode phase goes, with today's judge and with the warm runner + dedup.

    OMP_NUM_THREADS=1 python bench/agent_step.py [--tasks builtin:repo-train] [--prompts 8] [--group 4] [--seed 0]

The step is the agent demo's GRPO step on the built-in family (codechat/demos/agent.py: 8 tasks x 4 episodes,
`agent.*` settings of AGENT), acted by a scripted policy that plays the demo's SFT mixture (the expert
transcripts of `sft.expert_per_task=4`, `sft.expert_wrong=0.5`: per task two episodes end with the reference
fix, two with the task's wrong fixes): read the file, write the fix, run_tests, submit. No model: the decode
and the update are not in these times, so `step_speedup` is that of the episode phase (tool calls and
judgements), which is what the warm runner changes. Seeded: the same tasks and the same final workspaces in
both runs, which are made in one process, one after the other:
  1. today: `agent.warm_tests=false agent.dedup_judgements=false` (a fresh interpreter per test run);
  2. warm: the defaults (every run_tests call and judgement forked from a warm runner; identical final
     workspaces judged once).
Then, one episode after the other, the judge and the baseline in turn (the same load for both): each episode's
final workspace judged by a fresh warm + dedup judge (`judge_per_episode_s`: its wall seconds over the
episodes), and the baseline, a plain `python -m pytest` subprocess (no sandbox, plugin autoload off and
`-p no:cacheprovider` as in the judge) on that workspace with the hidden tests written, same targets
(`plain_pytest_per_episode_s`).
Ends with one JSON line: phase times of each run (`wall_s`, `tools_s`, `judge_run_s`, `judge_wait_s`, summed
over episodes; `*_judge_per_episode_s`: judge_run_s / episodes, concurrent), `judge_per_episode_s`,
`plain_pytest_per_episode_s`, `judge_vs_plain` (ratio), `judge_per_run_s` and `run_vs_plain` (the same over
the judgements that ran, dedup hits left out),
`step_speedup` (today's wall / warm wall), `judge_dedup_hits`, `verdicts_identical` (every field but times).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

from codechat.config import AgentConfig
from codechat.rollout.agents import ScriptedAgent
from codechat.rollout.episode import EpisodeRunner
from codechat.rollout.expert import expert_fixes
from codechat.rollout.tools import format_call
from codechat.tasks.repo_loaders import load_repo_tasks
from codechat.train.episodes import run_judge

ap = argparse.ArgumentParser()
ap.add_argument("--tasks", default="builtin:repo-train")
ap.add_argument("--prompts", type=int, default=8, help="tasks per step (the demo's rl.prompts_per_step)")
ap.add_argument("--group", type=int, default=4, help="episodes per task (the demo's rl.group_size)")
ap.add_argument("--seed", type=int, default=0)
args = ap.parse_args()

DEMO = AgentConfig(turn_tokens=200, max_live=64, wall_budget=False)  # AGENT's agent.* (json calls: scripted)
VARYING = ("duration_s", "output_tail")
tasks = random.Random(args.seed).sample(load_repo_tasks(args.tasks), args.prompts)
fixes = expert_fixes(tasks, 0.5, args.seed, per_task=args.group)


class MixturePolicy(ScriptedAgent):
    """Episode g of a task writes that task's g-th expert fix."""

    def __init__(self):
        super().__init__(lambda t, turn, last: "")

    def act(self, states, seed):
        out = []
        for s in states:
            fix = fixes[s.task.task_id][s.sample % args.group]
            calls = [format_call("read_file", path=p) for p in sorted(fix)] + \
                [format_call("write_file", path=p, content=c) for p, c in sorted(fix.items())] + \
                [format_call("run_tests"), format_call("submit")]
            self.script = lambda t, turn, last, calls=calls: calls[min(turn, len(calls) - 1)]
            out += super().act([s], seed)
        return out


def step(warm: bool) -> tuple[dict, list]:
    ctx = SimpleNamespace(judge=None, on_close=[], cfg=SimpleNamespace(
        agent=replace(DEMO, warm_tests=warm, dedup_judgements=warm)))
    judge = run_judge(ctx)
    try:
        for t in tasks:  # once per task per run, not per step: outside the timing
            judge.baseline(t)
        runner = EpisodeRunner(MixturePolicy(), judge, ctx.cfg.agent)
        t0 = time.perf_counter()
        res = runner.run([(t, g) for t in tasks for g in range(args.group)], seed=args.seed)
        wall = time.perf_counter() - t0
        m = {"wall_s": wall, "tools_s": runner.tools_s, "judge_run_s": runner.judge_s,
             "judge_wait_s": runner.judge_wait_s, "judge_calls": getattr(judge, "calls", len(res)),
             "judge_dedup_hits": getattr(judge, "hits", 0), "resolved": sum(r.verdict.passed for r in res)}
        return m, res
    finally:
        for f in ctx.on_close:
            f()


def one_at_a_time(res) -> tuple[list[float], list[float], list, int]:
    """Each episode's final workspace judged by a fresh warm + dedup judge, then run by a plain pytest
    subprocess, one episode after the other (the two measured side by side, under the same load):
    (judge seconds, pytest seconds, verdicts, judgements answered by dedup)."""
    ctx = SimpleNamespace(judge=None, on_close=[], cfg=SimpleNamespace(agent=DEMO))
    judge = run_judge(ctx)
    try:
        for t in tasks:
            judge.baseline(t)
        judged, plain, verdicts = [], [], []
        for r in res:
            task = next(t for t in tasks if t.task_id == r.task_id)
            t0 = time.perf_counter()
            verdicts.append(judge.judge(task, r.changes))
            judged.append(time.perf_counter() - t0)
            plain.append(plain_pytest(judge, task, r.changes))
        return judged, plain, verdicts, judge.hits
    finally:
        for f in ctx.on_close:
            f()


def plain_pytest(judge, task, changes) -> float:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}
    ws = judge.clone(task)
    try:
        for p, text in changes.items():
            if text is None:
                (ws.root / p).unlink(missing_ok=True)
            else:
                ws.write(p, text)
        judge._write_tests(task, ws)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *judge._targets(task)],
                       cwd=ws.root, env=env, capture_output=True, timeout=120)
        return time.perf_counter() - t0
    finally:
        ws.remove()


today, today_res = step(False)
warm, warm_res = step(True)
serial, plain, serial_verdicts, serial_hits = one_at_a_time(warm_res)
n = len(warm_res)


def fields(v):
    return {k: x for k, x in v.to_dict().items() if k not in VARYING}


out = {"episodes": n, "today": today, "warm": warm,
       "today_judge_per_episode_s": today["judge_run_s"] / n, "warm_judge_per_episode_s": warm["judge_run_s"] / n,
       "judge_per_episode_s": sum(serial) / n, "plain_pytest_per_episode_s": sum(plain) / n,
       "judge_vs_plain": sum(plain) / max(sum(serial), 1e-9),
       "judge_per_run_s": sum(serial) / max(n - serial_hits, 1),
       "run_vs_plain": sum(plain) / n / max(sum(serial) / max(n - serial_hits, 1), 1e-9),
       "step_speedup": today["wall_s"] / warm["wall_s"],
       "same_workspaces": all(a.changes == b.changes for a, b in zip(today_res, warm_res)),
       "verdicts_identical": all(fields(a.verdict) == fields(b.verdict) == fields(c)
                                 for a, b, c in zip(today_res, warm_res, serial_verdicts))}
print(json.dumps({k: round(v, 3) if isinstance(v, float) else
                  ({a: round(b, 3) if isinstance(b, float) else b for a, b in v.items()} if isinstance(v, dict) else v)
                  for k, v in out.items()}))
