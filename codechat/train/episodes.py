"""Multi-turn episodes as RL rollouts: G episodes per repository task -> the same `Rollouts` the update reads.

    r = collect_episodes(ctx, engine, tasks, group_size=4, seed=7)     # what train/groups.py calls for repo tasks
    r.batch.mask[i]      # (T,) 1 exactly on the tokens the model sampled in episode i, 0 on tool results

Each episode runs through `EpisodeRunner` with the model agent (the engine decodes every live episode's turn in
one batch). Row i of the batch is episode i's transcript after its prompt, up to its last model token: model
turns and tool results in order. `batch.mask` is `Transcript.is_model` over that span, so the update computes
log-probs over the whole transcript (prompt + turns: results are attended to) while the loss, KL and importance
ratios see model tokens only; `batch.logprobs` are the sampler's, 0 on results. The episode's final reward (the
hidden-test judgement, through the reward registry) is the reward of the row, so with group advantages every
model token of an episode carries its episode's advantage. A truncated episode has finish_reason `length`
(`rl.mask_truncated` drops it from the loss); `n_tokens` is the row's length, model and environment tokens.

Simplifications: the G episodes of a task must start from the same prompt (they do: the prompt is the task and
its file list); the audit has its own checks for episodes (rollout/audit.py: audit_episodes).
"""
from __future__ import annotations

import time
from collections import Counter

import torch

from codechat import CodechatError
from codechat.policy import SampleBatch
from codechat.policy.sampler import pad_rows
from codechat.rollout.agents import ModelAgent, result_text
from codechat.rollout.collect import Rollouts, fill_infra, score
from codechat.rollout.episode import EpisodeResult, EpisodeRunner
from codechat.tasks.repo import RepoTask
from codechat.verifier.repo import RepoJudge
from codechat.verifier.repo_dedup import DedupJudge


def is_repo_batch(tasks) -> bool:
    """All tasks are repository tasks (a mix of repository and function tasks is refused)."""
    repo = [isinstance(t, RepoTask) for t in tasks]
    if any(repo) and not all(repo):
        raise CodechatError("data.train: mixes repository tasks with other tasks; train them in separate stages")
    return bool(repo) and all(repo)


LENGTH_CUTS = ("tokens", "context")
"""The truncations that cut an episode for its length (the others end it by turns, tool calls or wall time)."""


def model_token_budget(task: RepoTask, agent) -> int:
    """Most tokens the model can sample in one episode of `task`: every turn at `agent.turn_tokens`, capped by
    the task's token budget (which also counts the prompt and tool results, so the model never reaches it)."""
    return min(task.limits.max_turns * agent.turn_tokens, task.limits.max_tokens)


def run_judge(ctx) -> RepoJudge:
    """The run's judge (one pristine base per task, kept across steps); closed with the run."""
    if ctx.judge is None:
        agent = ctx.cfg.agent
        judge = RepoJudge(warm=agent.warm_tests)
        ctx.judge = DedupJudge(judge) if agent.dedup_judgements else judge
        ctx.on_close.append(ctx.judge.close)
    return ctx.judge


def episode_text(e: EpisodeResult) -> str:
    """The episode as readable text: each model turn followed by its tool result."""
    return "".join(u.text + (result_text(u.result) if u.result else "") for u in e.transcript.turns)


def episodes_to_rollouts(tasks: list[RepoTask], results: list[EpisodeResult], group_size: int, pad_id: int,
                         rewards_cfg, max_tokens: int) -> Rollouts:
    """P tasks x G episodes (contiguous per task) -> Rollouts whose mask covers exactly the model tokens.
    max_tokens: the model-token budget the length rewards compare each episode's model tokens with; only a cut
    for length (LENGTH_CUTS) counts as truncated for them."""
    prompts, rows, lps, masks = [], [], [], []
    for p in range(len(tasks)):
        group = results[p * group_size:(p + 1) * group_size]
        first = group[0].transcript
        prompt = first.tokens[:first.prompt_len]
        for e in group:
            t = e.transcript
            if t.tokens[:t.prompt_len] != prompt:
                raise CodechatError(f"task {tasks[p].task_id}: its episodes started from different prompts")
            model_at = [i for i in range(t.prompt_len, len(t.tokens)) if t.is_model[i]]
            end = model_at[-1] + 1 if model_at else t.prompt_len  # trailing tool results teach nothing
            rows.append(t.tokens[t.prompt_len:end])
            lps.append(t.logprobs[t.prompt_len:end])
            masks.append([float(m) for m in t.is_model[t.prompt_len:end]])
        prompts.append(prompt)
    tokens, mask, logprobs = pad_rows(rows, pad_id, masks, lps)  # (N, T); mask 1 = model token; logprobs the
    # sampler's, 0 on results and padding
    texts = [episode_text(e) for e in results]
    finish = ["length" if e.truncated else "stop" for e in results]
    batch = SampleBatch(torch.arange(len(tasks)).repeat_interleave(group_size), tokens, mask, logprobs, finish,
                        texts, torch.tensor([len(x) for x in rows]))
    verdicts = [e.verdict.verdict() for e in results]
    per = [tasks[p] for p in range(len(tasks)) for _ in range(group_size)]
    n_model = [int(m.sum()) for m in mask]
    rew, comps = score(per, texts, verdicts, n_model, [e.truncated in LENGTH_CUTS for e in results], max_tokens,
                       rewards_cfg,
                       habits=[(e.tool_calls, e.protected_attempts) for e in results])
    rew = fill_infra(rew, batch.prompt_index, [v.status == "infra_error" for v in verdicts])
    return Rollouts(tasks, prompts, batch, verdicts, rew, comps, episodes=results)


