"""Token log-probs of given completions under a model, differentiable: what the trainer and the reference model
compute for the sampler's samples.

Fast path (Llama-family models, see fastlm.py): each distinct prompt runs once (P rows), and its per-layer KV is
gathered for its n completions (a differentiable index, so gradients of the prompt part are summed over its
completions, exactly as in a full forward); the completions then run attending to that KV, in up to 4 chunks
of rows of similar length, each at its own width (`_length_chunks`: less padding through the layers). Compared
with a forward over every [prompt + completion] row this saves (n - 1) / n of the prompt's compute.

Reference path (any causal LM, wrapped models such as DDP, FSDP-sharded ones): one forward over [prompt + completion] rows,
right-padded. Tests check the two agree in values and gradients.

A tied embedding table (Qwen's small checkpoints) gets one (V, C) gradient buffer on the fast path: the head's
d W, into which the lookup's rows are added (lm_head.py's `TiedGrad`), not two summed by autograd.

Both paths give the LM head and the log-prob only the R masked-in positions (not padding), drop the columns past
every row's last real token, and pick the sampled token's log-prob as logit - logsumexp instead of materialising
the (R, V) log-softmax. The fast path with a plain fp32 head and no autocast runs head + log-softmax + pick fused
in blocks of rows x vocabulary columns (lm_head.py: no (R, V) tensor is built); otherwise the (R, V) logits are
built and the softmax is computed once for the entropy (a detached diagnostic) and the backward (`_PickedLogprob`).
Tests: tests/test_logprobs_speed.py (against a brute-force per-row forward), tests/test_lm_head.py;
speed: bench/logprob_speed.py, bench/update_speed.py.
"""
from __future__ import annotations

import torch

from codechat.policy.decoding import positions
from codechat.policy.fastlm import FastLM, usable
from codechat.policy.fsdp import is_sharded
from codechat.policy.lm_head import TiedGrad, fusable, head_logprobs


def _left_pad(prompts: list[list[int]], pad: int, device):
    P, Lp = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((P, Lp), pad, dtype=torch.long)
    valid = torch.zeros(P, Lp, dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, Lp - len(p):] = torch.tensor(p, dtype=torch.long)
        valid[i, Lp - len(p):] = True
    return ids.to(device), valid.to(device)


def _device(model):
    return next(model.parameters()).device


def completion_logprobs(model, prompts: list[list[int]], prompt_index, tokens, mask, temperature: float = 1.0,
                        with_entropy: bool = False, fast: bool | None = None):
    """Log-probs (N, T) of `tokens` (N, T) after prompt prompts[prompt_index[i]]; 0 where mask (N, T) is 0.
    Tokens up to a row's last 1 in mask are its completion (a 0 before it drops only that token's log-prob).
    With with_entropy, also the entropy (N, T) of each next-token distribution (detached: for logging). Logits are divided by
    `temperature` first. fast: None = fast path when usable, False = reference path."""
    N, T = tokens.shape
    prompts, index, tokens, real, flat, Tr, use_fast = _select(model, prompts, prompt_index, tokens, mask, fast)
    tok = tokens.flatten()[flat]  # (R,) the tokens given a log-prob
    if use_fast:
        fl = FastLM(model)
        tied = _tied_grad(fl)
        h = fl.final_norm(_fast_hidden(fl, prompts, index, tokens, real, flat, tied))  # (R, C)
        head = fl.lm.lm_head
        if fusable(head, h):  # LM head + log-softmax + pick in blocks (lm_head.py): no (R, V) tensors
            picked, ent = head_logprobs(h, head, tok, temperature, with_entropy, tied=tied)  # (R,) each
        else:
            picked, ent = _picked(head(h), tok, temperature)
    else:
        picked, ent = _picked(_reference_logits(model, prompts, index, tokens, real, flat), tok, temperature)
    logp = _scatter(picked, flat, N, T, Tr)  # (N, T)
    if not with_entropy:
        return logp
    return logp, _scatter(ent, flat, N, T, Tr)  # entropy (N, T): detached, a diagnostic


