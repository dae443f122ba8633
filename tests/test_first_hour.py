"""Small things a new user meets in the first hour: a step with no learning signal prints no PyTorch scheduler
warning, rollouts.jsonl carries each prompt, a warmup as long as the SFT stage is flagged (and the rehearsal
config has none), `make demo` runs with the thread count its README table was measured with."""
import json
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

from codechat.cli import main
from codechat.config.io import load_config
from codechat.tasks import load_tasks
from codechat.train import train

ROOT = Path(__file__).resolve().parents[1]
BASE = ["data.train=builtin:toy", "sampling.max_new_tokens=8", "log.progress=false", "log.plot=false",
        "verifier.workers=2", "rl.prompts_per_step=2", "rl.group_size=2", "stages=[grpo]", "rl.steps=1",
        "rl.zero_variance=skip"]


def test_a_step_without_signal_is_quiet_and_rollouts_carry_the_prompt(tmp_path):
    run = tmp_path / "r"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(load_config(None, BASE + [f"run_dir={run}"]))  # a random model: no sample passes, nothing to learn
    assert json.loads((run / "metrics.jsonl").read_text())["skipped_update"] == 1.0
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)]
    prompts = {t.task_id: t.prompt for t in load_tasks("builtin:toy")}
    recs = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(recs) == 4 and all(r["prompt"].rstrip("\n") == prompts[r["task_id"]].rstrip("\n") for r in recs)


def test_an_sft_warmup_as_long_as_the_stage_is_flagged():
    with pytest.warns(UserWarning, match=r"sft.warmup: 10 warmup steps in sft.steps=4: the learning rate reaches"):
        load_config(None, ["stages=[sft]", "sft.steps=4"])
    for path in sorted((ROOT / "configs").glob("*.yaml")):  # the shipped configs reach their peak lr
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="sft.warmup")
            cfg = load_config(path)
        assert "sft" not in cfg.stages or cfg.sft.warmup < cfg.sft.steps, path.name


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_uses_the_thread_count_of_the_readme_table():
    measured = re.search(r"2-core AMD EPYC VM, [0-9-]+, `OMP_NUM_THREADS=(\d+)`", (ROOT / "README.md").read_text())
    out = subprocess.run(["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert measured and f"OMP_NUM_THREADS={measured.group(1)} .venv/bin/codechat demo" in out


def test_overrides_may_follow_a_flag(tmp_path, capsys):
    """`codechat train --config C --force key=value` (argparse alone ends the override list at the flag)."""
    assert main(["train", "--print-config", "--force", "seed=7", "rl.lr=0.5", *BASE[:2]]) == 0
    out = capsys.readouterr().out
    assert "seed: 7" in out and "lr: 0.5" in out and "train: builtin:toy" in out
    with pytest.raises(SystemExit):
        main(["train", "--print-config", "--force", "--no-such-flag"])
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
