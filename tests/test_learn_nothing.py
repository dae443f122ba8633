"""Values that make a run learn nothing are refused with the allowed range; runs with no learning signal warn;
SIGTERM stops like Ctrl-C and says where --resume continues."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from codechat.config.io import ConfigError, load_config
from codechat.train.watch import NoSignalWatch, resume_point, sigterm_as_interrupt, warn_empty_round

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("overrides,needle", [
    (["stages=[grpo]", "sampling.temperature=0"], "sampling.temperature: expected > 0 for stage grpo"),
    (["stages=[rloo]", "sampling.temperature=0"], "sampling.temperature: expected > 0 for stage rloo"),
    (["stages=[dpo]", "sampling.temperature=0"], "sampling.temperature: expected > 0 for stage dpo"),
    (["stages=[]"], "stages: expected at least one of sft, rft"),
    (["stages=[grpo]", "rl.steps=-1"], "rl.steps: expected >= 0, got -1"),
    (["stages=[grpo]", "rl.grad_accum=0"], "rl.grad_accum: expected >= 1, got 0"),
    (["stages=[grpo]", "rl.group_size=1"], "rl.group_size: expected >= 2, got 1"),
    (["stages=[sft]", "sft.lr=0"], "sft.lr: expected > 0, got 0.0"),
    (["stages=[rft]", "rft.rounds=0"], "rft.rounds: expected >= 1, got 0"),
    (["stages=[dpo]", "dpo.pairs_per_step=0"], "dpo.pairs_per_step: expected >= 1, got 0"),
    (["sampling.top_p=1.5"], r"sampling.top_p: expected in \(0, 1\], got 1.5"),
    (["model.dtype=int8"], "model.dtype: expected float32, bfloat16 or float16, got 'int8'"),
])
def test_learn_nothing_values_are_refused_with_the_range(overrides, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[") if "\\" not in needle else needle):
        load_config(None, overrides)


def test_greedy_sampling_is_fine_where_groups_are_not_needed():
    assert load_config(None, ["stages=[sft]", "sampling.temperature=0"]).sampling.temperature == 0


@settings(max_examples=40, deadline=None)
@given(steps=st.integers(-10**6, 10**6), accum=st.integers(-5, 5), temp=st.floats(-2, 3, allow_nan=False))
def test_rl_ranges_fuzz(steps, accum, temp):
    args = ["stages=[grpo]", f"rl.steps={steps}", f"rl.grad_accum={accum}", f"sampling.temperature={temp}"]
    if steps >= 0 and accum >= 1 and temp > 0:
        load_config(None, args)
    else:
        with pytest.raises(ConfigError, match=r"^(rl\.steps|rl\.grad_accum|sampling\.temperature): expected"):
            load_config(None, args)


def test_zero_variance_streak_warns_once_with_the_fix():
    w = NoSignalWatch(patience=3)
    with pytest.warns(UserWarning, match="no sample passes.*sampling.temperature"):
        for _ in range(3):
            w.after_step("grpo", {"zero_var_frac": 1.0, "pass_rate": 0.0})
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w.after_step("grpo", {"zero_var_frac": 1.0, "pass_rate": 0.0})  # the same streak: said once
        w.after_step("grpo", {"zero_var_frac": 0.5, "pass_rate": 0.5})  # signal again: the streak ends
        w.after_step("grpo", {"zero_var_frac": 1.0, "pass_rate": 1.0})
        w.after_step("sft", {"loss": 1.0})  # no groups: not counted


def test_empty_rft_round_warns():
    with pytest.warns(UserWarning, match="round 2 kept nothing.*sft stage first"):
        warn_empty_round(2, 32)


def test_resume_point_names_the_checkpoint(tmp_path):
    assert "starts again from step 0" in resume_point(tmp_path, None)
    assert resume_point(tmp_path, tmp_path / "checkpoints" / "step-0000004").endswith("checkpoints/step-0000004")


def test_sigterm_raises_keyboard_interrupt_inside_only():
    with pytest.raises(KeyboardInterrupt):
        with sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_sigterm_stops_a_training_run_and_names_the_checkpoint(tmp_path):
    run = tmp_path / "r"
    args = ["data.train=builtin:toy", "sampling.max_new_tokens=8", "log.plot=false", "verifier.workers=1",
            "rl.prompts_per_step=2", "rl.group_size=2", "stages=[grpo]", "rl.steps=200", "checkpoint.every=1",
            f"run_dir={run}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "codechat", "train", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list((run / "checkpoints").glob("step-0000002")):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "the step in progress is dropped" in err and f"--resume {run} continues from checkpoints/step-" in err
    last = int(err.split("continues from checkpoints/step-")[1][:7])
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert last >= 2 and steps[:last] == list(range(1, last + 1))


def test_an_untrained_model_warns_in_rft_and_grpo(tmp_path):
    """The random tiny model never passes: the RFT round keeps nothing and every GRPO group has zero variance."""
    from codechat.train import train
    cfg = load_config(None, ["data.train=builtin:toy", "sampling.max_new_tokens=4", "log.progress=false",
                             "log.plot=false", "verifier.workers=1", "stages=[rft,grpo]", "rft.rounds=1",
                             "rft.steps=1", "rft.prompts=2", "rft.group_size=2", "rl.steps=3",
                             "rl.prompts_per_step=2", "rl.group_size=2", f"run_dir={tmp_path / 'r'}"])
    with pytest.warns(UserWarning) as got:
        train(cfg)
    text = " | ".join(str(w.message) for w in got)
    assert "rft: round 0 kept nothing" in text
    assert "grpo: 3 steps in a row with 100% zero-variance groups (no sample passes)" in text
