"""Who acts in a repository episode: the model (batched sampling) or a script; and how turns become tokens.

An `Agent` gives the prompt's token ids, the token ids of each tool result it is shown, and one `Action` per live
episode per turn. Token-in/token-out: the episode concatenates these id lists as they come and never decodes
and re-encodes text it already holds; an action's ids are exactly what the sampler drew.

Two prompt formats: `plain` (any causal LM, the built-in tiny models) writes the instructions, tool list,
issue and file list as one text and each result as `\\n<tool_response>\\n...\\n</tool_response>\\n`; `chatml`
(chat models, e.g. Qwen) renders system + user through the tokenizer's chat template with `tools=` and wraps
each result as a user turn `<|im_start|>user\\n<tool_response>...</tool_response><|im_end|>\\n<|im_start|>assistant\\n`
(closing the assistant turn with `<|im_end|>` first when the model stopped on `</tool_call>` rather than EOS).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Protocol

from codechat.config import SamplingConfig
from codechat.rollout.call_formats import get_call_format
from codechat.rollout.tools import CALL_CLOSE, RESULT_CLOSE, RESULT_OPEN, format_call, tool_help, tool_schemas
from codechat.tasks.repo import RepoTask

SYSTEM = ("You fix bugs in a Python repository. Read the code, reproduce the problem, change the implementation "
          "(never the tests), run the tests, then submit.")


@dataclass
class Action:
    tokens: list[int]
    """Token ids of the turn, exactly as sampled (ending with EOS or the token completing `</tool_call>`)."""
    logprobs: list[float]
    """Per token: the sampler's log-prob (0.0 for a scripted agent)."""
    text: str
    """The turn's text (decoded once, for parsing the tool call)."""
    finish_reason: str
    """`stop` (EOS or `</tool_call>`) or `length` (the turn's token budget ran out)."""
    eos: bool = False
    """The turn ended with an EOS token."""


@dataclass
class TurnState:
    """What an agent may look at to act in one live episode."""
    task: RepoTask
    turn: int
    """0-based index of this model turn."""
    tokens: list[int]
    """The episode's transcript so far (prompt, model turns, tool results)."""
    budget: int
    """Most tokens this turn may add."""
    last_result: str
    """The previous tool result's text ("" on the first turn)."""
    key: int | None = None
    """The episode's id, unique in the process (None: keep no KV for it); a model agent hands it to the sampler
    so that the next turn prefills only the tokens appended since this one (policy/prefix.py)."""
    sample: int = 0
    """Index of this episode among its task's episodes of the run (scripted agents play one script per sample)."""


class Agent(Protocol):
    context: int | None
    """The model's context length (None: unbounded); an episode ends before a turn that would not fit in it."""

    def prompt(self, task: RepoTask, files: list[str], call_format: str = "json") -> list[int]:
        """The episode's first tokens; its example call is written in `call_format` (AgentConfig.call_format)."""

    def result_ids(self, text: str, after_eos: bool) -> list[int]: ...

    def act(self, states: list[TurnState], seed: int) -> list[Action]: ...

    def end_run(self) -> None:
        """The runner's episodes have all ended (a model agent lets its sampler drop their KV)."""


def prompt_text(task: RepoTask, files: list[str], call_format: str = "json") -> str:
    """The plain-format prompt (also the user message of the chat format), its example call in `call_format`."""
    example = get_call_format(call_format).format("read_file", {"path": files[0] if files else "README.md"})
    return (f"{SYSTEM}\n\nTools (one call per turn, then wait for its result):\n{tool_help()}\n\nCall format:\n"
            f"{example}\n\nIssue:\n{task.problem.strip()}\n\nFiles:\n" + "\n".join(files[:200]) + "\n\n")


def result_text(text: str) -> str:
    return f"\n{RESULT_OPEN}\n{text}\n{RESULT_CLOSE}\n"