def collect_episodes(ctx, engine, tasks: list[RepoTask], group_size: int, seed: int, policy=None,
                     before_turn=None) -> Rollouts:
    """G episodes per task with the policy acting through `engine`, judged, scored; timings in r.sample_s
    (decode), r.verify_s (judgements, summed) and r.tools_s. policy: the acting policy (default ctx.policy; the
    asynchronous producer passes its own copy). before_turn: `EpisodeRunner.run`'s hook (partial rollouts)."""
    agent = ModelAgent(policy if policy is not None else ctx.policy, ctx.cfg.sampling, sampler=engine)
    judge = run_judge(ctx)
    runner = EpisodeRunner(agent, judge, ctx.cfg.agent)
    calls0, hits0 = getattr(judge, "calls", 0), getattr(judge, "hits", 0)
    t0 = time.perf_counter()
    results = runner.run([(t, g) for t in tasks for g in range(group_size)], seed=seed, before_turn=before_turn)
    wall = time.perf_counter() - t0
    pad_id = ctx.policy.tokenizer.pad_token_id
    max_tokens = max(model_token_budget(t, ctx.cfg.agent) for t in tasks)  # overlong compares model tokens
    r = episodes_to_rollouts(tasks, results, group_size, 0 if pad_id is None else int(pad_id), ctx.cfg.rewards,
                             max_tokens)
    r.sample_s, r.verify_s = runner.act_s, runner.judge_s
    r.tools_s, r.episode_wall_s = runner.tools_s, wall
    r.verify_wait_s = runner.judge_wait_s
    r.judge_calls, r.judge_hits = getattr(judge, "calls", 0) - calls0, getattr(judge, "hits", 0) - hits0
    return r


def episode_metrics(r: Rollouts) -> dict[str, float]:
    """Habits and costs of a step's episodes: means per episode, shares, errors by tool, the time split."""
    eps = r.episodes
    n = max(len(eps), 1)
    model = r.batch.mask.sum().item()
    m = {"episode/turns": sum(len(e.transcript.turns) for e in eps) / n,
         "episode/tool_calls": sum(e.tool_calls for e in eps) / n,
         "episode/bad_calls": sum(e.bad_calls for e in eps) / n,
         "episode/tested_before_submit": sum(e.tested_before_submit for e in eps) / n,
         "episode/protected_attempts": sum(e.protected_attempts for e in eps) / n,
         "episode/submitted": sum(e.submitted for e in eps) / n,
         "episode/truncated": sum(bool(e.truncated) for e in eps) / n,
         "episode/model_tokens_mean": model / n,
         "episode/env_tokens_mean": (r.batch.n_tokens.sum().item() - model) / n,
         "time/decode_s": r.sample_s, "time/tools_s": r.tools_s, "time/episodes_s": r.episode_wall_s,
         "time/verify_run_s": r.verify_s, "time/verify_wait_s": r.verify_wait_s,
         "verify/judge_dedup_frac": r.judge_hits / max(r.judge_calls, 1),
         "new_tokens_per_s": model / max(r.sample_s, 1e-9)}
    for reason, c in Counter(e.truncated for e in eps if e.truncated).items():
        m[f"episode/truncated/{reason}"] = c / n
    for tool, c in Counter(u.tool or "(no call)" for e in eps for u in e.transcript.turns
                           if not u.ok and u.result).items():
        m[f"episode/errors/{tool}"] = c / n
    return m
