"""Task-set specs with a split (`mbpp.jsonl:train`) and the train/eval overlap check.

MBPP's standard split by task id (Austin et al. 2021, as the original release defines it): 1–10 `prompt`
(few-shot examples), 11–510 `test`, 511–600 `validation`, 601–974 `train`. It applies to every MBPP-family file
(mbpp.jsonl, sanitized-mbpp.json, MBPP+ `Mbpp/N`), whose ids are shared. Measured on the shared data: MBPP+
spans every split (224 test, 39 validation, 108 train, 7 prompt of its 378), so `mbpp.jsonl:train` still meets
108 MBPP+ tasks by id (and 1 more by prompt): train on it and evaluate on `MbppPlus...:test`.

`overlap(train, evals)` finds eval tasks that are also training tasks, by id within one benchmark family (MBPP's
`11`, `Mbpp/11`; HumanEval's `HumanEval/3`) or by normalised prompt (lower case, words and operators, the MBPP
"Your code should pass this test" line and docstring quotes dropped); `warn_overlap` turns it into one warning per
eval set. What it does not catch: paraphrased prompts, or the same problem under another benchmark's id.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from codechat.tasks.model import Task, TaskFormatError

MBPP_SPLITS = {"prompt": (1, 10), "test": (11, 510), "validation": (511, 600), "train": (601, 974)}
MBPP_SOURCES = ("mbpp", "mbpp-sanitized", "mbpp-originfmt")


def split_spec(spec: str) -> tuple[str, str | None]:
    """`path:split` -> (path, split) when the suffix names a split and `path` is a file; else (spec, None)."""
    head, sep, tail = str(spec).rpartition(":")
    if sep and tail in MBPP_SPLITS and not str(spec).startswith("builtin") and not Path(spec).exists():
        return head, tail
    if sep and not str(spec).startswith("builtin") and not Path(spec).exists() and Path(head).is_file():
        raise TaskFormatError(f"{spec}: unknown split '{tail}' (valid: {', '.join(MBPP_SPLITS)})")
    return str(spec), None


def family(task: Task) -> str:
    """The benchmark a task's id belongs to: mbpp, humaneval, or its source format."""
    src = task.metadata.get("source", "")
    if src in MBPP_SOURCES or task.task_id.startswith("Mbpp/"):
        return "mbpp"
    if task.task_id.startswith("HumanEval/"):
        return "humaneval"
    return src or "tasks"


def _number(task: Task) -> int | None:
    tail = task.task_id.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else None


def apply_split(tasks: list[Task], split: str, spec: str) -> list[Task]:
    """The tasks of MBPP split `split`; a file that is not MBPP-family is an error naming it."""
    if not tasks or any(family(t) != "mbpp" or _number(t) is None for t in tasks):
        raise TaskFormatError(f"{spec}: a split (:{split}) is only defined for MBPP files (ids 1-974)")
    lo, hi = MBPP_SPLITS[split]
    return [t for t in tasks if lo <= _number(t) <= hi]


_MBPP_LINE = re.compile(r"your code should pass (this test|these tests):?", re.I)


def normalise_prompt(prompt: str) -> str:
    """Lower-case words and operators of the prompt, without MBPP's test preamble, quotes or other punctuation
    (operators stay: `(x + 6)(x + 7)` and `(x - 6)(x - 7)` are different problems)."""
    return " ".join(re.findall(r"[a-z0-9_]+|[-+*/=<>^%!]+", _MBPP_LINE.sub(" ", prompt).lower()))


def id_key(task: Task) -> tuple[str, str]:
    fam = family(task)
    return fam, (str(_number(task)) if fam == "mbpp" and _number(task) is not None else task.task_id)


@dataclass
class Overlap:
    """Eval tasks of one set that are also training tasks."""
    eval_set: str
    """Name of the eval set."""
    n_eval: int
    """Tasks in the eval set."""
    by_id: list[str] = field(default_factory=list)
    """Eval task ids whose (family, id) is a training task's."""
    by_prompt: list[str] = field(default_factory=list)
    """Eval task ids (not already in by_id) whose normalised prompt is a training task's."""

    @property
    def count(self) -> int:
        return len(self.by_id) + len(self.by_prompt)


def overlap(train: list[Task], evals: dict[str, list[Task]]) -> list[Overlap]:
    """For each eval set, the tasks shared with `train` by id or normalised prompt (sets without any left out)."""
    ids = {id_key(t) for t in train}
    prompts = {normalise_prompt(t.prompt) for t in train} - {""}
    out = []
    for name, tasks in evals.items():
        o = Overlap(name, len(tasks))
        for t in tasks:
            if id_key(t) in ids:
                o.by_id.append(t.task_id)
            elif normalise_prompt(t.prompt) in prompts:
                o.by_prompt.append(t.task_id)
        if o.count:
            out.append(o)
    return out


def warn_overlap(train: list[Task], evals: dict[str, list[Task]], train_name: str = "train") -> list[Overlap]:
    """Warn once per eval set that shares tasks with the training set (silent contamination); returns them."""
    found = overlap(train, evals)
    for o in found:
        shown = ", ".join((o.by_id + o.by_prompt)[:5])
        warnings.warn(f"train/eval overlap: {o.count} of {o.n_eval} tasks of {o.eval_set} are also in {train_name} "
                      f"({len(o.by_id)} by id, {len(o.by_prompt)} by normalised prompt; e.g. {shown}): its pass@k "
                      f"measures memorisation; use disjoint sets (MBPP files: FILE:train to train, FILE:test to "
                      f"evaluate)", stacklevel=2)
    return found
