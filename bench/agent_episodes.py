"""Throughput of repository episodes: 64 concurrent scripted episodes, then the same with the tiny model, with
and without the KV kept across turns.

    python bench/agent_episodes.py [--episodes 64] [--tasks builtin:repo-heldout] [--model-turns 4]
    python bench/agent_episodes.py --parts model --model-episodes 16 --model-turns 8   # KV reuse only

1. Scripted policy (no model), a fixed sequence per episode: list_files, read_file, search, write_file (the
   reference fix), run_tests, submit. Timed end to end: workspace setup, tool calls (run_tests in the sandbox),
   final verification (clean copy + hidden tests). Baseline in the same run: the same episodes one at a time
   (max_live=1, one tool thread), reported as `sequential_episodes_per_s` and `speedup`. Both sides run every
   episode, --rounds times, the order alternated (concurrent, sequential, sequential, concurrent, ...: ABBA);
   rates are over each side's summed wall time.
2. The same episodes with the tiny preset (untrained, random text: it mostly makes malformed calls) for
   `--model-turns` turns of `--turn-tokens` tokens, every turn of all live episodes decoded as one batch:
   model tokens/s (over the whole wall time, and over the time in batched decodes only) and the slowest
   episode's share of the wall time.
3. KV across turns: the model episodes of 2. run again with `agent.kv_reuse=false` (each turn re-prefills the
   whole transcript: the baseline) and `true` (the episode's KV is kept; only the last sampled token and the
   tool result are prefilled), same seed: decode seconds of each, `kv_decode_speedup` = baseline / cached,
   prefilled context tokens of each, and `kv_same_tokens` (the transcripts are identical token for token).
   The two runs alternate over --rounds (off, on, on, off, ...); decode seconds are summed per side.
Ends with one JSON line: {"episodes_per_s", "tool_calls_per_s", "model_tokens_per_s", "slowest_share",
"sequential_episodes_per_s", "speedup", "clone_ms", "resolved", "kv_decode_speedup", ...}.
"""
import argparse
import copy
import json
import tempfile
import time

import torch

from codechat.config import AgentConfig, ModelConfig, SamplingConfig
from codechat.policy import Sampler, build_preset, load_policy
from codechat.rollout.agents import ModelAgent, ScriptedAgent
from codechat.rollout.episode import EpisodeRunner
from codechat.rollout.tools import format_call
from codechat.tasks.repo_loaders import load_repo_tasks
from codechat.verifier.repo import RepoJudge

ap = argparse.ArgumentParser()
ap.add_argument("--episodes", type=int, default=64)
ap.add_argument("--tasks", default="builtin:repo-heldout")
ap.add_argument("--distinct", type=int, default=16, help="distinct tasks the episodes cycle through")
ap.add_argument("--rounds", type=int, default=2, help="runs per side, the order alternated (ABBA)")
ap.add_argument("--model-turns", type=int, default=4)
ap.add_argument("--turn-tokens", type=int, default=32)
ap.add_argument("--workers", type=int, default=8, help="tool threads")
ap.add_argument("--model-episodes", type=int, default=0, help="episodes of the model phases (0 = --episodes)")
ap.add_argument("--parts", default="scripted,model", help="comma list of: scripted, model (model includes kv)")
ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default; 1 on a busy machine)")
args = ap.parse_args()
if args.rounds < 1:
    ap.error("--rounds must be at least 1")
if args.threads:
    torch.set_num_threads(args.threads)
parts = set(args.parts.split(","))


def script(task, turn, last):
    (path, fixed), = sorted(task.solution.items())[:1]
    unit = task.metadata.get("unit", "def")
    return [format_call("list_files"), format_call("read_file", path=path), format_call("search", pattern=unit),
            format_call("write_file", path=path, content=fixed), format_call("run_tests"),
            format_call("submit")][min(turn, 5)]


