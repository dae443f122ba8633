"""Configuration: one dataclass per concern, a docstring under every field; the defaults of a training run.

Sections are owned by the modules that use them: VerifierConfig (sandbox/, verifier/), AlgoConfig (algos/),
RewardConfig (rollout/rewards.py), ModelConfig, SamplingConfig and RolloutConfig (policy/, rollout/), and the
stage sections SFTConfig, RFTConfig, RLConfig, DPOConfig with DataConfig, OptimConfig, EvalConfig,
CheckpointConfig, LogConfig and DistConfig (train/). RunConfig holds them all; a run saves it resolved as
config.yaml. Parsing, overrides and validation: configio.py. Commands other than `train` (eval, chat, model
sample) have their own flags, whose defaults are their own.
"""
from __future__ import annotations

from dataclasses import dataclass, field


# --- verifier -------------------------------------------------------------------------------------------------
@dataclass
class VerifierConfig:
    workers: int = 0
    """Sandbox worker processes; 0 = one per CPU core."""
    timeout_s: float = 5.0
    """Wall-clock limit per program (a task's own timeout_s wins when set)."""
    memory_mb: int = 1024
    """Address-space limit per program, in MiB."""
    max_output_bytes: int = 65536
    """Captured stdout+stderr per program; more ends the program as `output_limit`."""
    backend: str = "local"
    """`local` (process pool on this machine) or `ray` (sandbox pools on Ray workers)."""
    nproc: int = 64
    """Processes+threads the program may have at once (RLIMIT_NPROC under its own uid): stops fork bombs."""
    nofile: int = 64
    """Open file descriptors per program process."""
    fsize_mb: int = 16
    """Largest file the program may write, in MiB."""
    max_result_mb: int = 16
    """Largest single value the program may return to the judge, in MiB (encoded)."""
    hide_paths: list[str] = field(default_factory=list)
    """Directories covered by an empty tmpfs inside the sandbox (e.g. where task files live on disk)."""
    ray_address: str = ""
    """backend=ray: the cluster to join (`auto`, `ray://host:10001`); empty = RAY_ADDRESS, else a local instance."""
    ray_grace_s: float = 30.0
    """backend=ray: a job not back within its timeout + this many seconds marks its node pool hung: replaced."""
    cpu_time_limit: bool = False
    """stdin/stdout tasks: judge the time limit on CPU time, not wall clock (same verdict on a busy machine);
    the wall clock then allows 3x the limit + 1 s."""
    stop_at_first_failure: bool = False
    """stdin/stdout tasks: run no test after the first failing one (tests after it count as not passed)."""
    total_timeout_s: float = 0.0
    """stdin/stdout tasks: limit on the summed time of all tests of one completion (0 = none); tests past it
    count as not passed and the verdict is `timeout`."""
    answer: AnswerConfig = field(default_factory=lambda: AnswerConfig())
    """How answer (math) tasks are judged: extraction order, percent rule, tolerance, time limit."""
    dedup: bool = True
    """In training: run each distinct (completion, task) of a batch once; its copies get the same verdict."""
    cache_size: int = 0
    """In training: also reuse the verdicts of up to this many distinct pairs across steps (LRU); 0 = off."""
    thinking: ThinkingConfig = field(default_factory=lambda: ThinkingConfig())
    """Thinking blocks (`<think>...</think>`): stripped before extraction, mode and per-mode metrics."""


@dataclass
class ThinkingConfig:
    """Completions with a thinking block: codechat/rollout/thinking.py."""
    enabled: bool = False
    """Strip thinking blocks before extracting code/answers, mark each verdict's mode, log per-mode metrics."""
    open: str = "<think>"
    """The tag that opens a thinking block (match the model's chat template)."""
    close: str = "</think>"
    """The tag that closes it; text after an unclosed open tag is all thinking (no answer)."""
    forced_nothink_frac: float = 0.0
    """RL balanced sampling: share of each group forced to start with the empty block (the rest with the open
    tag), the loss importance-weighted back to the policy's own distribution; 0 = sample freely."""


