"""Evaluation: pass@k with the unbiased estimator of Chen et al. (2021), greedy pass@1, per-task results.

pass@k for one task with n samples of which c pass is 1 - C(n-c, k) / C(n, k), computed as a running product
(1 - k/i for i in n-c+1..n) so it never forms huge binomials.
"""
from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from codechat.config import SamplingConfig
from codechat.evaluation.thinking import bucket_metrics, mode_metrics
from codechat.io.jsonl import scan_jsonl, unknown_ids_line
from codechat.tasks import Task
from codechat.verifier.evalplus import is_evalplus, score_evalplus


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate for one task: n samples, c correct."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and k >= 1, got n={n} c={c} k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got n={n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


@dataclass
class EvalReport:
    """Results of evaluating one model on one task set."""

    metrics: dict[str, float]
    """pass@k, greedy_pass@1, status shares, mean length, tokens/s."""
    per_task: dict[str, dict] = field(default_factory=dict)
    """task_id -> {"n", "c", "greedy"}."""
    samples: list[dict] = field(default_factory=list)
    """One record per sample: task_id, sample, completion, verdict."""


def summarize(records: list[dict], ks: list[int], greedy: dict[str, bool] | None = None) -> EvalReport:
    """Turn per-sample records (task_id, passed, status, n_tokens) into pass@k and counts."""
    per_task: dict[str, dict] = {}
    plus = any("base_passed" in r for r in records)  # evalplus: `passed` is plus (base + extra inputs)
    for r in records:
        t = per_task.setdefault(r["task_id"], {"n": 0, "c": 0, **({"c_base": 0} if plus else {})})
        t["n"] += 1
        t["c"] += int(bool(r["passed"]))
        if plus:
            t["c_base"] += int(bool(r.get("base_passed")))
    metrics: dict[str, float] = {}
    if per_task:
        n_min = min(t["n"] for t in per_task.values())
        for k in ks:
            if k <= n_min:
                metrics[f"pass@{k}"] = sum(pass_at_k(t["n"], t["c"], k) for t in per_task.values()) / len(per_task)
                if plus:
                    metrics[f"base_pass@{k}"] = metrics[f"plus_pass@{k}"] = metrics[f"pass@{k}"]
                    metrics[f"base_pass@{k}"] = sum(pass_at_k(t["n"], t["c_base"], k)
                                                    for t in per_task.values()) / len(per_task)
    if greedy:
        metrics["greedy_pass@1"] = sum(greedy.values()) / len(greedy)
        for tid, ok in greedy.items():
            per_task.setdefault(tid, {"n": 0, "c": 0})["greedy"] = bool(ok)
    for status, c in Counter(r["status"] for r in records).items():
        metrics[f"status/{status}"] = c / len(records)
    if records and "n_tokens" in records[0]:
        metrics["mean_len"] = sum(r["n_tokens"] for r in records) / len(records)
    return EvalReport(metrics, per_task, records)


def score_records(verifier, pairs: list[tuple[Task, str]], verdicts=None) -> list[dict]:
    """Per-sample records; evalplus tasks are scored on base and base+plus inputs (expected outputs from the
    reference), other tasks by their tests (`verdicts` when already computed)."""
    plus_idx = [i for i, (t, _) in enumerate(pairs) if is_evalplus(t)]
    if verdicts is None:
        skip = set(plus_idx)
        rest = [i for i in range(len(pairs)) if i not in skip]
        verdicts = [None] * len(pairs)
        for i, v in zip(rest, verifier.verify_many([pairs[i] for i in rest])):
            verdicts[i] = v
    records = [{"task_id": t.task_id, "completion": c, "passed": v.passed if v else False,
                "status": v.status if v else "", "verdict": v.to_dict() if v else None}
               for (t, c), v in zip(pairs, verdicts)]
    if plus_idx:
        for i, (base, plus) in zip(plus_idx, score_evalplus(verifier, [pairs[i] for i in plus_idx])):
            records[i].update({"passed": plus.passed, "base_passed": base.passed, "status": plus.status,
                               "verdict": plus.to_dict(), "base_verdict": base.to_dict()})
    return records


