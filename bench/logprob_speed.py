"""Benchmark: the trainer's log-prob forward + backward (`completion_logprobs`) against the previous formulation,
in one run, on the demo's GRPO batch shapes.

    python bench/logprob_speed.py            # ends with one JSON line

Baseline ("full"): the LM head over every (row, column) of the
padded (N, T) batch, a full (N, T, V) log-softmax, the sampled token gathered, the entropy from exp(log-softmax).
Ours (codechat/policy/logprobs.py): rows in up to 4 chunks of similar length, each run through the layers at
its own width; the LM head only at the masked-in positions; logit - logsumexp with one softmax shared by the
entropy and the backward. Both use the same fast transformer pass (fastlm.py) and
compute log-probs with entropy, then backward a token-mean loss. The batch is bench/dedup_update.py's replay of
a demo GRPO step (16 prompts x 8 samples of reference-like code, `tiny` preset), so the padding is realistic.
Reported: median seconds over --repeats alternating runs, the max |difference| of log-probs and of gradients.
JSON: {"full_s", "ours_s", "ratio" (full/ours), "max_logp_diff", "max_grad_diff", "rows", "T", "real_frac"}.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from codechat.demos.demo import demo_config  # noqa: E402
from codechat.policy import completion_logprobs, load_policy  # noqa: E402
from codechat.policy.decoding import positions  # noqa: E402
from codechat.policy.fastlm import FastLM  # noqa: E402
from codechat.policy.logprobs import _left_pad  # noqa: E402
from dedup_update import build_rollouts, replay_groups  # noqa: E402


def full_logprobs(model, prompts, index, tokens, mask):
    """The previous formulation (commit 761cb17): every row through the layers at the batch's full width T, the
    (N, T, V) logits and log-softmax over the whole padded batch."""
    real = mask.flip(1).cumsum(1).flip(1) > 0  # (N, T)
    used, index = torch.unique(index, return_inverse=True)
    prompts = [prompts[i] for i in used.tolist()]
    fl = FastLM(model)
    ids, valid = _left_pad(prompts, 0, tokens.device)  # (P, Lp)
    hp, kv = fl.forward(ids, positions(valid), valid)
    past = [(k.index_select(0, index), v.index_select(0, index)) for k, v in kv]  # each (N, Hkv, Lp, D)
    cpos = valid.long().sum(1)[index][:, None] + torch.arange(tokens.shape[1])  # (N, T)
    hc, _ = fl.forward(tokens, cpos, real, past, valid[index])  # (N, T, C)
    h = torch.cat([hp[:, -1:].index_select(0, index), hc[:, :-1]], dim=1)  # (N, T, C)
    logits = fl.logits(h).float()  # (N, T, V)
    logp_all = torch.log_softmax(logits, dim=-1)  # (N, T, V)
    logp = logp_all.gather(2, tokens[..., None])[..., 0] * mask  # (N, T)
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1) * mask  # (N, T)
    return logp, entropy


def timed(fn, model, mask):
    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    logp, ent = fn()
    (logp.sum() / mask.sum()).backward()
    dt = time.perf_counter() - t0
    return dt, logp.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = demo_config(run_dir=tmp)
        policy = load_policy(cfg.model)
        r = build_rollouts(policy, replay_groups(cfg, 0.585, 0), cfg)
    model, b = policy.model, r.batch
    model.train()
    index = b.prompt_index.long()
    runs = {
        "full": lambda: full_logprobs(model, r.prompts, index, b.tokens, b.mask),
        "ours": lambda: completion_logprobs(model, r.prompts, index, b.tokens, b.mask, with_entropy=True, fast=True),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    out = {}
    for _ in range(args.repeats):
        for k, fn in runs.items():
            dt, lp, grads = timed(fn, model, b.mask)
            times[k].append(dt)
            out[k] = (lp, grads)
    full, ours = statistics.median(times["full"]), statistics.median(times["ours"])
    dlp = (out["full"][0] - out["ours"][0]).abs().max().item()
    dg = max((a - c).abs().max().item() for a, c in zip(out["full"][1], out["ours"][1]))
    N, T = b.tokens.shape
    print(f"{N} rows x {T} columns, {b.mask.mean().item():.1%} real; forward+backward s: full {full:.3f}  "
          f"ours {ours:.3f}  ({full / ours:.2f}x); max |logp diff| {dlp:.1e}, max |grad diff| {dg:.1e}")
    print(json.dumps({"full_s": round(full, 4), "ours_s": round(ours, 4), "ratio": round(full / ours, 3),
                      "max_logp_diff": dlp, "max_grad_diff": dg, "rows": N, "T": T,
                      "real_frac": round(b.mask.mean().item(), 4)}))


if __name__ == "__main__":
    main()
