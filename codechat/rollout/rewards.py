"""Rewards: (task, completion text, Verdict, RewardContext) -> float, in the REWARDS registry, and their weighted sum.

Rewards know only text and test results (never token ids or tensors); the sampler's facts they need — length
in tokens, the limit, whether the sample was cut off — come in a small `RewardContext`.
    pass-all       1 if every test passed, else 0 (the default reward)
    pass-fraction  tests_passed / tests_total (partial credit; a test script counts as one test)
    format         1 if the answer has exactly one ```python block that parses and defines the entry point, else 0;
                   answer tasks: 1 if it has exactly one non-empty \boxed{...} and it comes last, else 0
    answer-match   answer tasks: 1 if the final answer is equivalent to the reference, else 0; code tasks: 0
                   (with pass-all in a mixed run it weights math answers up: {pass-all: 1.0, answer-match: 0.5})
    overlong       DAPO's soft penalty: 0 until max_new_tokens - buffer, then linear down to -1 at the limit
    length         -length_per_token per token beyond length_budget ("answer concisely")
    safety         -1 if the program ran into a sandbox protection (network, subprocess, ...; verdict.blocked)
    tool-calls     episodes: -1 per tool call (the weight is the per-call penalty, e.g. 0.01); single answers: 0
    protected-edit episodes: -1 per attempt to change a protected path (tests); single answers: 0
    nothink-bonus  1 if the answer skipped thinking (no non-blank thinking block; needs verifier.thinking), else
                   0: the weight is the bonus delta; rollout/thinking.py keeps accuracy by a Lagrange multiplier
Penalties are negative values; their size is set by the weight. A config `{pass-all: 1.0, format: 0.1,
safety: 0.5}` gives 1.0 * pass + 0.1 * format - 0.5 * blocked. `compose_rewards` returns each component's
weighted share so `reward_metrics` can log them (mean, and share of the total) and show when one dominates.
To drop truncated samples from the loss instead of penalising them, the trainer masks them (rl.mask_truncated).

Simplified: `format` finds fences with a regex; the verifier's extractor decides what actually runs.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from codechat.algos.registry import Registry
from codechat.config import RewardConfig
from codechat.tasks.answer import KIND as ANSWER_KIND, extract_boxed
from codechat.tasks.model import Task
from codechat.verifier.verdict import Verdict

REWARDS = Registry("reward", ("task", "completion", "verdict", "ctx"))
FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)
PYTHON_TAGS = ("", "python", "py", "python3")


@dataclass(frozen=True)
class RewardContext:
    n_tokens: int = 0
    """Completion length in tokens."""
    max_new_tokens: int = 0
    """The sampler's generation limit (0 = unknown: `overlong` gives 0)."""
    truncated: bool = False
    """The sample hit max_new_tokens without stopping."""
    cfg: RewardConfig = field(default_factory=RewardConfig)
    """Reward parameters (buffers, budgets)."""
    tool_calls: int = 0
    """Multi-turn episodes: tool calls made (0 for single answers)."""
    protected_attempts: int = 0
    """Multi-turn episodes: calls that tried to change a protected path (refused)."""


@REWARDS.register("pass-all")
def pass_all(task: Task, completion: str, verdict: Verdict, ctx: RewardContext) -> float:
    return 1.0 if verdict.passed else 0.0


@REWARDS.register("pass-fraction")
def pass_fraction(task: Task, completion: str, verdict: Verdict, ctx: RewardContext) -> float:
    if verdict.tests_total <= 0:
        return 1.0 if verdict.passed else 0.0
    return min(verdict.tests_passed / verdict.tests_total, 1.0)


