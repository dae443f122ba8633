"""Resume and run directories: logs truncated to the checkpoint's step (a run killed before its first checkpoint
included), one step numbering across logs, a second run into a run dir refused unless --force, --resume with
--config refused."""
import json

import pytest

from codechat import CodechatError
from codechat.cli import main
from codechat.config.io import load_config
from codechat.train import train
from codechat.train.checkpoint import Checkpointer
from codechat.train.rundir_logs import claim_run_dir, truncate_logs

BASE = ["data.train=builtin:toy", "sampling.max_new_tokens=8", "log.progress=false", "log.plot=false",
        "verifier.workers=2", "rl.prompts_per_step=2", "rl.group_size=2", "stages=[grpo]"]


def steps(path):
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_truncate_keeps_records_up_to_the_step(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in [1, 2, 3, 1, 2]))
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in [1, 1, 2, 3]))
    dropped = truncate_logs(tmp_path, 2)
    assert steps(tmp_path / "metrics.jsonl") == [1, 2, 1, 2]
    assert steps(tmp_path / "rollouts.jsonl") == [1, 1, 2]
    assert dropped == {"metrics.jsonl": 1, "rollouts.jsonl": 1}
    truncate_logs(tmp_path, 0)
    assert (tmp_path / "metrics.jsonl").read_text() == ""


def test_claim_refuses_an_existing_run_unless_forced(tmp_path):
    claim_run_dir(tmp_path / "new")  # nothing there: fine
    (tmp_path / "config.yaml").write_text("run_dir: r\nstages: [grpo]\nmodel: {path: tiny}\ndata: {}\n")
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(CodechatError, match="--force"):
        claim_run_dir(tmp_path)
    claim_run_dir(tmp_path, force=True)
    assert not (tmp_path / "config.yaml").exists() and (tmp_path / "notes.txt").exists()


def test_resume_before_first_checkpoint_and_step_numbering(tmp_path):
    run = tmp_path / "r"
    args = BASE + [f"run_dir={run}", "rl.steps=2", "checkpoint.every=1", "log.audit=true"]
    train(load_config(None, args))
    assert steps(run / "metrics.jsonl") == [1, 2]
    assert sorted(set(steps(run / "rollouts.jsonl"))) == [1, 2]  # the update that used them
    assert set(steps(run / "audit.jsonl")) <= {1, 2}
    # as if killed after step 1 logged but before any checkpoint
    import shutil
    shutil.rmtree(run / "checkpoints")
    (run / "final").unlink()
    train(resume=run)
    assert steps(run / "metrics.jsonl") == [1, 2]  # not 1, 2, 1, 2
    assert sorted(set(steps(run / "rollouts.jsonl"))) == [1, 2]
    assert len(steps(run / "rollouts.jsonl")) == 2 * 2 * 2
    assert Checkpointer(run).latest().name == "step-0000002"


def test_cli_refuses_resume_with_config_and_a_second_config(tmp_path, capsys):
    run = tmp_path / "r"
    overrides = BASE + [f"run_dir={run}", "rl.steps=1"]
    assert main(["train", *overrides]) == 0
    assert main(["train", *overrides, "rl.lr=1e-3"]) == 2
    assert "--force" in capsys.readouterr().err
    cfg = tmp_path / "c.yaml"
    cfg.write_text("seed: 3\n")
    assert main(["train", "--resume", str(run), "--config", str(cfg)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["train", *overrides, "seed=5", "--force"]) == 0
    assert steps(run / "metrics.jsonl") == [1]
