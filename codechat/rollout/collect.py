"""Tasks -> G completions each -> verdicts -> rewards: the data that every training stage and evaluation uses.

Samplers know token ids, the verifier knows text; this module is where the two meet (STYLE habit 3: rewards
know only text and test results, samplers only token ids). `rollout_records` is the line format of a run's
rollouts.jsonl, which offline DPO reads back.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from dataclasses import dataclass, field

import torch

from codechat.algos import group_stats
from codechat.config import RewardConfig, SamplingConfig
from codechat.policy.sampler import SampleBatch
from codechat.rollout.rewards import RewardContext, compose_rewards, reward_metrics
from codechat.rollout.stream import VerifyStream
from codechat.tasks import Task
from codechat.verifier.dedup import DedupStats, DedupVerifier
from codechat.verifier.verdict import Verdict


def prompt_text(task: Task) -> str:
    """The text the model continues. Prompts that are code (HumanEval) are continued as they are."""
    p = task.prompt
    return p if p.endswith("\n") else p + "\n"


@dataclass
class Rollouts:
    """P tasks x G samples each, verified and scored. Samples of a task are contiguous."""

    tasks: list[Task]
    """The P tasks."""
    prompts: list[list[int]]
    """Prompt token ids, one per task."""
    batch: SampleBatch
    """The rows: prompt_index (N,), tokens (N,T), mask (N,T) (the model's tokens), logprobs (N,T), texts, ...
    (single answers: the sampler's; episodes: train/episodes.py)."""
    verdicts: list[Verdict]
    """One per sample (N = P*G)."""
    rewards: torch.Tensor
    """(N,) total reward per sample."""
    components: dict[str, torch.Tensor] = field(default_factory=dict)
    """Reward component name -> (N,) values (before weighting)."""
    sample_s: float = 0.0
    """Seconds spent sampling."""
    verify_s: float = 0.0
    """Seconds spent verifying (with verify-while-decoding: only the tail after sampling ended)."""
    verify_stats: DedupStats | None = None
    """With a DedupVerifier: what verification ran and reused (logged as verify/dedup_frac, ...)."""
    verify_overlap: float | None = None
    """Share of the verdicts ready before decoding ended (verify-while-decoding); None when verified after."""
    episodes: list = field(default_factory=list)
    """Multi-turn rollouts: the EpisodeResult of each sample (empty for single answers; train/episodes.py)."""
    tools_s: float = 0.0
    """Multi-turn rollouts: wall seconds spent running tool calls."""
    verify_wait_s: float = 0.0
    """Multi-turn rollouts: seconds ended episodes waited for a thread before their judgement ran, summed."""
    judge_calls: int = 0
    """Multi-turn rollouts: judgements asked for; `judge_hits` of them answered by an identical one."""
    judge_hits: int = 0
    episode_wall_s: float = 0.0
    """Multi-turn rollouts: wall seconds of the whole episode run (decode, tools and judgements overlap)."""

    @property
    def group_ids(self) -> torch.Tensor:
        return self.batch.prompt_index  # (N,)

    @property
    def model_tokens(self) -> torch.Tensor:
        """(N,) float: tokens the model produced per sample (an episode's tool results left out). A single
        answer's are all its new tokens, a forced prefix included (its mask leaves the shared forced tokens out
        of the loss, but they are part of the answer's length)."""
        return self.batch.mask.sum(-1) if self.episodes else self.batch.n_tokens.float()

    @property
    def infra(self) -> torch.Tensor:
        """(N,) bool: samples whose verification failed for infrastructure reasons (status `infra_error`)."""
        return torch.tensor([v.status == "infra_error" for v in self.verdicts], dtype=torch.bool)

    @property
    def passed(self) -> torch.Tensor:
        return torch.tensor([v.passed for v in self.verdicts], dtype=torch.float32)  # (N,)

    def task_of(self, i: int) -> Task:
        return self.tasks[int(self.batch.prompt_index[i])]

    def trained_tokens(self, i: int) -> tuple[list[int], list[float] | None]:
        """Sample i as a fine-tuning target: (completion ids, None); for an episode (ids up to its last model
        token, its model-token mask: tool results stay context)."""
        if self.episodes:
            n = int(self.batch.n_tokens[i])
            return self.batch.tokens[i, :n].tolist(), self.batch.mask[i, :n].tolist()
        return self.batch.tokens[i, :int(self.batch.mask[i].sum())].tolist(), None


def score(tasks_per_sample: list[Task], texts: list[str], verdicts: list[Verdict], n_tokens: list[int],
          truncated: list[bool], max_new_tokens: int, rewards: RewardConfig | None,
          habits: list[tuple[int, int]] | None = None):
    """Rewards for each sample: (N,) totals and the weighted per-component values. habits: per episode
    (tool calls, protected-edit attempts), for the episode rewards."""
    if rewards is None or rewards.components == {"pass-all": 1.0}:
        r = torch.tensor([v.reward for v in verdicts], dtype=torch.float32)
        return r, {"pass-all": r.clone()}
    totals, comps = [], {}
    for task, text, v, n, tr, (calls, prot) in zip(tasks_per_sample, texts, verdicts, n_tokens, truncated,
                                                   habits or [(0, 0)] * len(verdicts)):
        ctx = RewardContext(n_tokens=n, max_new_tokens=max_new_tokens, truncated=tr, cfg=rewards, tool_calls=calls,
                            protected_attempts=prot)
        total, parts = compose_rewards(rewards.components, task, text, v, ctx)
        totals.append(total)
        for k, val in parts.items():
            comps.setdefault(k, []).append(val)
    return torch.tensor(totals, dtype=torch.float32), {k: torch.tensor(v, dtype=torch.float32) for k, v in comps.items()}


def fill_infra(rewards: torch.Tensor, group_ids: torch.Tensor, infra: list[bool]) -> torch.Tensor:
    """Rewards with each `infra_error` sample set to the mean of its group's other samples (0 if none): a lost
    worker says nothing about the completion, so it must not count as a failure in the group baseline. The
    trainer also leaves these samples out of the loss (rl.py)."""
    if not any(infra):
        return rewards
    out = rewards.clone()  # (N,)
    bad = torch.tensor(infra, dtype=torch.bool)  # (N,)
    for g in torch.unique(group_ids[bad]):
        same = group_ids == g  # (N,)
        ok = same & ~bad
        out[same & bad] = rewards[ok].mean() if ok.any() else 0.0
    return out


def collect(policy, sampler, verifier, tasks: list[Task], group_size: int, sampling: SamplingConfig,
            rewards: RewardConfig | None = None, seed: int | None = None, stream: bool = False) -> Rollouts:
    """Sample `group_size` completions per task, verify them and score them. stream: each completion goes to
    the verifier as soon as it finishes decoding (rollout/stream.py); the same verdicts, earlier."""
    prompts = [policy.encode_prompt(prompt_text(t)) for t in tasks]
    cfg = sampling if seed is None else dataclasses.replace(sampling, seed=seed)
    overlap = None
    t0 = time.perf_counter()
    if stream:
        per_sample = [t for t in tasks for _ in range(group_size)]  # the engines' row order: prompt-contiguous
        with VerifyStream(verifier, per_sample) as vs:
            batch = sampler.sample(prompts, group_size, cfg, on_finish=vs.submit)
            t1 = time.perf_counter()
            verdicts, timing = vs.result()
        overlap = timing.overlap_frac
    else:
        batch = sampler.sample(prompts, group_size, cfg)
        t1 = time.perf_counter()
        per_sample = [tasks[int(i)] for i in batch.prompt_index]
        verdicts = verifier.verify_many(list(zip(per_sample, batch.texts)))
    t2 = time.perf_counter()
    n_tokens = [int(n) for n in batch.n_tokens]
    truncated = [f == "length" for f in batch.finish_reason]
    rewards, comps = score(per_sample, batch.texts, verdicts, n_tokens, truncated, cfg.max_new_tokens, rewards)
    stats = vs.dedup_stats if stream else verifier.last if isinstance(verifier, DedupVerifier) else None
    rewards = fill_infra(rewards, batch.prompt_index, [v.status == "infra_error" for v in verdicts])
    return Rollouts(tasks, prompts, batch, verdicts, rewards, comps, t1 - t0, t2 - t1, stats, overlap)


def rollout_metrics(r: Rollouts) -> dict[str, float]:
    """Diagnostics of one batch of rollouts (reward, pass rate, group spread, lengths, statuses). The group std is
    the sample (n - 1) std, the one the grpo advantage divides by (0 for a group of one)."""
    _, _, _, std = group_stats(r.rewards.float(), r.group_ids)  # (K,)
    stds = std.tolist()
    lens = r.model_tokens  # (N,) the model's tokens: an episode's tool results are not its response
    m = {"reward_mean": r.rewards.mean().item(), "pass_rate": r.passed.mean().item(),
         "group_std_mean": sum(stds) / max(len(stds), 1),
         "zero_var_frac": sum(s == 0 for s in stds) / max(len(stds), 1),
         "response_len_mean": lens.mean().item(), "response_len_max": lens.max().item(),
         "truncated_frac": sum(f == "length" for f in r.batch.finish_reason) / max(len(lens), 1),
         "time/sample_s": r.sample_s, "time/verify_s": r.verify_s,
         "new_tokens_per_s": lens.sum().item() / max(r.sample_s, 1e-9)}
    if r.verify_stats is not None:
        m.update(r.verify_stats.metrics())
    if r.verify_overlap is not None:
        m["verify_overlap_frac"] = r.verify_overlap
    for status, c in Counter(v.status for v in r.verdicts).items():
        m[f"verdict/{status}"] = c / len(r.verdicts)
    m["infra_errors"] = float(sum(v.status == "infra_error" for v in r.verdicts))  # count, left out of the loss
    kinds = [r.task_of(i).kind for i in range(len(r.verdicts))]
    if len(set(kinds)) > 1:  # a mixed set (code + math): pass rate per task kind
        for kind in sorted(set(kinds)):
            got = [v.passed for v, k in zip(r.verdicts, kinds) if k == kind]
            m[f"pass_rate/{kind}"] = sum(got) / len(got)
    if len(r.components) > 1:  # each component's mean and share of the total, to see when one dominates
        m.update(reward_metrics([{k: float(v[i]) for k, v in r.components.items()} for i in range(len(r.rewards))]))
    return m


def rollout_records(r: Rollouts, step: int, eos_ids) -> list[str]:
    """One rollouts.jsonl line per sample: step, task_id, group, prompt (the task text the model was posed: the
    prompt, or an episode's issue text), completion, reward, passed, status, and how the
    sample ended: `finish_reason` ('stop' or 'length') and `eos` (its last token is an EOS id, which the text does
    not show: a stop-string finish or a truncated sample has none). Episodes add `turn_versions`: the policy
    version that sampled each model turn (they differ within an episode with rl.partial_rollouts)."""
    eos = set(eos_ids)
    out = []
    for i, v in enumerate(r.verdicts):
        n = int(r.batch.n_tokens[i])
        ended_eos = n > 0 and int(r.batch.tokens[i, n - 1]) in eos
        t = r.task_of(i)
        rec = {"step": step, "task_id": t.task_id, "group": int(r.group_ids[i]),
               "prompt": t.problem if r.episodes else prompt_text(t), "completion": r.batch.texts[i],
               "reward": float(r.rewards[i]), "passed": v.passed, "status": v.status,
               "finish_reason": r.batch.finish_reason[i], "eos": ended_eos}
        if r.episodes:
            rec["turn_versions"] = [u.version for u in r.episodes[i].transcript.turns]
        out.append(json.dumps(rec) + "\n")
    return out