def completion_logits(model, prompts: list[list[int]], prompt_index, tokens, mask, fast: bool | None = None):
    """The logits (R, V) that predict the R masked-in tokens of mask (N, T) (row-major), tokens[i, j] after
    prompts[prompt_index[i]] + tokens[i, :j], through the fast or the reference path (module docstring).
    -> (logits, flat (R,) their positions in the (N, Tr) grid, tokens cut to (N, Tr), Tr)."""
    prompts, index, tokens, real, flat, Tr, use_fast = _select(model, prompts, prompt_index, tokens, mask, fast)
    if use_fast:
        fl = FastLM(model)
        logits = fl.logits(_fast_hidden(fl, prompts, index, tokens, real, flat))
    else:
        logits = _reference_logits(model, prompts, index, tokens, real, flat)
    return logits, flat, tokens, Tr


def _picked(logits, tok, temperature: float):
    """Logits (R, V), tokens (R,) -> their log-probs (R,) and entropies (R,) at the temperature."""
    logits = logits.float()  # (R, V)
    if temperature != 1.0:
        logits = logits / temperature
    return _PickedLogprob.apply(logits, tok)


def _select(model, prompts, prompt_index, tokens, mask, fast):
    """The prompts the rows use, the rows' prompt index into them, tokens and real (N, Tr) cut past every row's
    last real token, flat (R,) the masked-in positions, Tr, and whether the fast path runs."""
    dev = _device(model)
    tokens, mask = tokens.to(dev), mask.to(dev)
    index = torch.as_tensor(prompt_index, device=dev).long()  # (N,)
    used, index = torch.unique(index, return_inverse=True)  # run only the prompts these rows use (minibatches)
    prompts = [prompts[i] for i in used.tolist()]
    # tokens up to each row's last masked-in one are real (attended to); a 0 before it only drops the token's
    # log-prob, e.g. a loss mask with holes. Zeros after it are padding: columns past every row's last real
    # token are not run at all.
    real = mask.flip(1).cumsum(1).flip(1) > 0  # (N, T) bool
    Tr = int(real.any(0).nonzero().max()) + 1 if real.any() else 1
    tokens, real, sel = tokens[:, :Tr], real[:, :Tr], mask[:, :Tr] > 0  # (N, Tr)
    if fast is None and is_sharded(model):  # FSDP: only the model's own forward gathers the shards; and one path
        fast = False  # for policy, old and reference log-probs, so that equal weights give exactly equal values
    flat = sel.flatten().nonzero()[:, 0]  # (R,) the masked-in positions: the only ones given a log-prob
    return prompts, index, tokens, real, flat, Tr, bool(fast or (fast is None and usable(model)))


class _PickedLogprob(torch.autograd.Function):
    """logits (R, V), token ids (R,) -> the tokens' log-probs (R,) and the entropies (R,) (no gradient).

    One pass: p = softmax(logits) is computed once, gives the entropy, and is saved for the backward, whose
    gradient d logp / d logits = onehot(token) - p needs no second exp (autograd's logsumexp recomputes it)."""

    @staticmethod
    def forward(ctx, logits, tok):
        lse = torch.logsumexp(logits, dim=-1)  # (R,)
        p = torch.exp(logits - lse[:, None])  # (R, V)
        ent = lse - (p * logits).sum(-1)  # (R,)
        ctx.save_for_backward(p, tok)
        ctx.mark_non_differentiable(ent)
        return logits.gather(1, tok[:, None])[:, 0] - lse, ent

    @staticmethod
    def backward(ctx, g, _g_ent):
        p, tok = ctx.saved_tensors
        grad = p * -g[:, None]  # (R, V)
        return grad.scatter_add_(1, tok[:, None], g[:, None]), None


def _scatter(vals, flat, N: int, T: int, Tr: int):
    """Values (R,) at flat positions of an (N, Tr) grid -> (N, T), zeros elsewhere."""
    out = vals.new_zeros(N * Tr).index_put((flat,), vals)  # unique indices: a plain (deterministic) copy
    return torch.nn.functional.pad(out.view(N, Tr), (0, T - Tr))


def _tied_grad(fl) -> TiedGrad | None:
    """A TiedGrad when the table is tied to the head and gets a gradient here (lm_head.py), else None."""
    w = fl.lm.lm_head.weight
    return TiedGrad() if torch.is_grad_enabled() and w.requires_grad and fl.tied_head() else None


