"""Benchmark: what a 151,936-token vocabulary costs, on the Qwen-shaped model (policy/qwen.py, random weights).

    python bench/big_vocab.py                       # qwen3, 2 layers x 64; one JSON line
    python bench/big_vocab.py --family qwen2.5 --layers 2 --hidden 128 --new-tokens 64

Two figures, each against baselines measured in the same run:
- sampling: codechat's `Sampler` (KV cache, batched; policy/sampler.py) against transformers' `generate`
  (do_sample, the same prompts x n, the same max_new_tokens, EOS ignored by both so they decode the same number
  of tokens), in generated tokens per second of wall time.
- the update: one GRPO-style step (the no-grad reference log-probs, the policy's log-prob forward, policy term +
  k3 KL, the backward, the trainer's AdamW (`make_optimizer`: fused), gradients freed after the step as `rl_update`
  and the HF Trainer do) through codechat's `completion_logprobs` (the fused LM head engages at this vocabulary:
  logits in blocks of ~2^20, the tied table's gradient one buffer; policy/lm_head.py), against a plain Hugging
  Face loss on the same model, batch and optimizer (`model(ids).logits`, log-softmax, gather: what a trainer
  without a fused head computes), and against TRL's `GRPOTrainer` (fp32, its default fused AdamW, no gradient
  checkpointing, beta 0.04 so it keeps a reference model, the same prompts through the same chat template,
  `min_new_tokens` = `max_completion_length` so every completion has the same length, a random reward so the
  advantages are not zero). TRL's update is its training step less its `_generate` and its reward function, as
  bench/vs_trl.py splits it.
  Each system runs in its own child process. Peak memory is the peak RSS of the update phase alone: the kernel's
  high-water mark (`VmHWM`) is reset (`/proc/self/clear_refs`) once the model, the reference copy and the libraries
  are loaded (TRL: after each generation), and read at the end of each step; the JSON also gives each child's RSS at
  that reset (`*_base_mb`), so the growth the update itself causes can be read off. Time is the median of
  `--repeats` steps after one warm-up step.
JSON: {"family", "params_m", "sampler_tok_s", "generate_tok_s", "sampler_speedup", "codechat_update_s",
"plain_update_s", "trl_update_s", "update_time_ratio" (codechat/plain), "update_time_vs_trl" (codechat/trl),
"codechat_peak_mb", "plain_peak_mb", "trl_peak_mb", "peak_ratio" (codechat/plain), "peak_vs_trl" (codechat/trl),
"codechat_base_mb", "plain_base_mb", "trl_base_mb", "trl_version", "threads"}.
"""
from __future__ import annotations

import argparse
import copy
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from codechat.config import ModelConfig, OptimConfig, SamplingConfig  # noqa: E402
from codechat.policy import Sampler, build_preset, load_policy  # noqa: E402
from codechat.policy.logprobs import completion_logprobs  # noqa: E402
from codechat.train.common import make_optimizer  # noqa: E402

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


def rss_mb(field: str = "VmHWM") -> float:
    """This process's resident set (VmRSS) or its high-water mark since the last reset (VmHWM), in MB."""
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024


def reset_peak() -> float:
    """Restart the kernel's peak-RSS count here (Linux `clear_refs` 5); returns the RSS at this point, in MB."""
    Path("/proc/self/clear_refs").write_text("5")
    return rss_mb("VmRSS")


