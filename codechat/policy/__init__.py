"""Policies: Hugging Face causal LMs and built-in presets, the batched KV-cache sampler, token log-probs.

    policy = load_policy(ModelConfig(path="tiny"))
    batch = Sampler(policy).sample([policy.encode_prompt(t.prompt) for t in tasks], n=8, cfg=SamplingConfig())
    logp = completion_logprobs(policy.model, prompts, batch.prompt_index, batch.tokens, batch.mask)

See docs/policy.md.
"""
from codechat.policy.hf import Policy, load_policy
from codechat.policy.logprobs import completion_logprobs
from codechat.policy.lora import reference
from codechat.policy.presets import PRESETS, build_preset, preset_dir
from codechat.policy.sampler import SampleBatch, Sampler

__all__ = ["PRESETS", "Policy", "SampleBatch", "Sampler", "build_preset", "completion_logprobs", "load_policy",
           "preset_dir", "reference"]