@dataclass
class AnswerConfig:
    """How answer tasks (`Task.kind == "answer"`) are judged: codechat/verifier/answer*.py."""

    extractors: list[str] = field(default_factory=lambda: ["boxed", "hashes", "answer-is", "bare", "last-number"])
    """Where the final answer is looked for, in order; the first that finds one wins: `boxed` (the last
    \\boxed{...}), `hashes` (`#### N`), `answer-is` ("the answer is ..."), `bare` (a completion that is only an
    answer, e.g. `\\frac{1}{2}`), `last-number` (the fallback)."""
    percent: str = "both"
    """`50\\%` is `ratio` (= 0.5), `number` (= 50), or `both` (either is accepted)."""
    rel_tol: float = 1e-6
    """Plain numbers, one written as a decimal: equal within this relative tolerance (integers and fractions
    are compared exactly)."""
    timeout_s: float = 5.0
    """Wall-clock limit per symbolic comparison; the worker process is killed past it (verdict `timeout`)."""
    workers: int = 1
    """Comparison worker processes (a worker imports sympy once, ~1 s, and serves many comparisons)."""
    memory_mb: int = 2048
    """Address-space limit of a comparison worker, in MiB (huge powers fail as an error, not an OOM)."""
    max_answer_chars: int = 512
    """An extracted answer longer than this is not compared (verdict `failed`)."""


# --- algorithms -----------------------------------------------------------------------------------------------
@dataclass
class AlgoConfig:
    advantage: str = "grpo"
    """Advantage estimator: grpo, grpo-mean-only (Dr. GRPO), rloo, filter (RFT), batch-mean."""
    std_scale: str = "group"
    """grpo divides by the `group` std (DeepSeekMath), the `batch` std of the rewards, or `none`."""
    eps: float = 1e-6
    """Added to the std before dividing."""
    filter_threshold: float = 1.0
    """`filter` advantage: samples whose reward is at least this get 1, the rest 0."""
    difficulty_alpha: float = 0.0
    """Weight prompts by difficulty: advantages times (1 - running pass rate)^alpha, mean 1 over the batch of
    all ranks; 0 = off. The rates (prior 0.5) are updated from every step's pass results and checkpointed."""
    difficulty_ema: float = 0.9
    """Decay of the running per-prompt pass rate behind difficulty weighting (rate = ema*old + (1-ema)*step's)."""
    loss: str = "ppo-clip"
    """Policy loss: ppo-clip, reinforce, gspo, cispo (DPO has its own signature: algos.dpo_loss)."""
    clip_low: float = 0.2
    """PPO lower clip epsilon: ratio is clipped below at 1 - clip_low."""
    clip_high: float = 0.2
    """PPO upper clip epsilon (clip-higher: set above clip_low, e.g. 0.28)."""
    dual_clip: float = 0.0
    """Dual-clip constant c > 1 bounding the loss for negative advantages; 0 disables it."""
    tis_cap: float = 0.0
    """Truncated importance-sampling cap for sampler/trainer log-prob mismatch (e.g. 2); 0 disables it."""
    kl_beta: float = 0.0
    """Coefficient of the KL-to-reference term; 0 disables it and loads no reference model."""
    kl_estimator: str = "k3"
    """KL estimator of the loss term: k2 (half squared log ratio; gradient = that of KL(pi || ref)) or k3
    (ratio - 1 - log ratio; gradient = that of KL(ref || pi)). k1 (the log ratio) has zero expected gradient:
    refused as a loss (algos/kl.py)."""
    agg: str = "token-mean"
    """Loss aggregation: token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm."""
    agg_norm: float = 0.0
    """Constant normaliser for seq-mean-token-sum-norm (Dr. GRPO); 0 = sampling.max_new_tokens (the RL stages
    resolve it so; algos.agg_loss called directly with 0 divides by the padded length T)."""
    dpo_beta: float = 0.1
    """DPO temperature beta."""
    dpo_label_smoothing: float = 0.0
    """DPO label smoothing (conservative DPO); 0 = plain DPO."""
    correction: str = "tis"
    """Off-policy correction against the sampler's log-probs (algos/corrections.py): tis (token ratio capped at
    tis_cap), seq-is (GSPO geometric-mean sequence ratio capped at tis_cap), icepop (token ratios outside
    [icepop_low, icepop_high] masked out)."""
    icepop_low: float = 0.5
    """`icepop`: tokens whose ratio pi_old / pi_sampler is below this are dropped from the loss."""
    icepop_high: float = 2.0
    """`icepop`: tokens whose ratio pi_old / pi_sampler is above this are dropped from the loss."""


