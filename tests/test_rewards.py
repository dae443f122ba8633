"""Each reward on hand-made verdicts; composed components add up; the metrics show each one's share."""
from dataclasses import replace

import pytest

from codechat.algos import UnknownNameError
from codechat.config import RewardConfig
from codechat.rollout.rewards import REWARDS, RewardContext, check_components, compose_rewards, reward_metrics
from codechat.tasks.model import Task
from codechat.verifier.verdict import Verdict

TASK = Task(task_id="t1", prompt="Write add(a, b).", tests=["assert add(1, 2) == 3", "assert add(0, 0) == 0"],
            entry_point="add")
PASSED = Verdict(status="passed", passed=True, reward=1.0, tests_passed=2, tests_total=2)
HALF = Verdict(status="failed", passed=False, reward=0.0, tests_passed=1, tests_total=2, error_type="AssertionError")
BLOCKED = Verdict(status="error", passed=False, reward=0.0, blocked=("network", "subprocess"))
GOOD = "Here:\n```python\ndef add(a, b):\n    return a + b\n```\n"
CTX = RewardContext(n_tokens=50, max_new_tokens=100)


def r(name, completion=GOOD, verdict=PASSED, ctx=CTX, task=TASK):
    return REWARDS[name](task, completion, verdict, ctx)


def test_pass_all_and_pass_fraction():
    assert r("pass-all") == 1.0 and r("pass-all", verdict=HALF) == 0.0
    assert r("pass-fraction") == 1.0 and r("pass-fraction", verdict=HALF) == 0.5
    no_count = Verdict(status="timeout", passed=False, reward=0.0)
    assert r("pass-fraction", verdict=no_count) == 0.0


@pytest.mark.parametrize("completion, want", [
    (GOOD, 1.0),
    ("```py\ndef add(a, b): return a + b\n```", 1.0),
    ("```\nadd = lambda a, b: a + b\n```", 1.0),
    ("def add(a, b):\n    return a + b\n", 0.0),  # no code block
    (GOOD + "\nor\n```python\ndef add(a, b): return b + a\n```", 0.0),  # two blocks
    ("```python\ndef plus(a, b):\n    return a + b\n```", 0.0),  # misses the entry point
    ("```python\ndef add(a, b)\n    return a + b\n```", 0.0),  # does not parse
    ("```javascript\nfunction add(a, b) { return a + b }\n```", 0.0),
    ("```python\ndef add(a, b):\n    return a + b\n", 0.0),  # unclosed
])
def test_format(completion, want):
    assert r("format", completion) == want


def test_format_continuation_style():
    task = Task(task_id="h", prompt="def add(a, b):\n", tests=[], entry_point="add")
    ctx = replace(CTX, cfg=RewardConfig(format_fenced=False))
    assert r("format", "    return a + b\n", task=task, ctx=ctx) == 1.0
    assert r("format", "    return a +\n", task=task, ctx=ctx) == 0.0


def test_overlong_dapo_ramp():
    cfg = RewardConfig(overlong_buffer=20)
    at = lambda n, trunc=False: r("overlong", ctx=RewardContext(n, 100, trunc, cfg))
    assert at(50) == 0.0 and at(80) == 0.0
    assert at(90) == pytest.approx(-0.5) and at(95) == pytest.approx(-0.75)
    assert at(100) == -1.0 and at(60, trunc=True) == -1.0
    assert r("overlong", ctx=RewardContext(90, 100)) == pytest.approx(-0.6)  # default buffer: 100 // 4 = 25
    assert r("overlong", ctx=RewardContext(90, 0)) == 0.0  # limit unknown


def test_length_penalty_per_token_over_budget():
    cfg = RewardConfig(length_budget=40, length_per_token=0.01)
    assert r("length", ctx=RewardContext(30, 100, cfg=cfg)) == 0.0
    assert r("length", ctx=RewardContext(55, 100, cfg=cfg)) == pytest.approx(-0.15)


def test_safety():
    assert r("safety") == 0.0 and r("safety", verdict=BLOCKED) == -1.0


def test_composed_components_add_up():
    comps = {"pass-all": 1.0, "format": 0.1, "safety": 0.5, "pass-fraction": 0.3}
    total, parts = compose_rewards(comps, TASK, GOOD, PASSED, CTX)
    assert parts == pytest.approx({"pass-all": 1.0, "format": 0.1, "safety": 0.0, "pass-fraction": 0.3})
    assert total == pytest.approx(1.4) == pytest.approx(sum(parts.values()))
    total, parts = compose_rewards(comps, TASK, "no code", BLOCKED, CTX)
    assert total == pytest.approx(-0.5) and parts["safety"] == -0.5


def test_reward_metrics_mean_and_share():
    batch = [{"pass-all": 1.0, "format": 0.1}, {"pass-all": 0.0, "format": 0.1}, {"pass-all": 0.0, "format": 0.0}]
    m = reward_metrics(batch)
    assert m["reward/pass-all/mean"] == pytest.approx(1 / 3) and m["reward/format/mean"] == pytest.approx(0.2 / 3)
    assert m["reward/pass-all/share"] == pytest.approx(1 / 1.2) and m["reward/format/share"] == pytest.approx(0.2 / 1.2)
    assert reward_metrics([]) == {}


def test_unknown_reward_and_double_registration():
    with pytest.raises(UnknownNameError, match="unknown reward 'pass_all'; valid: .*nothink-bonus, overlong, pass-all, pass-fraction, protected-edit, safety, tool-calls"):
        check_components({"pass_all": 1.0})  # plugins loaded by other tests may also be listed
    with pytest.raises(ValueError, match="already registered"):
        REWARDS.register("safety")(lambda task, completion, verdict, ctx: 0.0)
