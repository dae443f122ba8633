"""Responses always encode: a program whose exception message holds a lone surrogate (any buggy string program
can make one) gets its verdict with the surrogate written as visible text, and the rest of its batch is kept;
the TRL and verl rewards keep scoring, whether the surrogate is in the program's output or in the completion."""
from __future__ import annotations

import json

import httpx
import pytest

from codechat.integrations.trl import CodechatReward
from codechat.integrations.verl import compute_score
from serve_helpers import served

TASK = {"task_id": "ident", "prompt": "", "entry_point": "f", "tests": ["assert f(1) == 1"]}
SURROGATE_ERROR = "def f(x):\n    raise ValueError('bad \\udc80 text')"  # the exception message holds U+DC80
HONEST = "def f(x):\n    return x"
SURROGATE_IN_COMPLETION = "def f(x):\n    return x  # \udc80"  # the completion text itself holds one


@pytest.fixture(scope="module")
def url():
    with served("--workers", "1") as (u, _):
        yield u


def test_a_lone_surrogate_in_one_verdict_keeps_the_whole_batch(url):
    body = {"tasks": [TASK], "completions": [{"task_id": "ident", "completion": c, "sample_id": i}
                                             for i, c in enumerate([SURROGATE_ERROR, HONEST])]}
    r = httpx.post(url + "/verify", content=json.dumps(body), timeout=60)
    assert r.status_code == 200, r.text
    wrong, honest = r.json()["verdicts"]
    assert wrong["status"] == "error" and "bad \\udc80 text" in wrong["message"]
    assert honest["status"] == "passed" and honest["sample_id"] == 1


def test_trl_reward_through_the_server_scores_surrogate_output_and_completions(url):
    reward = CodechatReward(column="task", url=url)
    got = reward(prompts=["p"] * 3, completions=[SURROGATE_ERROR, HONEST, SURROGATE_IN_COMPLETION],
                 task=[TASK] * 3)
    assert got[:2] == [0.0, 1.0] and got[2] in (0.0, 1.0)


def test_verl_reward_through_the_server_scores_surrogate_output(url):
    gt = {"inputs": ["1\n"], "outputs": ["1\n"]}
    wrong = compute_score("apps", "```python\nraise ValueError('\\udc80')\n```", gt, url=url)
    honest = compute_score("apps", "```python\nprint(input())\n```", gt, url=url)
    assert wrong["score"] == 0.0 and wrong["status"] != "infra_error" and honest["score"] == 1.0