def child_update(a) -> dict:
    policy = load_policy(ModelConfig(path=a.model, device="cpu"))
    model = policy.model.train()
    ref = copy.deepcopy(model).eval()
    prompts, index, tokens, mask, adv = batch(policy, a.group, a.new_tokens)
    fn = codechat_logprobs if a.child == "codechat" else plain_logprobs
    opt, _ = make_optimizer(model, 1e-5, 0, a.repeats + 1, False, OptimConfig())  # the trainer's AdamW
    times = []
    base = reset_peak()
    for i in range(a.repeats + 1):
        t0 = time.perf_counter()
        with torch.no_grad():
            ref_lp = fn(ref, prompts, index, tokens, mask)
        lp = fn(model, prompts, index, tokens, mask)
        d = ref_lp - lp
        loss = (-(lp - lp.detach()).exp() * adv[:, None] + 0.04 * (d.exp() - d - 1)).mul(mask).sum() / mask.sum()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)  # as rl_update and the HF Trainer: gradients freed after the step
        if i:  # the first step warms up (allocations, AdamW state)
            times.append(time.perf_counter() - t0)
    return {"update_s": statistics.median(times), "peak_mb": rss_mb(), "base_mb": base, "loss": loss.item()}


def child_trl(a) -> dict:
    """TRL's GRPOTrainer on the same model and batch; update = training step - generation - reward."""
    import trl  # the baseline, not a codechat dependency
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(a.model)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS])
    g = torch.Generator().manual_seed(0)
    clock = {"gen": 0.0, "reward": 0.0, "start": 0.0, "base": 0.0}
    steps, peaks = [], []

    def random_reward(completions, **_):
        t0 = time.perf_counter()
        out = torch.rand(len(completions), generator=g).tolist()
        clock["reward"] += time.perf_counter() - t0
        return out

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            clock.update(gen=0.0, reward=0.0, start=time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            steps.append(time.perf_counter() - clock["start"] - clock["gen"] - clock["reward"])
            peaks.append(rss_mb())

    n = len(PROMPTS) * a.group
    cfg = GRPOConfig(
        output_dir=str(Path(a.model).parent / "trl-out"), max_steps=a.repeats + 1, per_device_train_batch_size=n,
        gradient_accumulation_steps=1, num_generations=a.group, max_completion_length=a.new_tokens,
        generation_kwargs={"min_new_tokens": a.new_tokens}, temperature=1.0, beta=0.04, learning_rate=1e-5,
        lr_scheduler_type="constant", warmup_steps=0, use_cpu=True, report_to="none", logging_steps=1,
        save_strategy="no", gradient_checkpointing=False, bf16=False, seed=0, dataloader_num_workers=0,
        disable_tqdm=True)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    trainer = GRPOTrainer(model=model, reward_funcs=random_reward, args=cfg, train_dataset=ds, processing_class=tok,
                          callbacks=[StepTimer()])
    generate = trainer._generate  # wrapped to time it and to start the update's peak count after it

    def timed_generate(*args, **kw):
        t0 = time.perf_counter()
        try:
            return generate(*args, **kw)
        finally:
            clock["gen"] += time.perf_counter() - t0
            clock["base"] = reset_peak()

    trainer._generate = timed_generate
    trainer.train()
    return {"update_s": statistics.median(steps[1:]), "peak_mb": max(peaks), "base_mb": clock["base"],
            "version": trl.__version__}


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
    p.add_argument("--child", choices=["codechat", "plain", "trl"], help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.child:
        print(json.dumps(child_trl(a) if a.child == "trl" else child_update(a)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        model = build_preset(a.family, Path(tmp) / "m", layers=a.layers, hidden=a.hidden)
        policy = load_policy(ModelConfig(path=str(model), device="cpu"))
        ours, theirs = sampling(policy, a)
        up = {}
        for name in ("codechat", "plain", "trl"):
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
        "trl_update_s": round(up["trl"]["update_s"], 3),
        "update_time_vs_trl": round(up["codechat"]["update_s"] / up["trl"]["update_s"], 3),
        **{f"{k}_peak_mb": round(up[k]["peak_mb"], 1) for k in up},
        "peak_ratio": round(up["codechat"]["peak_mb"] / up["plain"]["peak_mb"], 3),
        "peak_vs_trl": round(up["codechat"]["peak_mb"] / up["trl"]["peak_mb"], 3),
        **{f"{k}_base_mb": round(up[k]["base_mb"], 1) for k in up}, "trl_version": up["trl"]["version"],
        "threads": a.threads}))


if __name__ == "__main__":
    main()
