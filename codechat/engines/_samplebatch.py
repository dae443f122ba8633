"""Stand-in for `codechat.policy.sampler.SampleBatch` and `cut_at_stop` until the policy package is merged.

Same fields and meaning as policy/sampler.py; delete this file once `codechat.policy` exists on main.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SampleBatch:
    prompt_index: torch.Tensor
    """(N,) long: the prompt each sample came from; the n samples of a prompt are contiguous."""
    tokens: torch.Tensor
    """(N, T) long: new tokens, right-padded with the pad id; T = the longest sample."""
    mask: torch.Tensor
    """(N, T) float: 1 on real new tokens (including the final EOS/stop token), 0 on padding."""
    logprobs: torch.Tensor
    """(N, T) float: log-prob of each token under the distribution it was sampled from; 0 on padding."""
    finish_reason: list[str]
    """Per sample: 'stop' (EOS or stop string) or 'length' (max_new_tokens)."""
    texts: list[str]
    """Per sample: decoded completion (special tokens dropped), cut just after the stop string."""
    n_tokens: torch.Tensor
    """(N,) long: real new tokens per sample."""


def cut_at_stop(text: str, stops: list[str]) -> str:
    """Cut `text` just after the earliest stop string (kept); unchanged when none occurs."""
    ends = [text.find(s) + len(s) for s in stops if s and s in text]
    return text[: min(ends)] if ends else text