# --- rewards --------------------------------------------------------------------------------------------------
@dataclass
class RewardConfig:
    components: dict[str, float] = field(default_factory=lambda: {"pass-all": 1.0})
    """Reward name -> weight; the reward is the weighted sum (pass-all, pass-fraction, format, overlong, length, safety,
    tool-calls, protected-edit)."""
    format_fenced: bool = True
    """`format` expects exactly one fenced code block; False = the completion continues the prompt's code."""
    overlong_buffer: int = 0
    """`overlong`: tokens before max_new_tokens where the penalty ramps 0 -> -1 (DAPO); 0 = a quarter of max."""
    length_budget: int = 256
    """`length`: tokens allowed before the per-token penalty starts."""
    length_per_token: float = 0.001
    """`length`: penalty per token beyond length_budget."""
    nothink_margin: float = 0.02
    """`nothink-bonus` constraint: pass rate may drop at most this much below the reference's (first step's)."""
    nothink_lr: float = 0.0
    """`nothink-bonus`: step size of the Lagrange multiplier on the pass-rate constraint; 0 = fixed bonus."""


# --- policy and sampling --------------------------------------------------------------------------------------
@dataclass
class ModelConfig:
    path: str = "tiny"
    """A local Hugging Face model directory, or a built-in preset name (`tiny`, `small`)."""
    dtype: str = "float32"
    """Parameter dtype: float32, bfloat16 or float16 (bf16/fp16 on GPU)."""
    device: str = "auto"
    """`auto` (cuda when available, else cpu), `cpu`, or `cuda[:N]`."""
    lora_r: int = 0
    """LoRA rank through PEFT; 0 trains all parameters."""
    lora_alpha: int = 16
    """LoRA alpha."""
    chat: bool = False
    """Pose tasks as a chat through the tokenizer's chat template instead of plain continuation."""


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


# --- training -------------------------------------------------------------------------------------------------
@dataclass
class DataConfig:
    train: str = "builtin"
    """Training tasks: a task file or builtin[:NAME]. SFT uses their reference solutions; RL uses their tests."""
    eval: str = ""
    """Held-out tasks for periodic evaluation (empty = no evaluation)."""
    extra_eval: list[str] = field(default_factory=list)
    """Other task sets evaluated too (capability regression), each logged as its own metric."""
    sft: str = ""
    """SFT data when it differs from `train`: a task file / builtin set whose `solution`s are imitated."""
    format: str = ""
    """Force a task-file format (empty = detect)."""
    max_eval_tasks: int = 0
    """Evaluate on at most this many tasks (0 = all)."""
    exclude: str = ""
    """A quarantine file (task ids, one per line; `codechat tasks check --write-quarantine` writes one): those
    tasks are left out of the train, eval and extra_eval sets. Empty = none."""
    max_prompt_tokens: int = 0
    """Tasks whose encoded prompt is longer are dropped (a count is printed); 0 = the model's context minus
    sampling.max_new_tokens. SFT examples must also fit prompt + solution in the context."""
    loader: str = ""
    """A task loader plugin, `FILE.py:NAME` or `module:NAME`: NAME(spec) -> list[Task] is called for train, eval,
    extra_eval and sft instead of codechat's loaders (codechat/plugins.py). Empty = codechat's loaders."""


