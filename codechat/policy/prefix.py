"""KV kept between sampler calls for contexts that grow: a multi-turn episode's transcript is the last call's
context plus what was sampled plus the tool result, so only the new tokens need a forward pass.

    sampler.sample(contexts, 1, cfg, keys=episode_ids)   # first turn: full prefill, KV stored per key
    sampler.sample(longer_contexts, 1, cfg, keys=episode_ids)   # next turn: prefill only what was appended

What a key's entry holds: the token ids of its context plus its sample minus the sample's last token (that one
was never fed through the model), and each layer's (k, v) for exactly those tokens, without padding. On the next
call with the same key, the longest common prefix of the stored ids and the new context is reused (never the
whole context: the last token is always prefilled, its logits start decoding), so a context that was cut or
edited still gets exactly the tokens it holds. After a call with keys the store holds the entries of those keys
only (an episode that did not act again has ended); `Sampler.release_kv()` empties it (the episode runner calls
it through `Agent.end_run` when its episodes are over).

What guarantees the cached path computes what a full prefill would: KV of a prefix depends on that prefix and the
weights only (causal attention, positions counted from the start). The ids are compared token by token, and the
whole store is dropped when any parameter of the model changed in place since it was filled (`weights_version`:
the sum of the parameters' version counters, which every optimizer step and `load_state_dict` bump). Numerics:
the chunked prefill sums in another order than one pass, so log-probs agree to float rounding (~1e-6 in fp32).

Simplification: only the lean decoder (fastlm.py, Llama-family models) reuses KV; other models prefill
everything (same results, no saving). vLLM has its own prefix cache (`rollout.vllm_prefix_caching`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

import torch


def weights_version(model) -> int:
    """Sum of the parameters' in-place version counters: changes whenever any weight is written in place."""
    return sum(p._version for p in model.parameters())


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class PrefixEntry:
    tokens: list[int]
    """The ids whose KV is held (a context and its sample, minus the sample's last token)."""
    kv: list
    """Per layer (k, v), each (Hkv, S, D) with S = len(tokens)."""


@dataclass
class PrefixStore:
    entries: dict = field(default_factory=dict)
    """key -> PrefixEntry."""
    version: int = -1
    """`weights_version` of the model when the entries were computed."""
    reused_tokens: int = 0
    """Context tokens whose KV came from the store (summed over calls), for benchmarks and logs."""
    prefilled_tokens: int = 0
    """Context tokens that were run through the model (summed over calls)."""

    def reusable(self, keys: list[Hashable], contexts: list[list[int]], version: int) -> list[int]:
        """Per context, how many leading tokens' KV the store can give (0 when none; never the whole context)."""
        if version != self.version:
            self.entries, self.version = {}, version
        out = []
        for key, ctx in zip(keys, contexts):
            e = self.entries.get(key)
            out.append(0 if e is None else min(common_prefix(e.tokens, ctx), len(ctx) - 1))
        return out

    def past(self, keys: list[Hashable], reuse: list[int], like: torch.Tensor):
        """The reused KV as a left-padded batch: per layer (k, v) each (P, Hkv, S, D), valid (P, S) bool;
        None when nothing is reused. `like`: a tensor of the KV dtype and device."""
        S = max(reuse)
        if S == 0:
            return None
        first = next(self.entries[k].kv for k, r in zip(keys, reuse) if r)
        layers = []
        for li, (k0, _) in enumerate(first):
            Hkv, D = k0.shape[0], k0.shape[2]
            pk = like.new_zeros(len(keys), Hkv, S, D)
            pv = like.new_zeros(len(keys), Hkv, S, D)
            for i, (key, r) in enumerate(zip(keys, reuse)):
                if r:
                    k, v = self.entries[key].kv[li]
                    pk[i, :, S - r:] = k[:, :r]
                    pv[i, :, S - r:] = v[:, :r]
            layers.append((pk, pv))
        valid = torch.zeros(len(keys), S, dtype=torch.bool, device=like.device)
        for i, r in enumerate(reuse):
            valid[i, S - r:] = True
        return layers, valid

    def replace(self, new: dict) -> None:
        """Keep exactly the entries of the last call (key -> PrefixEntry)."""
        self.entries = new
