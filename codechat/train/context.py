"""The context guard of a run: tasks whose prompt would not leave room to answer are dropped, with a count.

`data.max_prompt_tokens` (0 = the model's context minus sampling.max_new_tokens) bounds the encoded prompt of
every train, eval and SFT task; an SFT example also needs its prompt + solution inside the context (a longer
one is what OOM-killed SFT). The sampler itself stops at the context (policy/context.py), so what is left can
never sample past max_position_embeddings.

    limit = prompt_limit(cfg, policy)                       # at the run's start
    tasks = drop_long(tasks, policy, limit, "train")        # prints "data: dropped 3 of 400 train tasks ..."
"""
from __future__ import annotations

import sys

from codechat import CodechatError
from codechat.config import RunConfig
from codechat.policy.context import context_length
from codechat.rollout.collect import prompt_text
from codechat.tasks import Task
from codechat.tasks.repo import RepoTask


def prompt_limit(cfg: RunConfig, policy) -> int | None:
    """The prompt token limit of the run; None when neither the config nor the model gives one."""
    ctx, want = context_length(policy.model), cfg.data.max_prompt_tokens
    if want < 0:
        raise CodechatError(f"data.max_prompt_tokens: expected >= 0 (0 = the model's context minus "
                            f"sampling.max_new_tokens), got {want}")
    if ctx is None:
        return want or None
    if want > ctx - 1:
        raise CodechatError(f"data.max_prompt_tokens: {want} leaves no room to answer in the model's context of "
                            f"{ctx} tokens; expected 1..{ctx - 1}")
    if want:
        return want
    auto = ctx - cfg.sampling.max_new_tokens
    if auto < 1:
        raise CodechatError(f"sampling.max_new_tokens: {cfg.sampling.max_new_tokens} fills the model's context of "
                            f"{ctx} tokens; expected at most {ctx - 1}")
    return auto


def drop_long(tasks: list[Task], policy, limit: int | None, what: str, with_solution: bool = False) -> list[Task]:
    """The tasks whose encoded prompt has at most `limit` tokens (with_solution: and prompt + solution fit the
    context); prints how many were dropped."""
    ctx = context_length(policy.model)
    if any(isinstance(t, RepoTask) for t in tasks):  # episodes have no one prompt: they truncate at a turn boundary
        return tasks
    if limit is None and (ctx is None or not with_solution):
        return tasks
    kept = []
    for t in tasks:
        n = len(policy.encode_prompt(prompt_text(t)))
        if limit is not None and n > limit:
            continue
        if with_solution and ctx is not None and n + len(policy.tokenizer(t.solution or "")["input_ids"]) + 1 > ctx:
            continue
        kept.append(t)
    if len(kept) < len(tasks):
        print(f"data: dropped {len(tasks) - len(kept)} of {len(tasks)} {what} tasks with prompts over {limit} tokens"
              + (f" or prompt + solution over the context ({ctx})" if with_solution else "")
              + " (data.max_prompt_tokens)", file=sys.stderr, flush=True)
    if tasks and not kept:
        raise CodechatError(f"data.max_prompt_tokens: every {what} task is longer than {limit} prompt tokens")
    return kept
