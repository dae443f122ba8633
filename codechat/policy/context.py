"""The model's context length: how many tokens (prompt + completion) its position embeddings cover.

    context_length(policy.model)   # -> 1024 for the tiny preset; None when the config does not say
"""
from __future__ import annotations

from codechat import CodechatError

_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def context_length(model) -> int | None:
    """max_position_embeddings (or its older names) of a transformers model, a PEFT or FSDP wrapper included."""
    for m in (model, getattr(model, "module", None), getattr(model, "base_model", None)):
        cfg = getattr(m, "config", None)
        for key in _KEYS:
            v = getattr(cfg, key, None)
            if isinstance(v, int) and v > 0:
                return v
    return None


def new_token_budget(prompt_len: int, max_new_tokens: int, context: int | None) -> int:
    """Tokens a sample may add after a prompt of prompt_len: max_new_tokens, cut at the context's end."""
    if context is None:
        return max_new_tokens
    room = context - prompt_len
    if room < 1:
        raise CodechatError(f"sampler: a prompt of {prompt_len} tokens fills the model's context ({context} "
                            f"tokens); shorten it or lower data.max_prompt_tokens")
    return min(max_new_tokens, room)
