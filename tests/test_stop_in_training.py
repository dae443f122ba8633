"""In training, a looping stdin/stdout sample costs one test's time limit, not every test's.

The reward is "all tests pass" by default, so once one test fails the rest cannot change it: training stops
there unless a reward reads how many tests passed (pass-fraction) or `verifier.stop_in_training=false`.
"""
from __future__ import annotations

import time

from codechat.config import RunConfig, VerifierConfig
from codechat.tasks import Task
from codechat.tasks.stdio import IOTest, StdioSpec
from codechat.verifier.factory import training_verifier_config
from codechat.verifier.verify import Verifier

N = 12
TASK = Task("echo", "", [], timeout_s=0.5, stdio=StdioSpec([IOTest(f"{i}\n", f"{i}\n") for i in range(N)]))


def test_training_stops_at_the_first_failing_test_by_default():
    cfg = RunConfig()
    assert cfg.rewards.components == {"pass-all": 1.0}
    vcfg = training_verifier_config(cfg.verifier, cfg.rewards.components)
    assert vcfg.stop_at_first_failure and not cfg.verifier.stop_at_first_failure  # (verify and eval: every test)
    with Verifier(vcfg) as v:
        assert v.verify(TASK, "print(input())").passed  # the honest twin runs every test (and starts the pool)
        t0 = time.monotonic()
        loop = v.verify(TASK, "while True:\n    pass\n")
        spent = time.monotonic() - t0
        assert loop.status == "timeout" and loop.tests_passed == 0 and loop.tests_total == N
        assert spent < 0.5 * 2.5, spent  # one test's limit, not twelve


def test_partial_credit_or_the_setting_keeps_every_test():
    base = VerifierConfig()
    assert not training_verifier_config(base, {"pass-all": 1.0, "pass-fraction": 0.5}).stop_at_first_failure
    assert training_verifier_config(base, {"pass-all": 1.0, "pass-fraction": 0.0}).stop_at_first_failure
    off = VerifierConfig(stop_in_training=False)
    assert not training_verifier_config(off, {"pass-all": 1.0}).stop_at_first_failure


def test_a_batch_with_looping_completions_keeps_input_order_and_spends_one_limit_per_loop():
    loop, right, wrong = "while True:\n    pass\n", "print(input())", "print(0)"
    fn = Task("fn", "", ["assert f() == 1"], "f")
    pairs = [(TASK, loop), (TASK, right), (fn, "def f():\n    return 1\n"), (TASK, wrong), (fn, "def f():\n    return 2\n"),
             (TASK, "")] * 3
    with Verifier(training_verifier_config(VerifierConfig(workers=2), {"pass-all": 1.0})) as v:
        v.verify(TASK, right)
        t0 = time.monotonic()
        verdicts = v.verify_many(pairs)
        spent = time.monotonic() - t0
    assert [vd.status for vd in verdicts] == ["timeout", "passed", "passed", "failed", "failed", "no_code"] * 3
    assert verdicts[3].tests_passed == 1 and verdicts[3].tests_total == N  # (test 0's expected output is 0)
    assert spent < 3 * 0.5 + 2.5, spent  # three loops of one limit each on two workers, plus the rest
