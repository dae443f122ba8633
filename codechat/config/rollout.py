"""The policy model, sampling, the rollout engine and agent episodes (policy/, rollout/)."""
from __future__ import annotations

from dataclasses import dataclass, field

COMPUTE_DTYPES = ("", "float32", "bfloat16")
"""model.compute_dtype values: "" and float32 = the weights' dtype (no autocast); bfloat16 = bf16 autocast."""


@dataclass
class ModelConfig:
    path: str = "tiny"
    """A local Hugging Face model directory, or a built-in preset name (`tiny`, `small`)."""
    dtype: str = "float32"
    """Parameter dtype: float32, bfloat16 or float16 (bf16/fp16 on GPU). With compute_dtype=bfloat16 keep float32:
    the master weights, gradients and AdamW state then stay fp32 (pure bf16 weights round small updates away)."""
    compute_dtype: str = ""
    """Compute dtype of every forward (the hf engine's sampling, update, reference, SFT, DPO; vLLM samples in
    rollout.vllm_dtype): "" or float32 = the weights' dtype; bfloat16 = bf16 autocast over the `dtype` weights,
    i.e. mixed precision (policy/precision.py)."""
    grad_checkpointing: bool = False
    """Activation checkpointing: keep each decoder layer's input only and recompute the layer in the backward
    (less activation memory for one more forward of the layers)."""
    device: str = "auto"
    """`auto` (cuda when available, else cpu), `cpu`, or `cuda[:N]`."""
    lora_r: int = 0
    """LoRA rank through PEFT; 0 trains all parameters."""
    lora_alpha: int = 16
    """LoRA alpha."""
    lora_targets: list[str] = field(default_factory=lambda: ["all-linear"])
    """Modules given adapters: `all-linear` (every linear layer but the LM head) or module names such as
    [q_proj, k_proj, v_proj, o_proj]."""
    chat: bool = False
    """Pose tasks as a chat through the tokenizer's chat template instead of plain continuation."""
    system_prompt: str = ""
    """With chat: a system turn put before every task's user turn (empty = none, the template's own default)."""


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    """Softmax temperature; 0 = greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass; 1 disables it."""
    top_k: int = 0
    """Keep the k most likely tokens; 0 disables it."""
    max_new_tokens: int = 128
    """Generation length limit per sample."""
    stop: list[str] = field(default_factory=list)
    """Stop strings; generation of a sample ends at the first one (it is kept in the text)."""
    seed: int = 0
    """Seed of the sampler's random generator."""
    compile: bool = False
    """hf engine: decode short prompts through one torch.compile'd static-shape step (policy/staticstep.py), the
    same tokens; compiling costs CPU seconds once per process, and on the presets its steps are slower than the
    default eager step's (docs/policy.md)."""
    packed_weights: bool = True
    """hf engine on CPU: the decode step's matmuls run on weights repacked for oneDNN once per sample call (fp32
    models, calls of 8+ rows and 256+ rows x new tokens; policy/packed.py): the same tokens, logits within float
    rounding."""
    native_kernels: bool = True
    """hf engine on CPU: the decode step's attention, norms and SiLU and the sampling math run in small C
    functions (policy/cattn.py) compiled once per machine with the system C compiler; attention reads each
    prompt's KV once for all its samples. Where no compiler builds them, the torch ops. Logits within float
    rounding of the torch ops'; a token differs only where its uniform falls within rounding of a CDF step."""


@dataclass
class RolloutConfig:
    engine: str = "hf"
    """Rollout engine: `hf` (codechat's KV-cache sampler on the training model) or `vllm` (colocated vLLM engine,
    weights pushed in memory after each update; needs the vllm extra)."""
    vllm_gpu_memory_utilization: float = 0.3
    """Share of GPU memory vLLM may take for weights + KV cache when colocated with the trainer."""
    vllm_dtype: str = "auto"
    """vLLM weight dtype (`auto` follows the model; `float32` on CPU)."""
    vllm_max_model_len: int = 0
    """Longest prompt + completion the vLLM engine accepts; 0 = the model's max_position_embeddings."""
    vllm_kv_cache_gib: float = 0.0
    """KV-cache size for vLLM in GiB (overrides the memory share; the way to size it on CPU); 0 = vLLM's choice."""
    vllm_enforce_eager: bool = True
    """Run vLLM eagerly (no CUDA graphs / torch.compile): starts in seconds; set false on GPU for faster decoding."""
    vllm_prefix_caching: bool = True
    """Let vLLM reuse the KV of shared prompt prefixes (reset after every weight push)."""
    verify_while_decoding: bool = False
    """RL stages: send each completion to the verifier the moment it finishes decoding, while the rest of the batch
    keeps decoding (same verdicts; metric verify_overlap_frac). The vllm engine reports finishes only at the end."""
    max_rows: int = 0
    """hf engine, continuous batching: decode at most this many sample rows at once and refill finished groups'
    slots from the next prompts (policy/sampler.py); 0 = every row of the step at once."""


@dataclass
class AgentConfig:
    turn_tokens: int = 256
    """Most new tokens of one model turn (also capped by the task's token budget)."""
    max_live: int = 64
    """Episodes advanced together: every model turn of the live ones is one batched decode."""
    tool_workers: int = 8
    """Threads running tool calls and final judgements of different episodes at the same time."""
    tool_output_chars: int = 2000
    """Longest tool result appended to the transcript; longer ones are cut, saying how much was dropped."""
    run_timeout_s: float = 10.0
    """Wall-clock limit of one `run` tool call."""
    kv_reuse: bool = True
    """Keep each live episode's KV between turns and prefill only the appended tokens (false: re-prefill the
    whole transcript every turn; same tokens, slower)."""
    call_format: str = "json"
    """How the model writes a tool call (rollout/call_formats.py): `json` (Qwen/Hermes) or `compact` (one line
    per argument name, values verbatim: no JSON escapes for models trained from scratch). The prompt's example,
    the expert transcripts and the parser all use it."""
    warm_tests: bool = True
    """Fork every test run (final judgements and run_tests calls) from a warm runner that has imported pytest once
    per worker (verifier/repo_warm.py), with the same sandbox per run; false: a fresh interpreter per run."""
    dedup_judgements: bool = True
    """Judge each distinct final change of a task once per run (verifier/repo_dedup.py); its copies get its
    verdict."""
    wall_budget: bool = True
    """End an episode once its task's `limits.wall_s` is spent. Its clock also runs while the other live episodes
    decode in the same batch, so on a loaded machine the wall budget ends episodes by the load, not by what the
    agent did; false (the agent demo's setting) leaves the turn, tool-call and token budgets, which every episode
    still has, and each tool call keeps its own time limit (`run_timeout_s`, the task's `test_timeout_s`)."""
