"""The opening-tag loss (verifier.thinking.opening_loss): keep the policy's first tokens on a well-formed opening.

    loss, m = opening_loss(model, prompts, prompt_index, tokens, n_tokens, paths, temperature)   # scalar, metrics

Balanced sampling teaches the mode choice at one position (after `<` `think`: `></` for the empty block, `>` for
a plan). Pushing the dominant `>` down there frees probability mass, and some of it lands on tokens that are on
neither path: held out, the RL models opened `<thinkwhencethink>\\ndef f` (docs/thinking.md, runs 2-4), which the
verifier reads as no thinking. Rewards only see the malformed openings that get sampled in training (few); this
loss sees the whole next-token distribution at every opening position of every sample:

    L = mean_i mean_{j in J_i} -log sum_{a in A_ij} pi_theta(a | prompt_i, y_i[:j])

A_ij = the tokens that continue a well-formed opening after the sample's first j tokens y_i[:j] -- the j-th token
of every path (the empty block, the open tag, the close tag, each encoded whole as the balanced sampler forces
it) whose first j tokens are y_i[:j]; J_i = the positions j <= len(y_i) where A_ij is non-empty (a sample that
left every path, or went past the open tag into its plan, has no later position). It is the cross-entropy of
"the next token keeps the opening well-formed" with the target 1: it leaves the split between the paths (the
mode choice) alone, unlike a KL to the SFT model at those positions, which also pulls pi(empty block) back to the
SFT model's ~5%. Simplified: paths are token sequences, so the same text written as other tokens counts as off
them (as in BalancedSampler); logits are divided by the sampling temperature (what is sampled).
"""
from __future__ import annotations

import torch

from codechat.policy.logprobs import completion_logits

TOO_SMALL = 1e-30
"""Floor on the well-formed mass before the log (a float32 softmax can underflow to 0)."""


def allowed_next(paths: list[list[int]], opening: list[int]) -> list[int]:
    """The tokens that continue a well-formed opening after `opening` (sorted, distinct; empty: none does)."""
    j = len(opening)
    return sorted({p[j] for p in paths if len(p) > j and p[:j] == opening})


def opening_positions(tokens: list[int], paths: list[list[int]]) -> list[tuple[int, list[int]]]:
    """-> [(j, A_j)] for the positions j <= len(tokens) of one completion where some token continues a path."""
    out = []
    for j in range(min(len(tokens), max(len(p) for p in paths)) + 1):
        a = allowed_next(paths, tokens[:j])
        if not a:
            break  # off every path (or past its end): no later position is on one either
        out.append((j, a))
    return out


def opening_loss(model, prompts: list[list[int]], prompt_index: torch.Tensor, tokens: torch.Tensor,
                 n_tokens: torch.Tensor, paths: list[list[int]], temperature: float = 1.0):
    """-> (L, metrics): L the scalar loss above over the N samples (prompt_index (N,), tokens (N, T) completions,
    n_tokens (N,) their lengths), with gradient; `thinking/opening_offpath_mass` the mean over samples and their
    positions of 1 - sum_A pi (the mass on malformed openings). Samples that share a prompt and an opening run
    once (a group's forced samples do), weighted by their count."""
    keys: dict[tuple, int] = {}  # (prompt index, opening) -> count
    for pi, t, n in zip(prompt_index.tolist(), tokens.tolist(), n_tokens.tolist()):
        pos = opening_positions(t[:n], paths)
        key = (pi, tuple(t[:pos[-1][0]]))  # the context of its last counted position
        keys[key] = keys.get(key, 0) + 1
    # per distinct opening: a completion row of the opening + one placeholder token, the logits wanted at the
    # positions j that predict its j-th token (j = len(opening): the token after it; the placeholder's own value
    # changes no logit taken), through the trainer's log-prob path (shared prompts, LM head on those rows only)
    where = [opening_positions(list(opening), paths) for _, opening in keys]  # [[(j, allowed)]] per opening
    T = max(len(o) for _, o in keys) + 1
    tokens_s = torch.zeros(len(keys), T, dtype=torch.long)  # (S, T)
    mask_s = torch.zeros(len(keys), T)  # (S, T)
    for s, ((_, opening), w) in enumerate(zip(keys, where)):
        tokens_s[s, :len(opening)] = torch.tensor(opening, dtype=torch.long)
        mask_s[s, [j for j, _ in w]] = 1.0
    logits, _, _, _ = completion_logits(model, prompts, [pi for pi, _ in keys], tokens_s, mask_s)  # (R, V)
    logp = torch.log_softmax(logits.float() / (temperature if temperature > 0 else 1.0), dim=-1)  # row-major
    per, off, r = [], [], 0
    for w in where:
        mass = torch.stack([logp[r + k, a].exp().sum() for k, (_, a) in enumerate(w)])  # (J,)
        r += len(w)
        per.append(-mass.clamp(min=TOO_SMALL).log().mean())
        off.append((1.0 - mass.detach()).mean())
    counts = list(keys.values())
    c = torch.tensor(counts, dtype=torch.float32, device=logits.device)  # (S,)
    loss = (torch.stack(per) * c).sum() / c.sum()
    offpath = float((torch.stack(off) * c).sum() / c.sum())
    return loss, {"thinking/opening_loss": loss.item(), "thinking/opening_offpath_mass": offpath}
