"""Task sets shipped with codechat: `builtin` (= `builtin:basic`, hand-written problems in tasks/data/) and
generated sets registered in GENERATED (e.g. the synthetic family used by the demo)."""
from __future__ import annotations

import copy
from importlib import resources
from typing import Callable

from codechat.tasks import arith, synthetic
from codechat.tasks.loaders import load_tasks_with_format
from codechat.tasks.model import Task, TaskFormatError
from codechat.tasks.thinking_sft import COLD_COPIES, with_prefilled, with_thinking
from codechat.tasks.toy import toy_tasks

# name -> function returning the tasks; generated families register here.
GENERATED: dict[str, Callable[[], list[Task]]] = {}


def _synthetic(split: str) -> Callable[[], list[Task]]:
    def load() -> list[Task]:
        n = synthetic.TRAIN_SIZE if split == "train" else synthetic.HELDOUT_SIZE
        tasks = synthetic.generate_tasks(split, n, seed=synthetic.SEED)
        for t in tasks:
            t.metadata["source"] = f"builtin:synthetic-{split}"
        return tasks
    return load


GENERATED["synthetic-train"] = _synthetic("train")
GENERATED["synthetic-heldout"] = _synthetic("heldout")

SYNTHETIC_SFT = {"buggy_fraction": 0.8, "bug_kinds": ["boundary"], "per_task": 2, "seed": 0, "rare_keep": 1.0}
"""Options of `builtin:synthetic-sft` (see `synthetic.sft_records`): a systematic boundary misconception."""


def _synthetic_sft(**options) -> Callable[[], list[Task]]:
    """SFT data with buggy references, as scraped code would have: one Task per `sft_records` example, whose
    `metadata["solution"]` is the (possibly buggy) reference and whose tests are the task's true asserts."""
    def load() -> list[Task]:
        train = {t.task_id: t for t in _synthetic("train")()}
        out = []
        for i, rec in enumerate(synthetic.sft_records(list(train.values()), **{**SYNTHETIC_SFT, **options})):
            t = copy.deepcopy(train[rec["task_id"]])
            t.task_id = f"{rec['task_id']}#{i}"
            t.metadata.update(solution=rec["solution"], style=rec["style"], bug=rec["bug"],
                              source="builtin:synthetic-sft")
            out.append(t)
        return out
    return load


GENERATED["synthetic-sft"] = _synthetic_sft()
GENERATED["synthetic-sft-clean"] = _synthetic_sft(buggy_fraction=0.0)


def _toy(buggy: bool) -> Callable[[], list[Task]]:
    def load() -> list[Task]:
        return toy_tasks(buggy)
    return load


GENERATED["toy"] = _toy(False)
GENERATED["toy-sft"] = _toy(True)


def _thinking(base: str, name: str, prefilled: bool = False, think_copies: int = 1) -> Callable[[], list[Task]]:
    def load() -> list[Task]:
        if prefilled:
            return with_prefilled(GENERATED[base](), f"builtin:{name}", think_copies)
        return with_thinking(GENERATED[base](), f"builtin:{name}")
    return load


GENERATED["toy-think-sft"] = _thinking("toy", "toy-think-sft")
GENERATED["synthetic-sft-think"] = _thinking("synthetic-sft-clean", "synthetic-sft-think")
GENERATED["toy-think-sft-prefilled"] = _thinking("toy", "toy-think-sft-prefilled", prefilled=True)
GENERATED["toy-think-sft-cold"] = _thinking("toy", "toy-think-sft-cold", prefilled=True, think_copies=COLD_COPIES)
GENERATED["synthetic-sft-think-prefilled"] = _thinking("synthetic-sft-clean", "synthetic-sft-think-prefilled",
                                                       prefilled=True)


def _arith(split: str) -> Callable[[], list[Task]]:
    def load() -> list[Task]:
        return arith.generate(split, arith.TRAIN_SIZE if split == "train" else arith.HELDOUT_SIZE, arith.SEED)
    return load


GENERATED["arith-train"] = _arith("train")
GENERATED["arith-heldout"] = _arith("heldout")


def _arith_easy(split: str) -> Callable[[], list[Task]]:
    def load() -> list[Task]:
        n = arith.EASY_TRAIN_SIZE if split == "train" else arith.HELDOUT_SIZE
        return arith.generate(split, n, arith.SEED, level="easy")
    return load


GENERATED["arith-easy-train"] = _arith_easy("train")
GENERATED["arith-easy-heldout"] = _arith_easy("heldout")


def builtin_names() -> list[str]:
    files = [p.name[:-6] for p in resources.files("codechat.tasks").joinpath("data").iterdir()
             if p.name.endswith(".jsonl")]
    return sorted(set(files) | set(GENERATED))


def load_builtin(spec: str = "builtin") -> list[Task]:
    """`builtin` or `builtin:NAME`."""
    name = spec.split(":", 1)[1] if ":" in spec else "basic"
    if name in GENERATED:
        return GENERATED[name]()
    data = resources.files("codechat.tasks").joinpath("data", f"{name}.jsonl")
    if not data.is_file():
        raise TaskFormatError(f"{spec}: no built-in task set '{name}' (valid: {', '.join(builtin_names())})")
    with resources.as_file(data) as p:
        tasks, _ = load_tasks_with_format(p, "codechat")
    for t in tasks:
        t.metadata["source"] = f"builtin:{name}"
    return tasks
