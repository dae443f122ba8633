"""Benchmark: what a 151,936-token vocabulary costs, on the Qwen-shaped model (policy/qwen.py, random weights).

    python bench/big_vocab.py                       # qwen3, 2 layers x 64; one JSON line
    python bench/big_vocab.py --family qwen2.5 --layers 2 --hidden 128 --new-tokens 64

Two figures, each against a baseline measured in the same run:
- sampling: codechat's `Sampler` (KV cache, batched; policy/sampler.py) against transformers' `generate`
  (do_sample, the same prompts x n, the same max_new_tokens, EOS ignored by both so they decode the same number
  of tokens), in generated tokens per second of wall time.
- the update: one GRPO-style step (the policy's log-prob forward, policy term + k3 KL to a frozen reference, the
  backward, AdamW) through codechat's `completion_logprobs` (the fused LM head engages at this vocabulary: no
  (rows, 151,936) logits tensor), against a plain Hugging Face loss on the same model and batch (`model(ids).logits`,
  log-softmax, gather: what a trainer without a fused head computes). TRL's GRPOTrainer is not the baseline
  here (see bench/vs_trl.py for it on a small vocabulary). Each update runs in its own child process, so its peak
  RSS (`ru_maxrss`) is its own; time is the median of `--repeats` steps after one warm-up step.
JSON: {"family", "params_m", "sampler_tok_s", "generate_tok_s", "sampler_speedup", "codechat_update_s",
"plain_update_s", "update_time_ratio" (codechat/plain), "codechat_peak_mb", "plain_peak_mb", "peak_ratio",
"baseline": "plain-hf-loss", "threads"}.
"""
from __future__ import annotations

import argparse
import copy
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from codechat.config import ModelConfig, SamplingConfig  # noqa: E402
from codechat.policy import Sampler, build_preset, load_policy  # noqa: E402
from codechat.policy.logprobs import completion_logprobs  # noqa: E402

PROMPTS = ["Write add(a, b) that returns the sum.", "Write is_even(n).", "Reverse a string s.",
           "Return the largest number in a list."]


def batch(policy, n: int, t: int, seed: int = 0):
    """Chat prompts, (P*n,) prompt index, random completions (P*n, t), their mask and advantages."""
    prompts = [policy.encode_prompt(p) for p in PROMPTS]
    g = torch.Generator().manual_seed(seed)
    index = torch.arange(len(prompts)).repeat_interleave(n)  # (N,)
    tokens = torch.randint(0, 151_000, (len(index), t), generator=g)  # (N, T)
    return prompts, index, tokens, torch.ones(tokens.shape), torch.randn(len(index), generator=g)


def codechat_logprobs(model, prompts, index, tokens, mask):
    return completion_logprobs(model, prompts, index, tokens, mask)  # (N, T)


def plain_logprobs(model, prompts, index, tokens, mask):
    """Whole sequences through the HF model: (N, L, V) logits, log-softmax, gather the completion's tokens."""
    N, T = tokens.shape
    width = max(len(p) for p in prompts) + T
    ids = torch.zeros(N, width, dtype=torch.long)  # (N, L) left-padded
    att = torch.zeros(N, width, dtype=torch.long)
    for i in range(N):
        p = prompts[int(index[i])]
        ids[i, width - len(p) - T:] = torch.tensor(p + tokens[i].tolist())
        att[i, width - len(p) - T:] = 1
    logits = model(input_ids=ids, attention_mask=att).logits[:, -T - 1:-1]  # (N, T, V)
    return torch.log_softmax(logits.float(), -1).gather(-1, tokens[..., None])[..., 0] * mask  # (N, T)


def child_update(a) -> dict:
    policy = load_policy(ModelConfig(path=a.model, device="cpu"))
    model = policy.model.train()
    ref = copy.deepcopy(model).eval()
    prompts, index, tokens, mask, adv = batch(policy, a.group, a.new_tokens)
    fn = codechat_logprobs if a.child == "codechat" else plain_logprobs
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    times = []
    for i in range(a.repeats + 1):
        t0 = time.perf_counter()
        with torch.no_grad():
            ref_lp = fn(ref, prompts, index, tokens, mask)
        lp = fn(model, prompts, index, tokens, mask)
        d = ref_lp - lp
        loss = (-(lp - lp.detach()).exp() * adv[:, None] + 0.04 * (d.exp() - d - 1)).mul(mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i:  # the first step warms up (allocations, AdamW state)
            times.append(time.perf_counter() - t0)
    return {"update_s": statistics.median(times), "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "loss": float(loss)}


def sampling(policy, a) -> tuple[float, float]:
    prompts = [policy.encode_prompt(p) for p in PROMPTS]
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=a.new_tokens, seed=0)
    policy.eos_token_ids = ()  # both decode max_new_tokens: equal work
    sampler = Sampler(policy)
    sampler.sample(prompts[:1], 1, cfg)  # warm-up
    t0 = time.perf_counter()
    out = sampler.sample(prompts, a.group, cfg)
    ours = int(out.n_tokens.sum()) / (time.perf_counter() - t0)
    tok = policy.tokenizer
    tok.padding_side = "left"
    enc = tok.pad({"input_ids": [p for p in prompts for _ in range(a.group)]}, return_tensors="pt")
    gen = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=a.new_tokens,
               min_new_tokens=a.new_tokens, pad_token_id=tok.pad_token_id)
    with torch.no_grad():
        policy.model.generate(**{k: v[:1] for k, v in enc.items()}, **{**gen, "max_new_tokens": 2,
                                                                       "min_new_tokens": 2})
        t0 = time.perf_counter()
        seqs = policy.model.generate(**enc, **gen)
    theirs = (seqs.shape[1] - enc["input_ids"].shape[1]) * seqs.shape[0] / (time.perf_counter() - t0)
    return ours, theirs


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", default="qwen3", choices=["qwen2.5", "qwen3"])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--group", type=int, default=4, help="samples per prompt (4 prompts)")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--child", choices=["codechat", "plain"], help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.child:
        print(json.dumps(child_update(a)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        model = build_preset(a.family, Path(tmp) / "m", layers=a.layers, hidden=a.hidden)
        policy = load_policy(ModelConfig(path=str(model), device="cpu"))
        ours, theirs = sampling(policy, a)
        up = {}
        for name in ("codechat", "plain"):
            cmd = [sys.executable, __file__, "--child", name, "--model", str(model), "--group", str(a.group),
                   "--new-tokens", str(a.new_tokens), "--repeats", str(a.repeats), "--threads", str(a.threads)]
            up[name] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        n = sum(x.numel() for x in policy.model.parameters())
    print(json.dumps({
        "family": a.family, "params_m": round(n / 1e6, 2), "layers": a.layers, "hidden": a.hidden,
        "batch": f"{len(PROMPTS)}x{a.group}x{a.new_tokens}",
        "sampler_tok_s": round(ours, 1), "generate_tok_s": round(theirs, 1), "sampler_speedup": round(ours / theirs, 2),
        "codechat_update_s": round(up["codechat"]["update_s"], 3), "plain_update_s": round(up["plain"]["update_s"], 3),
        "update_time_ratio": round(up["codechat"]["update_s"] / up["plain"]["update_s"], 3),
        "codechat_peak_mb": round(up["codechat"]["peak_mb"], 1), "plain_peak_mb": round(up["plain"]["peak_mb"], 1),
        "peak_ratio": round(up["codechat"]["peak_mb"] / up["plain"]["peak_mb"], 3), "baseline": "plain-hf-loss",
        "threads": a.threads}))


if __name__ == "__main__":
    main()
