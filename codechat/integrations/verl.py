"""A `compute_score` for verl's custom reward function hook, judged by codechat's verifier.

    # verl config:
    custom_reward_function:
      path: <site-packages>/codechat/integrations/verl.py
      name: compute_score
      reward_kwargs: {url: "http://127.0.0.1:8080"}     # optional: `codechat serve` (else in-process)

`ground_truth` is what verl's code datasets carry: `{"inputs": [...], "outputs": [...]}` (stdin/stdout tests,
or call-based ones with `fn_name`, as APPS / TACO / PRIME write them), as a dict or its JSON text; or a task
record in any format codechat loads. Returns {"score", "acc", "status", "tests_passed", "tests_total"}:
`score` is 1.0 for a pass, else 0.0, or the fraction of tests passed with `reward="pass-fraction"`; a
completion the verifier could not judge (`infra_error`) scores 0.0 with that status, so it can be filtered.
Runs one completion per call as verl's hook does; the in-process pool is started once per process. The url
and token may also come from CODECHAT_SERVE_URL / CODECHAT_SERVE_TOKEN.
"""
from __future__ import annotations

import json
import os
import threading

from codechat.integrations import URL_ENV, Judge, as_record
from codechat.integrations.trl import score

_judges: dict[tuple, Judge] = {}
_lock = threading.Lock()


def task_record(ground_truth) -> dict:
    """The task record of one verl `ground_truth`."""
    gt = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    if isinstance(gt, dict) and "inputs" in gt and "outputs" in gt:
        return {"problem_id": "verl", "question": "(verl ground truth)", "input_output": json.dumps(gt)}
    return as_record(gt, "ground_truth")


def _judge(url: str | None, token: str | None) -> Judge:
    key = (url, token)
    with _lock:
        if key not in _judges:
            _judges[key] = Judge(url, token)
        return _judges[key]


def compute_score(data_source, solution_str, ground_truth, extra_info=None, url: str | None = None,
                  token: str | None = None, reward: str = "pass", **_) -> dict:
    (v,) = _judge(url or os.environ.get(URL_ENV) or None, token).verdicts([task_record(ground_truth)],
                                                                        [solution_str], "ground_truth")
    s = score(v, reward)
    return {"score": 0.0 if s is None else float(s), "acc": v.passed, "status": v.status,
            "tests_passed": v.tests_passed, "tests_total": v.tests_total}