def evaluate_policy(policy, verifier, tasks: list[Task], n: int = 4, ks: list[int] = (1,), temperature: float = 1.0,
                    greedy: bool = True, sampling: SamplingConfig | None = None, seed: int = 1234,
                    prompts_per_batch: int = 16, progress: Callable[[int, int], None] | None = None,
                    thinking: bool = False, reference: dict[str, float] | None = None) -> EvalReport:
    """Sample n completions per task (and one greedy), verify, and compute pass@k. `progress(done, total)` is
    called after every batch of tasks. thinking: also pass@1 and length by mode; reference ({task_id: pass rate}
    of the reference model): also by difficulty bucket (evaluation/thinking.py)."""
    # torch: imported here so that scoring existing completions (`codechat eval --completions`) runs without it
    from codechat.policy import Sampler
    from codechat.rollout.collect import collect

    sampling = sampling or SamplingConfig()
    sampler = Sampler(policy)
    records, greedy_ok, new_tokens, gen_s = [], {}, 0, 0.0
    was_training = policy.model.training
    policy.model.eval()
    for start in range(0, len(tasks), prompts_per_batch):
        chunk = tasks[start:start + prompts_per_batch]
        runs = []
        if n > 0:
            runs.append(("sample", n, dataclasses.replace(sampling, temperature=temperature, seed=seed + start)))
        if greedy:
            runs.append(("greedy", 1, dataclasses.replace(sampling, temperature=0.0, seed=seed)))
        for kind, count, cfg in runs:
            r = collect(policy, sampler, verifier, chunk, count, cfg)
            gen_s += r.sample_s
            new_tokens += int(r.batch.n_tokens.sum())
            recs = score_records(verifier, [(r.task_of(i), r.batch.texts[i]) for i in range(len(r.verdicts))],
                                 r.verdicts)
            for i, rec in enumerate(recs):
                if kind == "greedy":
                    greedy_ok[rec["task_id"]] = rec["passed"]
                    continue
                rec.update({"sample": i % count, "n_tokens": int(r.batch.n_tokens[i])})
                records.append(rec)
        if progress is not None:
            progress(start + len(chunk), len(tasks))
    if was_training:
        policy.model.train()
    report = summarize(records, list(ks), greedy_ok if greedy else None)
    report.metrics["tokens_per_s"] = new_tokens / max(gen_s, 1e-9)
    if thinking:
        report.metrics.update(mode_metrics(records, verifier.cfg.thinking.open))
    if reference:
        report.metrics.update(bucket_metrics(records, reference))
    return report


def read_completions(path: str, task_ids: set[str]) -> tuple[list[tuple[str, int, str]], list[str]]:
    """(task_id, sample_id, completion) triples and a list of problems: one line for all unknown ids first
    (`unknown_ids_line`), then one per bad line."""
    out, problems, counts, unknown = [], [], {}, []
    for lineno, rec, why in scan_jsonl(path, "completions file"):
        if rec is None or "task_id" not in rec or "completion" not in rec:
            problems.append(f"{path}:{lineno}: skipped {why or 'malformed line: needs task_id and completion'}")
            continue
        tid, comp = str(rec["task_id"]), rec["completion"]
        if tid not in task_ids:
            unknown.append((lineno, tid))
            continue
        sid = rec.get("sample_id", counts.get(tid, 0))
        counts[tid] = counts.get(tid, 0) + 1
        out.append((tid, sid, comp if isinstance(comp, str) else ""))
    line = unknown_ids_line(path, unknown, "the task set")
    return out, ([f"{line}; skipped"] if line else []) + problems


def evaluate_completions(verifier, tasks: list[Task], path: str, ks: list[int], thinking: bool = False,
                         reference: dict[str, float] | None = None) -> EvalReport:
    """Score completions that already exist (any model or tool) with the same verifier and estimator;
    thinking, reference: as in evaluate_policy (length by mode needs `n_tokens` in the file's records: absent = 0)."""
    by_id = {t.task_id: t for t in tasks}
    triples, problems = read_completions(path, set(by_id))
    for msg in problems[:20]:
        print(f"warning: {msg}", file=sys.stderr)
    if len(problems) > 20:
        print(f"warning: ... and {len(problems) - 20} more", file=sys.stderr)
    records = score_records(verifier, [(by_id[t], c) for t, _, c in triples])
    for rec, (_, s, _) in zip(records, triples):
        rec["sample"] = s
    fewest = min(Counter(r["task_id"] for r in records).values()) if records else 0
    dropped = [k for k in ks if k > fewest]
    if dropped:
        print(f"warning: pass@{','.join(map(str, dropped))} not reported: a task has only {fewest} completion(s) "
              f"(k must be <= the samples of every task)", file=sys.stderr)
    report = summarize(records, [k for k in ks if k <= fewest] or [1])
    if thinking:
        report.metrics.update(mode_metrics(records, verifier.cfg.thinking.open))
    if reference:
        report.metrics.update(bucket_metrics(records, reference))
    return report
