"""Task sets and the training stages' own sections (train/)."""
from __future__ import annotations

from dataclasses import dataclass, field


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
    multiple_answers: str = "exclude"
    """Stdin/stdout tasks whose statement accepts any of several answers and that have no checker (comparing
    output misjudges them): `exclude` leaves them out of the train and eval sets, `keep` keeps them."""
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
    expert_per_task: int = 1
    """Repository tasks: expert transcripts per task. 1: one each, a share `expert_wrong` of the tasks wrong; more:
    round(expert_wrong x N) of each task's N transcripts wrong (its metadata wrong_fixes), so SFT learns a mixture
    per task that GRPO can sort rather than one memorised transcript (rollout/expert.py)."""
    expert_edit: str = "write"
    """Repository tasks: how the expert writes a fix. `write`: `write_file` of the whole file; `edit`: one `edit`
    (the changed lines, with just enough context to be unique); `function`: `replace_function` of each changed
    definition (its whole new source, no text of the file to copy: what a model can do on files it never saw)."""
    expert_recover: float = 0.0
    """Repository tasks: seeded share of expert transcripts that first make a failed fix call (a name one character
    short, or an argument missing) and then the right one; the failed call is masked out of the loss, so SFT shows
    an `error:` result and what follows it without teaching the mistake (rollout/expert.py)."""


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
    warmup: int = 10
    """Warmup RL steps (the schedule advances once per RL step, whatever rl.epochs and minibatches). Each stage
    starts a fresh AdamW, whose first steps move every touched weight by about the lr whatever its gradient:
    without a warm-up the first update of a stage is a shock (docs/results/rl-signal.md)."""
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
    micro_batch_tokens: int = 1024
    """On CPU: a minibatch whose rows hold more tokens than this runs in ceil(tokens / this) micro-batches when
    that is more than grad_accum, so the training forward holds one micro-batch's activations (the same gradient,
    accumulated exactly; CPU GEMMs already run at full rate on 1,024 rows). 0 = grad_accum only. On a GPU, which
    wants large micro-batches, grad_accum alone sizes them."""
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
    embed_lr_scale: float = 1.0
    """The input embedding (and an LM head tied to it) trains at rl.lr x this; the rest of the model at rl.lr.
    Under Adam every row of a tied table moves by about the lr each step, whether its token was seen or not."""
    placebo: bool = False
    """Shuffle each step's advantages across the samples the loss sees (algos/advantages.py
    `placebo_advantages`): an update of the same size with no reward signal, the control arm of `codechat probe`."""
    probe_every: int = 0
    """Every N RL steps, log the sampler-trainer log-prob gap (probe/kl, probe/max_abs) on fixed probe prompts
    sampled by the step's sampler (train/probe.py); 0 = off."""
    probe_prompts: int = 4
    """Probe prompts: the first this many of the stage's data order, one completion each."""
    probe_warn_kl: float = 0.05
    """Warn (and log probe/drift = 1) when probe/kl exceeds this."""
    partial_rollouts: bool = False
    """async_steps >= 1, repository tasks: the producer's episodes switch to the trainer's newest weights at turn
    boundaries, so a long episode is carried over weight updates; each turn records the policy version that
    sampled it (`Turn.version`) and keeps its own sampler log-probs, which the loss corrects (train/producer.py)."""


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
