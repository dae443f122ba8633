"""Benchmark: the RL update of bench/vs_trl.py's workload in fp32 and under rl.autocast_bf16, in CPU seconds.

    python bench/update_speed.py              # 5 alternating repeats; ends with one JSON line
    python bench/update_speed.py --repeats 3 --threads 1

One update = what `rl_update` runs there (one optimizer step, KL to a frozen reference): the reference's no-grad
log-prob pass, the policy's log-prob forward, the loss (policy term + k3 KL, beta 0.04), the backward, gradient
clipping and an AdamW step, through codechat's `completion_logprobs` on vs_trl's random Qwen2 (hidden 256,
4 layers, 4 heads, intermediate 688, vocab 1024, tied embeddings), 4 prompts x 8 completions x 64 tokens, no
duplicates. The two variants alternate on one model (a step's cost does not depend on the weights), so drift in the
machine's load hits both; figures are medians of this process's CPU seconds (less disturbed by a busy machine than wall
time). Before timing, the two variants' log-probs and gradients on the same weights are compared.
JSON: {"fp32_cpu_s", "bf16_cpu_s", "ratio" (fp32 / bf16), "max_logp_diff", "mean_logp_diff", "grad_rel_l2",
"threads"}.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from codechat.policy.logprobs import completion_logprobs  # noqa: E402
from codechat.policy.precision import update_autocast  # noqa: E402

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


def loss_of(model, ref, data, bf16: bool):
    _, prompts, index, tokens, mask, adv = data
    with torch.no_grad(), update_autocast(bf16, "cpu"):
        ref_lp = completion_logprobs(ref, prompts, index, tokens, mask)  # (N, T)
    with update_autocast(bf16, "cpu"):
        lp = completion_logprobs(model, prompts, index, tokens, mask)  # (N, T)
    d = ref_lp - lp
    kl = d.exp() - d - 1  # k3
    loss = (-(lp - lp.detach()).exp() * adv[:, None] + 0.04 * kl).mul(mask).sum() / mask.sum()
    return loss, lp.detach()


def step(model, ref, opt, data, bf16: bool) -> None:
    loss, _ = loss_of(model, ref, data, bf16)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def compare(data) -> tuple[float, float, float]:
    """(max |logp diff|, mean |logp diff|, relative L2 gradient difference) of bf16 against fp32, same weights."""
    model = data[0]
    ref = copy.deepcopy(model).eval()
    out = []
    for bf16 in (False, True):
        model.zero_grad(set_to_none=True)
        loss, lp = loss_of(model, ref, data, bf16)
        loss.backward()
        out.append((lp, torch.cat([p.grad.flatten() for p in model.parameters()])))
    model.zero_grad(set_to_none=True)
    (a, ga), (b, gb) = out
    return (a - b).abs().max().item(), (a - b).abs().mean().item(), ((ga - gb).norm() / ga.norm()).item()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed updates per variant (after one warm-up each)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (vs_trl's default: 1)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    data = workload()
    max_d, mean_d, grad_rel = compare(data)
    model, ref = copy.deepcopy(data[0]).train(), copy.deepcopy(data[0]).eval()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    times: dict[bool, list[float]] = {False: [], True: []}
    for bf16 in times:
        step(model, ref, opt, data, bf16)  # warm-up: allocator, AdamW state, oneDNN's bf16 kernels
    for _ in range(a.repeats):
        for bf16, ts in times.items():
            c0 = time.process_time()
            step(model, ref, opt, data, bf16)
            ts.append(time.process_time() - c0)
    fp32, bf16 = (statistics.median(times[k]) for k in (False, True))
    print(f"{P * G} rows x {T} tokens, {a.threads} thread(s): update CPU s fp32 {fp32:.3f}  bf16 autocast "
          f"{bf16:.3f}  ({fp32 / bf16:.2f}x); bf16 vs fp32: max |logp diff| {max_d:.1e}, mean {mean_d:.1e}, "
          f"gradient rel L2 {grad_rel:.1e}", file=sys.stderr)
    print(json.dumps({"fp32_cpu_s": round(fp32, 4), "bf16_cpu_s": round(bf16, 4), "ratio": round(fp32 / bf16, 3),
                      "max_logp_diff": max_d, "mean_logp_diff": mean_d, "grad_rel_l2": grad_rel,
                      "threads": a.threads}))


if __name__ == "__main__":
    main()
