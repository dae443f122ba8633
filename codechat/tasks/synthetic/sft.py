"""SFT data from synthetic tasks, with a configurable share of plausible-but-wrong references.

Real SFT data is scraped code with bugs in it; the hidden asserts always check the true behaviour, so the
verifier can teach what imitation of such data cannot. Bug kinds are listed in `spec.BUG_KINDS`; a task's
`metadata["bugs"]` holds the kinds its asserts are known to catch, and only those are ever used."""
from __future__ import annotations

import random
from typing import Any, Iterable

from codechat.tasks.model import Task
from codechat.tasks.synthetic.render import STYLES, code
from codechat.tasks.synthetic.spec import BUG_KINDS, with_bug


def buggy_solution(task: Task, kind: str, style: str | None = None) -> str:
    """The task's reference with one bug of `kind`, in `style` (default: the canonical style)."""
    spec = task.metadata["spec"]
    if kind not in task.metadata["bugs"]:
        raise ValueError(f"{task.task_id}: bug '{kind}' is not applicable (applicable: {task.metadata['bugs']})")
    return code(with_bug(spec, kind), style or STYLES[spec["family"]][0])


def sft_records(tasks: Iterable[Task], buggy_fraction: float = 0.3, seed: int = 0, per_task: int = 1,
                styles: Iterable[str] | None = None, bug_kinds: Iterable[str] | None = None,
                rare_keep: float = 1.0) -> list[dict[str, Any]]:
    """SFT examples with what went into them: dicts with task_id, prompt, solution, style, bug (kind or None),
    region.

    buggy_fraction: each example whose task admits a bug (of `bug_kinds`) gets one with this probability.
    per_task: examples per task, in different styles where the family has enough of them.
    styles: allowed style names (default: all styles of each family).
    bug_kinds: allowed kinds (default: all of BUG_KINDS). With one kind and buggy_fraction > 0.5 the data teaches
        a systematic misconception (e.g. `>` for "at least"), which greedy decoding then reproduces.
    rare_keep: share of `rare`-region tasks kept (metadata["region"]); 0 drops them from SFT entirely."""
    if not 0.0 <= buggy_fraction <= 1.0 or not 0.0 <= rare_keep <= 1.0:
        raise ValueError(f"buggy_fraction and rare_keep must be in [0, 1], got {buggy_fraction}, {rare_keep}")
    kinds = list(bug_kinds) if bug_kinds is not None else list(BUG_KINDS)
    for k in kinds:
        if k not in BUG_KINDS:
            raise ValueError(f"unknown bug kind '{k}' (valid: {', '.join(BUG_KINDS)})")
    allowed = set(styles) if styles is not None else None
    rng = random.Random(f"sft:{seed}")
    out = []
    for task in tasks:
        region = task.metadata.get("region", "common")
        if region == "rare" and rng.random() >= rare_keep:
            continue
        family = task.metadata["spec"]["family"]
        family_styles = [s for s in STYLES[family] if allowed is None or s in allowed] or [STYLES[family][0]]
        rng.shuffle(family_styles)
        eligible = [k for k in kinds if k in task.metadata["bugs"]]
        for i in range(per_task):
            style = family_styles[i % len(family_styles)]
            bug = rng.choice(eligible) if eligible and rng.random() < buggy_fraction else None
            solution = buggy_solution(task, bug, style) if bug else task.metadata["solutions"][style]
            out.append({"task_id": task.task_id, "prompt": task.prompt, "solution": solution, "style": style,
                        "bug": bug, "region": region})
    return out


def sft_examples(tasks: Iterable[Task], buggy_fraction: float = 0.3, seed: int = 0, **kwargs) -> list[tuple[str, str]]:
    """(prompt, solution) pairs for SFT; see `sft_records` for the options."""
    return [(r["prompt"], r["solution"]) for r in sft_records(tasks, buggy_fraction, seed, **kwargs)]
