"""`codechat train --print-config` prints the resolved config and exits; `--dry-run` loads tasks and model,
samples and verifies one batch, reports time and memory per step, and writes nothing."""
import yaml

from codechat.cli import main
from codechat.config.io import load_config
from codechat.train.dryrun import dry_run

ARGS = ["data.train=builtin:toy", "sampling.max_new_tokens=8", "verifier.workers=1", "stages=[grpo]",
        "rl.prompts_per_step=2", "rl.group_size=3"]


def test_print_config_is_the_resolved_config(tmp_path, capsys):
    assert main(["train", "--print-config", *ARGS, f"run_dir={tmp_path / 'r'}"]) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert out["rl"]["group_size"] == 3 and out["stages"] == ["grpo"] and out["sampling"]["temperature"] == 1.0
    assert not (tmp_path / "r").exists()
    assert main(["train", "--print-config", "rl.steps=-1"]) == 2
    assert "rl.steps: expected >= 0" in capsys.readouterr().err


def test_print_config_of_a_run_dir(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"seed": 11}))
    assert main(["train", "--print-config", "--resume", str(tmp_path)]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["seed"] == 11


def test_dry_run_samples_one_batch_and_writes_nothing(tmp_path, capsys):
    run = tmp_path / "r"
    rep = dry_run(load_config(None, ARGS + [f"run_dir={run}"]))
    assert rep.samples == 6 and rep.context == 1024 and rep.prompt_limit == 1024 - 8
    assert rep.sample_s > 0 and rep.verify_s > 0 and rep.update_s > 0 and rep.peak_mem_mb > 0
    assert 0 <= rep.pass_rate <= 1
    assert main(["train", "--dry-run", *ARGS, f"run_dir={run}"]) == 0
    out = capsys.readouterr().out
    assert "one step of 6 samples" in out and "peak memory" in out and "nothing written" in out
    assert not run.exists()