def scripted_phase(judge, out):
    t0 = time.perf_counter()
    clones = [judge.clone(t) for t, _ in jobs]
    out["clone_ms"] = (time.perf_counter() - t0) * 1000 / len(clones)
    for w in clones:
        w.remove()

    conc = AgentConfig(max_live=args.episodes, tool_workers=args.workers)
    sides = {"concurrent": conc, "sequential": AgentConfig(max_live=1, tool_workers=1)}
    wall, res = {"concurrent": 0.0, "sequential": 0.0}, {}
    for r in range(args.rounds):
        for name in (["concurrent", "sequential"] if r % 2 == 0 else ["sequential", "concurrent"]):
            t0 = time.perf_counter()
            res[name] = EpisodeRunner(ScriptedAgent(script), judge, sides[name]).run(jobs)
            wall[name] += time.perf_counter() - t0
    n, c = len(jobs) * args.rounds, res["concurrent"]
    out.update(episodes=len(c), rounds=args.rounds, scripted_wall_s=wall["concurrent"] / args.rounds,
               episodes_per_s=n / wall["concurrent"],
               tool_calls_per_s=args.rounds * sum(r.tool_calls for r in c) / wall["concurrent"],
               resolved=sum(r.verdict.passed for r in c), sequential_episodes=len(res["sequential"]),
               sequential_resolved=sum(r.verdict.passed for r in res["sequential"]),
               sequential_episodes_per_s=n / wall["sequential"])
    out["speedup"] = out["episodes_per_s"] / out["sequential_episodes_per_s"]


def model_run(policy, judge, mjobs, kv_reuse: bool):
    sampler = Sampler(policy)
    agent = ModelAgent(policy, SamplingConfig(temperature=1.0), sampler=sampler)
    run = EpisodeRunner(agent, judge, AgentConfig(max_live=len(mjobs), tool_workers=args.workers,
                                                  turn_tokens=args.turn_tokens, kv_reuse=kv_reuse))
    t0 = time.perf_counter()
    res = run.run(mjobs, seed=1)
    return run, res, time.perf_counter() - t0, sampler.prefix


def model_phase(judge, out):
    n = args.model_episodes or args.episodes
    mjobs = []
    for t, i in jobs[:n]:
        t = copy.deepcopy(t)
        t.limits.max_turns = args.model_turns
        t.limits.wall_s = 3600.0  # a slow machine must not end episodes early: both runs do every turn
        mjobs.append((t, i))
    with tempfile.TemporaryDirectory() as d:
        policy = load_policy(ModelConfig(path=str(build_preset("tiny", d, seed=0)), device="cpu"))
        act = {False: 0.0, True: 0.0}  # decode seconds per side, summed over the rounds
        for r in range(args.rounds):
            for kv in ((False, True) if r % 2 == 0 else (True, False)):
                run = model_run(policy, judge, mjobs, kv_reuse=kv)
                act[kv] += run[0].act_s
                if kv:
                    mrun, mres, mwall, mpre = run
                else:
                    full, fres, fwall, fpre = run  # the baseline: every turn re-prefills the transcript
    model_tokens = sum(sum(r.transcript.is_model) for r in mres)
    out.update(model_wall_s=mwall, model_decode_s=mrun.act_s, model_tokens=model_tokens,
               model_tokens_per_s=model_tokens / mwall, decode_tokens_per_s=model_tokens / max(mrun.act_s, 1e-9),
               slowest_share=max(r.duration_s for r in mres) / mwall, model_batch_max=max(mrun.step_sizes),
               model_episodes_per_s=len(mres) / mwall, model_episodes=len(mres),
               model_turns_mean=sum(len(r.transcript.turns) for r in mres) / len(mres),
               transcript_tokens_mean=sum(len(r.transcript.tokens) for r in mres) / len(mres),
               kv_off_decode_s=act[False] / args.rounds, kv_on_decode_s=act[True] / args.rounds,
               kv_decode_speedup=act[False] / act[True],
               kv_off_wall_s=fwall, kv_on_wall_s=mwall, kv_off_prefilled=fpre.prefilled_tokens,
               kv_on_prefilled=mpre.prefilled_tokens, kv_on_reused=mpre.reused_tokens,
               kv_same_tokens=all(a.transcript.tokens == b.transcript.tokens for a, b in zip(fres, mres)),
               kv_logprob_gap_max=max(abs(x - y) for a, b in zip(fres, mres)
                                      for x, y in zip(a.transcript.logprobs, b.transcript.logprobs)))


tasks = load_repo_tasks(args.tasks)[:args.distinct]
jobs = [(tasks[i % len(tasks)], i // len(tasks)) for i in range(args.episodes)]
out = {}
with RepoJudge() as judge:
    for t in tasks:  # bases and baselines are per task, shared by all its episodes: built once, outside the timing
        judge.baseline(t)
    if "scripted" in parts:
        scripted_phase(judge, out)
    if "model" in parts:
        model_phase(judge, out)
print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}))