def _defines(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


BOXED_START = re.compile(r"\\(?:boxed|fbox)\b")


def _boxed_format(completion: str) -> float:
    """Exactly one \\boxed{...}, non-empty, and nothing after it but closing punctuation and math delimiters."""
    if len(BOXED_START.findall(completion)) != 1:
        return 0.0
    inner = extract_boxed(completion)
    if not inner or not inner.strip():
        return 0.0
    j = BOXED_START.search(completion).end()
    j += len(completion[j:]) - len(completion[j:].lstrip())
    if not completion.startswith("{", j):
        return 0.0
    tail = completion[j + len(inner) + 2:]
    return 1.0 if re.fullmatch(r"[\s$.)\]\\]*", tail) else 0.0


@REWARDS.register("format")
def format_(task: Task, completion: str, verdict: Verdict, ctx: RewardContext) -> float:
    if task.kind == ANSWER_KIND:
        return _boxed_format(completion)
    if ctx.cfg.format_fenced:
        blocks = FENCE.findall(completion)
        if len(blocks) != 1 or blocks[0][0].lower() not in PYTHON_TAGS:
            return 0.0
        code = blocks[0][1]
    else:
        code = task.prompt + completion  # HumanEval style: the completion continues the prompt's code
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return 0.0
    return 0.0 if task.entry_point and not _defines(tree, task.entry_point) else 1.0


@REWARDS.register("answer-match")
def answer_match(task: Task, completion: str, verdict: Verdict, ctx: RewardContext) -> float:
    return 1.0 if task.kind == ANSWER_KIND and verdict.passed else 0.0


@REWARDS.register("overlong")
def overlong(task: Task, completion: str, verdict: Verdict, ctx: RewardContext) -> float:
    limit = ctx.max_new_tokens
    if limit <= 0:
        return 0.0
    if ctx.truncated or ctx.n_tokens >= limit:
        return -1.0
    buffer = min(ctx.cfg.overlong_buffer or limit // 4, limit)
    start = limit - buffer
    return 0.0 if ctx.n_tokens <= start else (start - ctx.n_tokens) / buffer


@REWARDS.register("length")
def length(task: Task, completion: str, verdict: Verdict, ctx: RewardContext) -> float:
    return -ctx.cfg.length_per_token * max(0, ctx.n_tokens - ctx.cfg.length_budget)


@REWARDS.register("safety")
def safety(task: Task, completion: str, verdict: Verdict, ctx: RewardContext) -> float:
    return -1.0 if verdict.blocked else 0.0


@REWARDS.register("tool-calls")
def tool_calls(task: Task, completion: str, verdict: Verdict, ctx: RewardContext) -> float:
    return -float(ctx.tool_calls)


@REWARDS.register("protected-edit")
def protected_edit(task: Task, completion: str, verdict: Verdict, ctx: RewardContext) -> float:
    return -float(ctx.protected_attempts)


@REWARDS.register("nothink-bonus")
def nothink_bonus(task: Task, completion: str, verdict: Verdict, ctx: RewardContext) -> float:
    return 0.0 if verdict.thought else 1.0


def check_components(components: Mapping[str, float]) -> None:
    """Fail early, listing the valid names, when a configured reward does not exist."""
    for name in components:
        REWARDS[name]


def compose_rewards(components: Mapping[str, float], task: Task, completion: str, verdict: Verdict,
                    ctx: RewardContext) -> tuple[float, dict[str, float]]:
    """-> (total, {name: weight * value}); the per-component values add up to the total."""
    parts = {name: weight * REWARDS[name](task, completion, verdict, ctx) for name, weight in components.items()}
    return sum(parts.values()), parts


def reward_metrics(per_component: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """A batch of compose_rewards' dicts -> `reward/NAME/mean` and `reward/NAME/share`.

    share = sum |NAME's contributions| / sum |all contributions|: near 1 means that component dominates the reward.
    """
    if not per_component:
        return {}
    names = list(dict.fromkeys(n for d in per_component for n in d))
    sums = {n: sum(d.get(n, 0.0) for d in per_component) for n in names}
    mags = {n: sum(abs(d.get(n, 0.0)) for d in per_component) for n in names}
    total_mag = sum(mags.values())
    out = {}
    for n in names:
        out[f"reward/{n}/mean"] = sums[n] / len(per_component)
        out[f"reward/{n}/share"] = mags[n] / total_mag if total_mag > 0 else 0.0
    return out
