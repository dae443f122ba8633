"""Rollout engines other than codechat's own KV-cache sampler. Each needs an extra and is imported on demand:

    from codechat.engines.vllm_engine import VLLMSampler   # pip install 'codechat[vllm]' (see docs/scaling.md)

Nothing here is imported by `import codechat`, so the main install and test suite never load vLLM.
"""