@dataclass
class SFTConfig:
    steps: int = 100
    """Optimizer steps."""
    lr: float = 1e-3
    """Peak learning rate (linear warmup, cosine decay to 10%)."""
    batch_size: int = 16
    """(prompt, solution) pairs per step."""
    warmup: int = 10
    """Warmup steps."""
    expert_wrong: float = 0.2
    """Repository tasks: share of expert transcripts that apply a plausible but wrong fix (rollout/expert.py)."""


@dataclass
class RFTConfig:
    rounds: int = 1
    """Grow/improve rounds: sample, keep passing samples (deduplicated), fine-tune on them."""
    prompts: int = 64
    """Prompts sampled per round."""
    group_size: int = 8
    """Samples per prompt."""
    steps: int = 50
    """Fine-tuning steps per round."""
    lr: float = 3e-4
    """Learning rate of the improve step."""
    batch_size: int = 16
    """Kept samples per fine-tuning step."""
    rest_em: bool = False
    """ReST-EM: every improve step restarts from the stage's starting weights (with LoRA: its starting adapters)
    and trains on the samples of the latest grow step only."""


@dataclass
class RLConfig:
    steps: int = 50
    """RL steps (one step = sample, verify, update)."""
    lr: float = 1e-5
    """Learning rate (constant after warmup)."""
    warmup: int = 0
    """Warmup RL steps (the schedule advances once per RL step, whatever rl.epochs and minibatches)."""
    prompts_per_step: int = 4
    """Prompts per step (P)."""
    group_size: int = 8
    """Samples per prompt (G)."""
    epochs: int = 1
    """Inner epochs (mu) over the same rollouts; >1 uses the old log-probs and the clip (not with reinforce)."""
    minibatch_size: int = 0
    """Samples per optimizer step, counted over all ranks (the same steps on any world size); 0 = all samples
    of the step in one optimizer step."""
    grad_accum: int = 1
    """Micro-batches per minibatch on each rank (memory); gradients are accumulated."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm; 0 disables it."""
    zero_variance: str = "keep"
    """Groups whose samples all pass or all fail: keep (zero advantage), skip (drop from the loss), or resample."""
    resample_cap: int = 2
    """With zero_variance=resample: at most this many extra sampling rounds per step."""
    mask_truncated: bool = False
    """Drop samples that hit max_new_tokens from the loss (overlong masking)."""
    dedup: bool = True
    """Run the update's forward/backward once per distinct (prompt, completion), weighted by its count: the same
    loss, metrics and gradient, less compute (algos/dedup.py); logged as update/dedup_frac."""
    async_steps: int = 0
    """0 = synchronous (sample, verify, then update); k >= 1 = a producer thread samples and verifies the next
    batches with weights up to k updates old while the trainer updates (train/producer.py; engine hf, ddp only)."""


@dataclass
class OptimConfig:
    """AdamW settings of every stage (each stage's section sets its learning rate and schedule)."""

    beta1: float = 0.9
    """AdamW beta1."""
    beta2: float = 0.95
    """AdamW beta2."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm in the SFT, RFT and DPO stages (RL: rl.max_grad_norm); 0 disables it."""


@dataclass
class DPOConfig:
    source: str = "online"
    """`online` (pairs from fresh groups) or a rollout JSONL file saved by an earlier run (offline)."""
    steps: int = 50
    """DPO steps."""
    lr: float = 1e-5
    """Learning rate."""
    prompts_per_step: int = 8
    """Prompts sampled per step when online."""
    group_size: int = 8
    """Samples per prompt when online."""
    pairs_per_step: int = 16
    """Pairs per optimizer step."""


