"""A reward function for TRL's `GRPOTrainer`: codechat's verdict on each completion, tests from a dataset column.

    from trl import GRPOConfig, GRPOTrainer
    from codechat.integrations.trl import CodechatReward
    dataset = Dataset.from_list([{"prompt": "Write add(a, b).", "task": {"task_id": "add", "prompt": "...",
                                  "tests": ["assert add(1, 2) == 3"], "entry_point": "add"}}])
    reward = CodechatReward(column="task")                          # in-process sandbox pool
    reward = CodechatReward(column="task", url="http://127.0.0.1:8080", token=...)   # or `codechat serve`
    GRPOTrainer(model=..., reward_funcs=[reward], args=GRPOConfig(...), train_dataset=dataset).train()

The column holds, per row, a task record in any format codechat loads (a dict or its JSON text: codechat,
MBPP, HumanEval, APPS/TACO `input_output`, CodeContests, ...) or a plain list of assert lines. Conversational
completions are judged on their last message's text. Rewards: `pass` (1.0 / 0.0) or `pass-fraction`
(tests passed / tests of the task: partial credit). A completion the verifier could not judge (`infra_error`:
a sandbox worker lost) gets None, which TRL leaves out of that reward's mean instead of scoring it 0.
"""
from __future__ import annotations

from codechat import CodechatError
from codechat.config import VerifierConfig
from codechat.integrations import Judge, as_record
from codechat.verifier.verdict import Verdict

REWARDS = ("pass", "pass-fraction")


def _text(completion) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))  # conversational: [{"role": "assistant", "content": ...}]
    raise CodechatError(f"a completion must be text or a list of messages, got {type(completion).__name__}")


def score(v: Verdict, reward: str) -> float | None:
    if v.status == "infra_error":
        return None
    if reward == "pass-fraction":
        return v.tests_passed / v.tests_total if v.tests_total else float(v.passed)
    return v.reward


class CodechatReward:
    """`reward_funcs=[CodechatReward(...)]`: called by TRL with the batch's prompts, completions and columns."""

    def __init__(self, column: str = "task", url: str | None = None, token: str | None = None,
                 reward: str = "pass", fmt: str | None = None, cfg: VerifierConfig | None = None):
        if reward not in REWARDS:
            raise CodechatError(f"unknown reward {reward!r} (valid: {', '.join(REWARDS)})")
        self.column, self.reward = column, reward
        self.judge = Judge(url, token, cfg, fmt=fmt)
        self.__name__ = f"codechat_{reward.replace('-', '_')}"  # TRL names the reward's logged metrics after it
        self.last: list[Verdict] = []
        """The verdicts of the last call (status, tests passed, messages), for logging."""

    def __call__(self, prompts=None, completions=None, **columns) -> list[float | None]:
        if self.column not in columns:
            raise CodechatError(f"the dataset has no column {self.column!r} holding the tests "
                                f"(columns: {', '.join(sorted(columns)) or 'none'})")
        cells = columns[self.column]
        if len(cells) != len(completions):
            raise CodechatError(f"column {self.column!r} has {len(cells)} rows for {len(completions)} completions")
        records = [as_record(c, f"column {self.column!r} row {i}") for i, c in enumerate(cells)]
        self.last = self.judge.verdicts(records, [_text(c) for c in completions], f"column {self.column!r}")
        return [score(v, self.reward) for v in self.last]

    def close(self) -> None:
        self.judge.close()
