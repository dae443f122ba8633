"""The verifier's sections: sandbox limits and judging (sandbox/, verifier/), thinking blocks, answer checking."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class VerifierConfig:
    workers: int = 0
    """Sandbox worker processes; 0 = one per CPU core."""
    plus_inputs: bool = True
    """MBPP+ / HumanEval+ tasks (with evalplus's base and plus inputs): a completion passes only when its outputs
    match the reference's on every input, base and plus (evalplus's plus score; verifier/plus.py), in training
    rewards, `codechat verify` and `serve /verify`; false: by the task's shown asserts only."""
    timeout_s: float = 5.0
    """Wall-clock limit per program (a task's own timeout_s wins when set, up to max_task_timeout_s)."""
    max_task_timeout_s: float = 60.0
    """Largest time limit a task's own timeout_s may set (a record's 1e10 or 1e300 is clamped to it; NaN,
    negative or non-numbers are that task's `error`): the operator's cap on what a task file or client asks for."""
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
    """Judge time limits on CPU time, not wall clock (same verdict on a busy machine): stdin/stdout tasks'
    per-test limit; function tasks' `timeout_s` (the whole program) and `test_timeout_s`. The wall clock then
    allows 3x the limit + 1 s (function tasks: 5x + 2 s)."""
    stop_at_first_failure: bool = False
    """stdin/stdout tasks: run no test after the first failing one (tests after it count as not passed)."""
    stop_in_training: bool = True
    """In training, stop_at_first_failure is on unless a reward reads tests_passed (pass-fraction): a looping
    stdin/stdout sample costs one test's time limit, not every test's. False = run every test (reporting)."""
    total_timeout_s: float = 60.0
    """stdin/stdout tasks: limit on the summed time of all tests of one completion (0 = none); tests past it
    count as not passed (and are not started) and the verdict is `timeout`. Bounded by default: a looping
    program on a task with 201 tests would otherwise cost 201 x the per-test limit."""
    answer: AnswerConfig = field(default_factory=lambda: AnswerConfig())
    """How answer (math) tasks are judged: extraction order, percent rule, tolerance, time limit."""
    dedup: bool = True
    """In training: run each distinct (completion, task) of a batch once; its copies get the same verdict."""
    cache_size: int = 0
    """In training: also reuse the verdicts of up to this many distinct pairs across steps (LRU); 0 = off."""
    thinking: ThinkingConfig = field(default_factory=lambda: ThinkingConfig())
    """Thinking blocks (`<think>...</think>`): stripped before extraction, mode and per-mode metrics."""
    test_timeout_s: float = 0.0
    """Function tasks: limit on one test's time (CPU time of the program with cpu_time_limit, else the test's
    wall clock); past it that test fails as `timeout` and the next tests still run, so tests_passed counts
    the others; 0 = none (only the whole program's timeout_s, which then ends every test left)."""


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
    is_weight_floor: float = 0.0
    """Balanced sampling: lower bound on a forced sample's importance weight pi(prefix) / q(prefix). 0 = exact
    (the policy's own gradient: a mode the policy gives ~0 probability gets ~0 gradient, the cold start stays
    cold); > 0 lets the rare mode's samples teach it, biased toward the forced mix (docs/thinking.md)."""
    free_frac: float = 0.0
    """Balanced sampling: share of each group sampled freely (no forced prefix), so openings off both forced paths
    get sampled and judged; the weights are those of the stratified mixture (rollout/thinking.py is_weights)."""
    mask_forced: bool = False
    """Balanced sampling: mask a forced sample's whole forced prefix out of the loss (its mode choice included), so
    the opening is learned from the free samples only; False masks only the tokens both prefixes share."""
    opening_loss: float = 0.0
    """RL: weight of the opening-tag loss -log pi(the next token keeps the opening well-formed) at every opening
    position of every sample (train/opening.py), added to each optimizer step; 0 = off. Keeps malformed openings
    such as `<thinkXthink>` from rising, without pulling the mode choice back to the SFT model's."""


@dataclass
class AnswerConfig:
    """How answer tasks (`Task.kind == "answer"`) are judged: codechat/verifier/answer*.py."""

    extractors: list[str] = field(default_factory=lambda: ["boxed", "hashes", "answer-is", "bare", "last-number"])
    """Where the final answer is looked for, in order; the first that finds one wins: `boxed` (the last
    \\boxed{...}), `hashes` (`#### N`), `answer-is` ("the answer is ..."), `bare` (a completion that is only an
    answer, e.g. `\\frac{1}{2}`), `last-number` (the fallback)."""
    percent: str = "both"
    """`50\\%` is `ratio` (= 0.5), `number` (= 50), or `both` (either is accepted)."""
    numbers: str = "strict"
    """`strict`: an exact reference (integer, fraction, `\\sqrt{2}`) takes only its exact value (`0.3333333` is not
    1/3, `1.41421356` is not √2); a decimal reference is matched at its own precision (half a unit of its last
    digit: `3.14` takes 3.1416, not 3.1). `lenient`: a decimal on either side is equal within `rel_tol`, and
    math-verify rounds decimals against exact values (6 places)."""
    rel_tol: float = 1e-6
    """`numbers: lenient` only: the relative tolerance for plain numbers when one is written as a decimal
    (integers and fractions are compared exactly)."""
    timeout_s: float = 5.0
    """Wall-clock limit per symbolic comparison; the worker process is killed past it (verdict `timeout`)."""
    workers: int = 1
    """Comparison worker processes (a worker imports sympy once, ~1 s, and serves many comparisons)."""
    memory_mb: int = 2048
    """Address-space limit of a comparison worker, in MiB (huge powers fail as an error, not an OOM)."""
    max_answer_chars: int = 512
    """An extracted answer longer than this is not compared (verdict `failed`)."""