def _fast_hidden(fl, prompts, index, tokens, real, flat, tied: TiedGrad | None = None):
    """The pre-norm hidden states (R, C) that predict the R masked-in tokens, through FastLM. The prompts' and the
    completions' ids are looked up at once: one lookup, so a tied table's gradient is one (V, C) buffer."""
    ids, valid = _left_pad(prompts, 0, tokens.device)  # (P, Lp); pad id irrelevant (masked)
    N, T = tokens.shape
    e = fl.embed(torch.cat([ids.flatten(), tokens.flatten()]), tied)  # (P * Lp + N * T, C)
    ep, et = e[: ids.numel()].view(*ids.shape, -1), e[ids.numel() :].view(N, T, -1)  # (P, Lp, C), (N, T, C)
    hp, kv = fl.forward(ids, positions(valid), valid, embeds=ep)  # hp (P, Lp, C); kv per layer (P, Hkv, Lp, D)
    cpos = valid.long().sum(1)[index][:, None] + torch.arange(T, device=tokens.device)  # (N, T)
    hs, at = [], []
    for rows, Tc in _length_chunks(real.sum(1)):  # rows of similar length: little padding run through the layers
        idx = index.index_select(0, rows)  # (n,)
        # index_select: its backward (index_add) sums in a fixed order; k[index] with unsorted rows (minibatches
        # of a permutation) summed the prompt gradients in thread-dependent order: runs differed in the last bits
        past = [(k.index_select(0, idx), v.index_select(0, idx)) for k, v in kv]  # each (n, Hkv, Lp, D)
        hc, _ = fl.forward(tokens[rows, :Tc], cpos[rows, :Tc], real[rows, :Tc], past, valid[idx],
                           embeds=et.index_select(0, rows)[:, :Tc])  # (n, Tc, C)
        h = torch.cat([hp[:, -1:].index_select(0, idx), hc[:, :-1]], dim=1)  # (n, Tc, C): states predicting tokens
        pos = (rows[:, None] * T + torch.arange(Tc, device=tokens.device)).flatten()  # (n * Tc,) in the (N, T) grid
        hs.append(h.flatten(0, 1))
        at.append(pos)
    grid = torch.full((N * T,), -1, dtype=torch.long, device=tokens.device)
    at_all = torch.cat(at)
    grid[at_all] = torch.arange(len(at_all), device=tokens.device)  # (N, T) grid position -> row of cat(hs)
    return torch.cat(hs).index_select(0, grid[flat])  # (R, C); flat positions always lie in some chunk


def _length_chunks(lengths, max_chunks: int = 4, min_rows: int = 16):
    """Split rows by real length (N,) into up to max_chunks groups of similar length (longest first): a list of
    (rows (n,) long, the group's longest length). Deterministic (a stable sort)."""
    N = len(lengths)
    order = torch.sort(lengths, descending=True, stable=True).indices  # (N,)
    k = max(1, min(max_chunks, N // min_rows))
    return [(rows, max(int(lengths[rows[0]]), 1)) for rows in order.chunk(k)]


def _reference_logits(model, prompts, index, tokens, real, flat):
    dev = tokens.device
    N, T = tokens.shape
    lens = torch.tensor([len(p) for p in prompts], device=dev)[index]  # (N,)
    L = int(lens.max()) + T
    ids = torch.zeros(N, L, dtype=torch.long, device=dev)
    attn = torch.zeros(N, L, dtype=torch.long, device=dev)
    for i in range(N):  # row = prompt + completion + right padding
        p = prompts[int(index[i])]
        ids[i, : len(p)] = torch.tensor(p, device=dev)
        ids[i, len(p) : len(p) + T] = tokens[i]
        attn[i, : len(p)] = 1
        attn[i, len(p) : len(p) + T] = real[i].long()
    out = model(input_ids=ids, attention_mask=attn, position_ids=positions(attn.bool())).logits  # (N, L, V)
    at = lens[:, None] - 1 + torch.arange(T, device=dev)  # (N, T) position predicting each new token
    rows = torch.arange(N, device=dev)[:, None] * L + at  # (N, T) flat positions in out
    return out.flatten(0, 1).index_select(0, rows.flatten()[flat])  # (R, V)