@dataclass
class EvalConfig:
    every: int = 0
    """Evaluate every N steps of a stage (0 = at stage ends only)."""
    n: int = 4
    """Samples per task for pass@k."""
    k: list[int] = field(default_factory=lambda: [1])
    """k values for pass@k."""
    temperature: float = 1.0
    """Sampling temperature for pass@k."""
    greedy: bool = True
    """Also report greedy pass@1."""
    regression_margin: float = 0.05
    """Warn when an extra eval set falls by more than this from its value at the stage start."""


@dataclass
class CheckpointConfig:
    every: int = 50
    """Save every N steps of a stage (and always at its end)."""
    keep_last: int = 2
    """Keep the last N checkpoints (plus the best by eval pass@1)."""


@dataclass
class LogConfig:
    progress: bool = True
    """Live progress display (rich)."""
    tensorboard: bool = False
    """Also log to TensorBoard (needs the tensorboard extra)."""
    wandb: bool = False
    """Also log to Weights & Biases (needs the wandb extra)."""
    wandb_project: str = "codechat"
    """W&B project name."""
    plot: bool = True
    """Write curves.png at the end of the run."""
    audit: bool = True
    """Keep top-reward and suspicious samples of every RL step in audit.jsonl (`codechat audit RUN_DIR`)."""
    audit_top_k: int = 2
    """Highest-reward samples kept per step besides the suspicious ones."""


@dataclass
class DistConfig:
    """Data parallelism under `torchrun --nproc_per_node N -m codechat train ...` (ignored in one process)."""

    parallel: str = "ddp"
    """`ddp`: each rank holds the whole model, gradients are summed once per optimizer step (train/dist.py).
    `fsdp`: weights, gradients and AdamW states sharded over the ranks (torch FSDP2, policy/fsdp.py): for models
    whose training state does not fit one device. Same update as `ddp`; not with LoRA."""
    backend: str = "auto"
    """torch.distributed backend: `auto` (nccl when CUDA is available, else gloo), `nccl` or `gloo`."""
    timeout_s: int = 1800
    """Collective timeout: a rank that waits longer for the others fails the run instead of hanging it."""


# --- repository agent episodes (rollout/episode.py, rollout/tools.py) -------------------------------------------
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


@dataclass
class RunConfig:
    """Everything one `codechat train` run needs; saved resolved as config.yaml in the run directory."""

    run_dir: str = "runs/default"
    """Where checkpoints, metrics.jsonl, config.yaml and plots go."""
    seed: int = 0
    """Seed of everything: data order, sampling, initialisation."""
    stages: list[str] = field(default_factory=lambda: ["grpo"])
    """Stages run in order: sft, rft, grpo, rloo, dpo (the registry: train/stages.py)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """Policy model."""
    data: DataConfig = field(default_factory=DataConfig)
    """Task sets."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """Rollout sampling."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Rollout engine."""
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    """Sandboxed verifier."""
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    """Advantages, losses, KL, aggregation."""
    rewards: RewardConfig = field(default_factory=RewardConfig)
    """Reward components and their weights (`rewards: {pass-all: 1.0, format: 0.1}` is short for `components`)."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """Supervised fine-tuning stage."""
    rft: RFTConfig = field(default_factory=RFTConfig)
    """Rejection-sampling fine-tuning stage."""
    rl: RLConfig = field(default_factory=RLConfig)
    """GRPO / RLOO stages."""
    dpo: DPOConfig = field(default_factory=DPOConfig)
    """DPO stage."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Periodic evaluation."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpointing."""
    log: LogConfig = field(default_factory=LogConfig)
    """Logging."""
    dist: DistConfig = field(default_factory=DistConfig)
    """Data-parallel training across processes (torchrun)."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """Repository agent episodes: batching, tool output caps and timeouts."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer (AdamW) settings shared by the stages."""
