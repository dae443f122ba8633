"""Evaluation of agents on repository tasks: resolve rate pass@k and the habits behind it.

    report = evaluate_episodes(EpisodeRunner(agent, judge, cfg), tasks, n=4, ks=[1, 4])
    report.metrics["resolve@1"], report.samples[0]["turns"]

Metrics: `resolve@k` (unbiased pass@k over n episodes per task), `turns`, `tool_calls`, `bad_calls` (means per
episode), `tested_before_submit` (share of episodes whose last run_tests came after their last edit),
`protected_attempts` (mean per episode) and `protected_episodes` (share with at least one), `submitted`,
`truncated` and `truncated/REASON` (shares), `status/S` (shares of verdict statuses), `episode_s_mean`,
`episode_s_max`, `wall_s`, `slowest_share` (slowest episode / wall time), `model_tokens_per_s`.
Each sample is one episode: verdict, habits, the turns' text and tool results, and the token-level transcript.
"""
from __future__ import annotations

import time
from collections import Counter

from codechat import CodechatError
from codechat.evaluation.evaluate import EvalReport, pass_at_k
from codechat.rollout.episode import EpisodeResult, EpisodeRunner
from codechat.tasks.repo import RepoTask


def episode_record(r: EpisodeResult) -> dict:
    t = r.transcript
    return {"task_id": r.task_id, "sample": r.sample, "reward": r.reward, "passed": r.verdict.passed,
            "status": r.verdict.status, "verdict": r.verdict.to_dict(), "submitted": r.submitted,
            "truncated": r.truncated, "tool_calls": r.tool_calls, "bad_calls": r.bad_calls,
            "protected_attempts": r.protected_attempts, "tests_runs": r.tests_runs,
            "tested_before_submit": r.tested_before_submit, "duration_s": round(r.duration_s, 3),
            "changes": r.changes,
            "turns": [{"text": u.text, "tool": u.tool, "arguments": u.arguments, "ok": u.ok, "result": u.result,
                       "finish_reason": u.finish_reason} for u in t.turns],
            "transcript": {"prompt_len": t.prompt_len, "tokens": t.tokens,
                           "is_model": [int(m) for m in t.is_model],
                           "logprobs": [round(x, 6) for x in t.logprobs]}}


def summarize_episodes(results: list[EpisodeResult], ks: list[int], wall_s: float) -> EvalReport:
    per_task: dict[str, dict] = {}
    for r in results:
        d = per_task.setdefault(r.task_id, {"n": 0, "c": 0})
        d["n"] += 1
        d["c"] += int(r.verdict.passed)
    n_ep = max(1, len(results))
    m: dict[str, float] = {}
    for k in ks:
        usable = [d for d in per_task.values() if d["n"] >= k]
        if usable:
            m[f"resolve@{k}"] = sum(pass_at_k(d["n"], d["c"], k) for d in usable) / len(usable)

    def mean(f) -> float:
        return sum(f(r) for r in results) / n_ep
    m.update(turns=mean(lambda r: len(r.transcript.turns)), tool_calls=mean(lambda r: r.tool_calls),
             bad_calls=mean(lambda r: r.bad_calls), tested_before_submit=mean(lambda r: r.tested_before_submit),
             protected_attempts=mean(lambda r: r.protected_attempts),
             protected_episodes=mean(lambda r: r.protected_attempts > 0), submitted=mean(lambda r: r.submitted),
             truncated=mean(lambda r: bool(r.truncated)), episode_s_mean=mean(lambda r: r.duration_s))
    for reason, c in Counter(r.truncated for r in results if r.truncated).items():
        m[f"truncated/{reason}"] = c / n_ep
    for status, c in Counter(r.verdict.status for r in results).items():
        m[f"status/{status}"] = c / n_ep
    slowest = max((r.duration_s for r in results), default=0.0)
    model_tokens = sum(sum(r.transcript.is_model) for r in results)
    m.update(episode_s_max=slowest, wall_s=wall_s, slowest_share=slowest / wall_s if wall_s > 0 else 0.0,
             model_tokens_per_s=model_tokens / wall_s if wall_s > 0 else 0.0, episodes=float(len(results)))
    return EvalReport(m, per_task, [episode_record(r) for r in results])


def evaluate_episodes(runner: EpisodeRunner, tasks: list[RepoTask], n: int, ks: list[int],
                      seed: int = 0) -> EvalReport:
    """n episodes per task through `runner`; pass@k needs k <= n."""
    if n < 1 or any(k > n for k in ks):
        raise CodechatError(f"eval: need n >= 1 and every k <= n (n={n}, k={ks})")
    t0 = time.monotonic()
    results = runner.run([(t, i) for t in tasks for i in range(n)], seed=seed)
    return summarize_episodes(results, ks, time.monotonic() - t0)
