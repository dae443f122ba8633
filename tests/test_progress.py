"""The progress display: live rich bars per stage with ETA h:m:s, metrics and the sample/verify/update split on
a terminal (a pseudo-terminal test); plain lines when stderr is not a terminal."""
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
from rich.console import Console

from codechat.train.progress import ProgressDisplay, hms, summary

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["data.train=builtin:toy", "data.sft=builtin:toy-sft", "sampling.max_new_tokens=6", "log.plot=false",
        "verifier.workers=1", "stages=[sft,grpo]", "sft.steps=2", "sft.batch_size=2", "rl.steps=2",
        "rl.prompts_per_step=2", "rl.group_size=2", "checkpoint.every=0"]
REC = {"stage": "grpo", "loss": 0.5, "pass_rate": 0.25, "time/sample_s": 1.5, "time/verify_s": 0.25,
       "time/update_s": 0.75}


def test_hms_and_summary():
    assert hms(0) == "0:00:00" and hms(3725.4) == "1:02:05" and hms(-3) == "0:00:00"
    assert summary(REC) == "loss 0.500 | pass 0.250 | sample 1.50s verify 0.25s update 0.75s"


def test_plain_lines_when_not_a_tty():
    buf = io.StringIO()
    d = ProgressDisplay([("sft", 2), ("grpo", 3)], tty=False, console=Console(file=buf, width=200))
    d.update({"stage": "sft", "loss": 1.0}, 1)
    d.update(REC, 3)
    d.close()
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("step 1/5 sft eta 0:00:0") and "loss 1.000" in lines[0]
    assert lines[1].startswith("step 3/5 grpo eta") and "sample 1.50s verify 0.25s update 0.75s" in lines[1]


def test_a_training_run_shows_bars_on_a_tty(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "TERM": "xterm"}
    child = pexpect.spawn(sys.executable, ["-m", "codechat", "train", *ARGS, f"run_dir={tmp_path / 'tty'}"],
                          cwd=str(ROOT), env=env, timeout=240, encoding="utf-8", dimensions=(40, 200))
    child.expect(pexpect.EOF)
    child.close()
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before)
    assert child.exitstatus == 0, out[-2000:]
    assert re.search(r"sft .*━.* 2/2 eta", out) and re.search(r"grpo .*━.* 2/2 eta", out), out[-2000:]
    assert "sample " in out and "verify " in out and "update " in out and "pass " in out
    assert "step 1/4" not in out  # not the plain lines


def test_a_training_run_prints_plain_lines_into_a_pipe(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "codechat", "train", *ARGS, f"run_dir={tmp_path / 'pipe'}"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    steps = [line for line in p.stderr.splitlines() if line.startswith("step ")]
    assert [s.split()[1] for s in steps] == ["1/4", "2/4", "3/4", "4/4"], p.stderr[-2000:]
    assert re.match(r"step 3/4 grpo eta \d+:\d\d:\d\d \| ", steps[2]) and "sample " in steps[2]
    assert "━" not in p.stderr
