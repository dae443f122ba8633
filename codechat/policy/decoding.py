"""KV-cached decoders behind the sampler: prefill P prompts once, share each prompt's KV with its samples, then
one token per active row per step; finished rows can be dropped.

Two implementations of one small interface (`prefill`, `step`, `select`):
- `FastDecoder`: static preallocated cache + the lean forward of fastlm.py (Llama-family models).
- `HFDecoder`: any causal LM through its own forward and transformers' `DynamicCache` (the fallback).

Both take left-padded prompts: ids, valid (P, Lp) and `index` (N,), the prompt of each sample row.
"""
from __future__ import annotations

import inspect

import torch

from codechat.policy.fastlm import FastLM, unwrap, usable


def positions(valid):
    """Position ids counting real tokens only: valid (B, L) bool -> (B, L) long."""
    return (valid.long().cumsum(1) - 1).clamp(min=0)


class FastDecoder:
    def __init__(self, fast: FastLM):
        self.fast = fast

    def prefill(self, ids, valid, index, max_new: int):
        """Returns next-token logits (N, V) for every sample row."""
        P, Lp = ids.shape
        h, kv = self.fast.forward(ids, positions(valid), valid)  # h (P, Lp, C); kv per layer (P, Hkv, Lp, D)
        logits = self.fast.logits(h[:, -1])  # (P, V): left padding puts every last real token in the last column
        N, T = index.numel(), Lp + max_new
        self.cache = self.fast.new_cache(N, T, kv[0][0].dtype, ids.device)
        for (ck, cv), (k, v) in zip(self.cache, kv):
            ck[:, :, :Lp] = k[index]
            cv[:, :, :Lp] = v[index]
        self.key_valid = torch.cat([valid[index], valid.new_ones(N, max_new)], dim=1)  # (N, T)
        self.pos = valid.long().sum(1)[index]  # (N,) position of the next token
        self.col = Lp  # cache column of the next token
        return logits[index]

    def step(self, tok):
        """tok (B,) -> logits (B, V)."""
        logits = self.fast.decode(tok, self.pos, self.cache, self.key_valid, self.col)
        self.pos = self.pos + 1
        self.col += 1
        return logits

    def select(self, rows):
        """Keep only batch rows `rows` (B',); copies just the filled part of the cache."""
        c = self.col
        new = []
        for k, v in self.cache:
            nk, nv = k.new_empty((rows.numel(), *k.shape[1:])), v.new_empty((rows.numel(), *v.shape[1:]))
            nk[:, :, :c] = k[rows, :, :c]
            nv[:, :, :c] = v[rows, :, :c]
            new.append((nk, nv))
        self.cache = new
        self.key_valid = self.key_valid[rows]
        self.pos = self.pos[rows]


class HFDecoder:
    def __init__(self, model):
        self.model = model
        params = inspect.signature(unwrap(model).forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"

    def _run(self, ids, mask, pos, cache):
        kw = {self.cache_kw: cache} if cache is not None else {}
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **kw)
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        return out.logits[:, -1], cache  # (B, V)

    def prefill(self, ids, valid, index, max_new: int):
        logits, self.cache = self._run(ids, valid.long(), positions(valid), None)
        self.cache.batch_select_indices(index)
        self.mask = valid[index].long()  # (N, Lp), grows by one column per step
        self.pos = valid.long().sum(1)[index]
        return logits[index]

    def step(self, tok):
        self.mask = torch.cat([self.mask, self.mask.new_ones(self.mask.shape[0], 1)], dim=1)
        logits, self.cache = self._run(tok[:, None], self.mask, self.pos[:, None], self.cache)
        self.pos = self.pos + 1
        return logits

    def select(self, rows):
        self.cache.batch_select_indices(rows)
        self.mask = self.mask[rows]
        self.pos = self.pos[rows]


def make_decoder(model, fast: bool | None = None):
    """FastDecoder (with fused weights when possible) when `fast` is None and fastlm.usable(model) or when fast
    is True; else HFDecoder."""
    if fast or (fast is None and usable(model)):
        lm = FastLM(model)
        lm.fuse()
        return FastDecoder(lm)
    return HFDecoder(model)
