"""Benchmark: the RL update of bench/vs_trl.py's workload in fp32 against a variant, in CPU seconds.

    python bench/update_speed.py              # fp32 vs model.compute_dtype=bfloat16, 5 alternating repeats; one JSON line
    python bench/update_speed.py --repeats 3 --threads 1
    python bench/update_speed.py --pair head  # fp32, the fused LM head (policy/lm_head.py) vs the (R, V) one
    python bench/update_speed.py --pair lean-bf16  # bf16 autocast, the plain norm and MLP vs the lean ops

One update = what `rl_update` runs there (one optimizer step, KL to a frozen reference): the reference's no-grad
log-prob pass, the policy's log-prob forward, the loss (policy term + k3 KL, beta 0.04), the backward, gradient
clipping and an AdamW step, through codechat's `completion_logprobs` on vs_trl's random Qwen2 (hidden 256,
4 layers, 4 heads, intermediate 688, vocab 1024, tied embeddings), 4 prompts x 8 completions x 64 tokens, no
duplicates. `--pair head` compares, both in fp32, the fused chunked head with the (R, V)
logits + `_PickedLogprob` path (`codechat.policy.lm_head.FUSE_MIN_LOGITS` set to 0 / to infinity). `--pair lean`
and `lean-bf16` compare, in fp32 or under bf16 autocast, the model's own MLP and the plain norm with
policy/lean_ops.py's `SiluMulLinear` and `WeightedRMSNorm` (fastlm's default in training). The two variants alternate
(A B, B A, ...) on one model (a step's cost does not depend on the weights), so drift in the
machine's load hits both; figures are medians of this process's CPU seconds (less disturbed by a busy machine than wall
time). Before timing, the two variants' log-probs and gradients on the same weights are compared.
JSON: {"fp32_cpu_s", "bf16_cpu_s", "ratio" (fp32 / bf16), "max_logp_diff", "mean_logp_diff", "grad_rel_l2",
"threads"}; with --pair head, "plain_head_cpu_s" and "fused_head_cpu_s" in place of fp32/bf16, ratio = plain / fused;
with --pair lean(-bf16), "plain_ops_cpu_s" and "lean_ops_cpu_s", ratio = plain / lean.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import codechat.policy.lm_head as lm_head_mod  # noqa: E402
from codechat.policy import fastlm  # noqa: E402
from codechat.policy.logprobs import completion_logprobs  # noqa: E402
from codechat.policy.precision import compute_autocast  # noqa: E402

P, G, T, VOCAB = 4, 8, 64, 1024


def workload(seed: int = 0):
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=4, intermediate_size=688, tie_word_embeddings=True,
                      max_position_embeddings=512)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (14, 16, 18, 20)]  # vs_trl's: 12-21
    index = torch.arange(P).repeat_interleave(G)  # (N,)
    tokens = torch.randint(0, VOCAB, (P * G, T), generator=g)  # (N, T)
    adv = torch.randn(P * G, generator=g)  # (N,)
    return model, prompts, index, tokens, torch.ones(P * G, T), adv


@contextlib.contextmanager
def variant(name: str):
    """fp32 (the default path: at this size the (R, V) head), fused_head (fp32, the fused head forced on whatever
    the size), plain_head (fp32, the (R, V) head forced), bf16 (model.compute_dtype=bfloat16), or
    plain_ops / lean_ops with an optional _bf16 (fastlm's training norm and MLP without / with the lean ops)."""
    if name.startswith("plain_ops"):
        keep = fastlm.lean_training
        fastlm.lean_training = lambda x: False
        try:
            with compute_autocast("bfloat16" if name.endswith("_bf16") else "", "cpu"):
                yield
        finally:
            fastlm.lean_training = keep
    elif name.startswith("lean_ops"):
        with compute_autocast("bfloat16" if name.endswith("_bf16") else "", "cpu"):
            yield
    elif name in ("plain_head", "fused_head"):
        keep = lm_head_mod.FUSE_MIN_LOGITS
        lm_head_mod.FUSE_MIN_LOGITS = 1 << 62 if name == "plain_head" else 0
        try:
            yield
        finally:
            lm_head_mod.FUSE_MIN_LOGITS = keep
    else:
        with compute_autocast("bfloat16" if name == "bf16" else "", "cpu"):
            yield


def loss_of(model, ref, data, name: str):
    _, prompts, index, tokens, mask, adv = data
    with torch.no_grad(), variant(name):
        ref_lp = completion_logprobs(ref, prompts, index, tokens, mask)  # (N, T)
    with variant(name):
        lp = completion_logprobs(model, prompts, index, tokens, mask)  # (N, T)
    d = ref_lp - lp
    kl = d.exp() - d - 1  # k3
    loss = (-(lp - lp.detach()).exp() * adv[:, None] + 0.04 * kl).mul(mask).sum() / mask.sum()
    return loss, lp.detach()


def step(model, ref, opt, data, name: str) -> None:
    loss, _ = loss_of(model, ref, data, name)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def compare(data, names) -> tuple[float, float, float]:
    """(max |logp diff|, mean |logp diff|, relative L2 gradient difference) of names[1] against names[0], same
    weights."""
    model = data[0]
    ref = copy.deepcopy(model).eval()
    out = []
    for name in names:
        model.zero_grad(set_to_none=True)
        loss, lp = loss_of(model, ref, data, name)
        loss.backward()
        out.append((lp, torch.cat([p.grad.flatten() for p in model.parameters()])))
    model.zero_grad(set_to_none=True)
    (a, ga), (b, gb) = out
    return (a - b).abs().max().item(), (a - b).abs().mean().item(), ((ga - gb).norm() / ga.norm()).item()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed updates per variant (after one warm-up each)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (vs_trl's default: 1)")
    ap.add_argument("--pair", choices=["bf16", "head", "lean", "lean-bf16"], default="bf16",
                    help="fp32 against bf16 autocast, the fused LM head against the (R, V) one (both fp32), or the "
                         "plain norm and MLP against the lean ops (fp32, or under bf16 autocast)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    names = {"bf16": ("fp32", "bf16"), "head": ("plain_head", "fused_head"), "lean": ("plain_ops", "lean_ops"),
             "lean-bf16": ("plain_ops_bf16", "lean_ops_bf16")}[a.pair]
    data = workload()
    max_d, mean_d, grad_rel = compare(data, names)
    model, ref = copy.deepcopy(data[0]).train(), copy.deepcopy(data[0]).eval()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    times: dict[str, list[float]] = {n: [] for n in names}
    for name in times:
        step(model, ref, opt, data, name)  # warm-up: allocator, AdamW state, oneDNN's bf16 kernels
    for r in range(a.repeats):
        for name in names if r % 2 == 0 else names[::-1]:  # A B, B A, ...
            c0 = time.process_time()
            step(model, ref, opt, data, name)
            times[name].append(time.process_time() - c0)
    base, other = (statistics.median(times[k]) for k in names)
    label = {"bf16": "bf16 autocast", "fp32": "fp32", "fused_head": "fused head", "plain_head": "fp32 (R, V) head",
             "plain_ops": "plain ops", "lean_ops": "lean ops", "plain_ops_bf16": "bf16 plain ops",
             "lean_ops_bf16": "bf16 lean ops"}
    print(f"{P * G} rows x {T} tokens, {a.threads} thread(s): update CPU s {label[names[0]]} {base:.3f}  "
          f"{label[names[1]]} {other:.3f}  ({base / other:.2f}x); {names[1]} vs {names[0]}: max |logp diff| "
          f"{max_d:.1e}, mean {mean_d:.1e}, gradient rel L2 {grad_rel:.1e}", file=sys.stderr)
    keys = {"bf16": ("fp32_cpu_s", "bf16_cpu_s"), "head": ("plain_head_cpu_s", "fused_head_cpu_s")}.get(
        a.pair, ("plain_ops_cpu_s", "lean_ops_cpu_s"))
    print(json.dumps({keys[0]: round(base, 4), keys[1]: round(other, 4), "ratio": round(base / other, 3),
                      "max_logp_diff": max_d, "mean_logp_diff": mean_d, "grad_rel_l2": grad_rel,
                      "threads": a.threads}))


if __name__ == "__main__":
    main()
