"""In training, a looping stdin/stdout sample costs one test's time limit, not every test's.

The reward is "all tests pass" by default, so once one test fails the rest cannot change it: training stops
there unless a reward reads how many tests passed (pass-fraction) or `verifier.stop_in_training=false`.
"""
from __future__ import annotations

import dataclasses
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
    with Verifier(dataclasses.replace(vcfg, workers=1)) as v:  # (tests already started still run: two per worker)
        t0 = time.monotonic()
        loop = v.verify(TASK, "while True:\n    pass\n")
        spent = time.monotonic() - t0
        assert loop.status == "timeout" and loop.tests_passed == 0 and loop.tests_total == N
        assert spent < 0.5 * N / 3, spent  # one test's limit, not twelve
        assert v.verify(TASK, "print(input())").passed  # the honest twin runs every test


def test_partial_credit_or_the_setting_keeps_every_test():
    base = VerifierConfig()
    assert not training_verifier_config(base, {"pass-all": 1.0, "pass-fraction": 0.5}).stop_at_first_failure
    assert training_verifier_config(base, {"pass-all": 1.0, "pass-fraction": 0.0}).stop_at_first_failure
    off = VerifierConfig(stop_in_training=False)
    assert not training_verifier_config(off, {"pass-all": 1.0}).stop_at_first_failure