class ModelAgent:
    """The policy decides: every turn of all live episodes is one `Sampler.sample` call (n=1 per context)."""

    def __init__(self, policy, sampling: SamplingConfig, sampler=None):
        from codechat.policy.context import context_length  # codechat.policy imports torch: only when a model acts
        from codechat.policy.sampler import Sampler
        self.policy, self.sampling = policy, sampling
        self.sampler = sampler or Sampler(policy)
        self.tok = policy.tokenizer
        self.chat = bool(getattr(policy.config, "chat", False))
        self.eos = set(policy.eos_token_ids)
        self.context = context_length(policy.model)

    def prompt(self, task: RepoTask, files: list[str], call_format: str = "json") -> list[int]:
        text = prompt_text(task, files, call_format)
        if not self.chat:
            return list(self.tok(text, add_special_tokens=True)["input_ids"])
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
        ids = self.tok.apply_chat_template(msgs, tools=tool_schemas(), add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def result_ids(self, text: str, after_eos: bool) -> list[int]:
        if self.chat:
            body = ("" if after_eos else "<|im_end|>") + \
                f"\n<|im_start|>user\n{RESULT_OPEN}\n{text}\n{RESULT_CLOSE}<|im_end|>\n<|im_start|>assistant\n"
        else:
            body = result_text(text)
        return list(self.tok(body, add_special_tokens=False)["input_ids"])

    def end_run(self) -> None:
        self.sampler.release_kv()  # memory for the update that follows, not for episodes that are over

    def act(self, states: list[TurnState], seed: int) -> list[Action]:
        cfg = replace(self.sampling, max_new_tokens=max(s.budget for s in states), seed=seed,
                      stop=list(dict.fromkeys([*self.sampling.stop, CALL_CLOSE])))
        keys = [s.key for s in states]
        keys = keys if None not in keys else None
        budgets = [s.budget for s in states]  # each episode's turn stops at its own budget
        batch = self.sampler.sample([s.tokens for s in states], 1, cfg, keys=keys, max_new=budgets)  # one decode
        out = []
        for i, budget in enumerate(budgets):
            n = min(int(batch.n_tokens[i]), budget)
            toks = batch.tokens[i, :n].tolist()
            cut = n < int(batch.n_tokens[i])
            text = self.policy.decode(toks) if cut else batch.texts[i]
            eos = bool(toks) and toks[-1] in self.eos
            out.append(Action(toks, batch.logprobs[i, :n].tolist(), text,
                              "length" if cut else batch.finish_reason[i], eos))
        return out


class ScriptedAgent:
    """A fixed policy for tests and benchmarks: `script(task, turn, last_result) -> text` of the turn.
    Text is turned into ids by `encode` (UTF-8 bytes by default: no model, no tokenizer needed); `context` plays
    a model's context length."""

    def __init__(self, script: Callable[[RepoTask, int, str], str], encode: Callable[[str], list[int]] | None = None,
                 context: int | None = None):
        self.script = script
        self.encode = encode or (lambda s: list(s.encode("utf-8")))
        self.context = context

    def prompt(self, task: RepoTask, files: list[str], call_format: str = "json") -> list[int]:
        return self.encode(prompt_text(task, files, call_format))

    def result_ids(self, text: str, after_eos: bool) -> list[int]:
        return self.encode(result_text(text))

    def end_run(self) -> None:
        """Nothing kept."""

    def act(self, states: list[TurnState], seed: int) -> list[Action]:
        out = []
        for s in states:
            text = self.script(s.task, s.turn, s.last_result)
            full = self.encode(text)
            ids = full[:s.budget]
            out.append(Action(ids, [0.0] * len(ids), text, "stop" if len(ids) == len(full) else "length"))
        return out


def reference_script(task: RepoTask, turn: int, last_result: str) -> str:
    """The expert habit with the task's reference fix: run the tests, write each fixed file, run the tests again,
    submit. Checks a task set end to end without a model (`codechat eval --model scripted:reference`)."""
    fix = sorted((task.solution or {}).items())
    steps = ([format_call("run_tests")] if task.visible_tests else []) + \
        [format_call("write_file", path=p, content=c) for p, c in fix] + \
        ([format_call("run_tests")] if task.visible_tests else []) + [format_call("submit")]
    return steps[min(turn, len(steps) - 1)]
