"""Evaluation of thinking completions (docs/thinking.md): pass@1 and length by mode, and by difficulty bucket.

A sample is in mode `think` when its verdict says it thought (verifier.thinking splits the completion), else
`nothink`. The difficulty of a task is the reference model's per-task pass rate c / n (the policy before RL,
or any earlier evaluation's `per_task`); tasks fall into three buckets of that rate:

    hard    rate < 1/3        medium  1/3 <= rate < 2/3        easy    rate >= 2/3

    mode_metrics(records, open_tag)       -> thinking/nothink_frac, thinking/pass@1/{think,nothink},
                                             thinking/len/{think,nothink}, thinking/len (mean tokens),
                                             thinking/malformed_frac (not opening with open_tag)
    bucket_metrics(records, rates)        -> difficulty/{bucket}/{tasks,pass@1,nothink_frac,len}
    reference_rates(per_task)             -> {task_id: c / n} of an EvalReport's per_task (or summary.json)

pass@1 here is the share of passing samples (every task has the same n samples, so it equals the mean of the
per-task c / n). A mode or bucket with no sample is left out rather than reported as 0.
"""
from __future__ import annotations

import json
from pathlib import Path

from codechat import CodechatError

BUCKETS = (("hard", 0.0, 1 / 3), ("medium", 1 / 3, 2 / 3), ("easy", 2 / 3, float("inf")))
"""(name, lowest reference pass rate, bound above it, exclusive): the difficulty buckets."""


def _thought(rec: dict) -> bool:
    return bool((rec.get("verdict") or {}).get("thought"))


def _summary(recs: list[dict]) -> dict[str, float]:
    """pass@1, no-think share and mean length (tokens) of some samples."""
    n = len(recs)
    return {"pass@1": sum(bool(r["passed"]) for r in recs) / n,
            "nothink_frac": sum(not _thought(r) for r in recs) / n,
            "len": sum(r.get("n_tokens", 0) for r in recs) / n}


def mode_metrics(records: list[dict], open_tag: str | None = None) -> dict[str, float]:
    """No-think share, and pass@1 and mean length (tokens) of each mode present, over sampled records; with
    open_tag, `thinking/malformed_frac`: the share whose completion does not start with it (leading blanks aside:
    an opening such as `<thinkerthink></think>`; a record without its completion text is not counted)."""
    if not records:
        return {}
    s = _summary(records)
    out = {"thinking/nothink_frac": s["nothink_frac"], "thinking/len": s["len"]}
    texts = [r["completion"] for r in records if isinstance(r.get("completion"), str)]
    if open_tag and texts:
        out["thinking/malformed_frac"] = sum(not t.lstrip().startswith(open_tag) for t in texts) / len(texts)
    for mode, want in (("think", True), ("nothink", False)):
        recs = [r for r in records if _thought(r) == want]
        if recs:
            m = _summary(recs)
            out[f"thinking/pass@1/{mode}"] = m["pass@1"]
            out[f"thinking/len/{mode}"] = m["len"]
    return out


def bucket_of(rate: float) -> str:
    """The difficulty bucket of a reference pass rate in [0, 1]."""
    for name, lo, hi in BUCKETS:
        if lo <= rate < hi:
            return name
    raise ValueError(f"reference pass rate {rate} is not in [0, 1]")


def bucket_metrics(records: list[dict], rates: dict[str, float]) -> dict[str, float]:
    """Per difficulty bucket of the reference rates: tasks, pass@1, no-think share, mean length. Records of tasks
    the reference did not rate are left out (counted in difficulty/unrated_tasks when there are any)."""
    groups: dict[str, list[dict]] = {}
    unrated = set()
    for r in records:
        if r["task_id"] in rates:
            groups.setdefault(bucket_of(rates[r["task_id"]]), []).append(r)
        else:
            unrated.add(r["task_id"])
    out: dict[str, float] = {}
    for name, _, _ in BUCKETS:
        recs = groups.get(name)
        if recs:
            out[f"difficulty/{name}/tasks"] = float(len({r["task_id"] for r in recs}))
            out.update({f"difficulty/{name}/{k}": v for k, v in _summary(recs).items()})
    if unrated:
        out["difficulty/unrated_tasks"] = float(len(unrated))
    return out


def reference_rates(per_task: dict[str, dict]) -> dict[str, float]:
    """{task_id: c / n} of the tasks that have sampled results (greedy-only entries have n = 0)."""
    out = {}
    for tid, t in per_task.items():
        n, c = t.get("n", 0), t.get("c", 0)
        if isinstance(n, int) and isinstance(c, int) and 0 <= c <= n and n > 0:
            out[str(tid)] = c / n
    return out


def load_reference(path: str | Path) -> dict[str, float]:
    """The per-task pass rates of an earlier `codechat eval` output (its directory or summary.json)."""
    p = Path(path)
    f = p / "summary.json" if p.is_dir() else p
    try:
        per_task = json.loads(f.read_text()).get("per_task")
    except (OSError, ValueError, AttributeError) as e:
        raise CodechatError(f"{f}: not a readable eval summary.json ({type(e).__name__})") from None
    if not isinstance(per_task, dict):
        raise CodechatError(f"{f}: has no per_task results (write it with `codechat eval`)")
    rates = reference_rates(per_task)
    if not rates:
        raise CodechatError(f"{f}: no task with sampled results (n > 0) to take the difficulty from")
    return rates
