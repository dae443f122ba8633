"""Failures in the first hour end in one line and never cost finished work: a full disk while a checkpoint is
written (the partial copy removed, the earlier checkpoints kept, --resume goes on), a full disk elsewhere, a
model directory without tokenizer files (chat, eval and train say so instead of running on an empty vocabulary),
and W&B: no login is one line before anything is written, a resumed run continues its W&B run."""
import errno
import importlib.machinery
import itertools
import json
import os
import shutil
import subprocess
import sys
import types

import pytest

from safetensors import SafetensorError
from tokenizers import Tokenizer, models

from codechat.cli import main
from codechat.policy import hf
from codechat.train import metrics
from qwen_helpers import qwen_dir

BASE = ["data.train=builtin:toy", "sampling.max_new_tokens=8", "log.progress=false", "log.plot=false",
        "verifier.workers=2", "rl.prompts_per_step=2", "rl.group_size=2", "stages=[grpo]", "checkpoint.every=1"]
FULL = "Error while serializing: I/O error: No space left on device (os error 28)"
"""What safetensors raises when the disk fills while it writes model.safetensors."""


def one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("codechat: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_full_disk_mid_checkpoint_removes_the_partial_copy_and_resume_goes_on(tmp_path, monkeypatch, capsys):
    run = tmp_path / "r"
    save = hf.Policy.save

    def fills_the_disk(self, out_dir, state_dict=None):
        if "step-0000002.tmp" in str(out_dir):
            (out_dir / "model.safetensors").parent.mkdir(parents=True, exist_ok=True)
            (out_dir / "model.safetensors").write_bytes(b"\0" * 1000)  # the part written before the disk filled
            raise SafetensorError(FULL)
        return save(self, out_dir, state_dict)

    monkeypatch.setattr(hf.Policy, "save", fills_the_disk)
    assert main(["train", *BASE, f"run_dir={run}", "rl.steps=3"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "step-0000002: not written" in line and "No space left on device" in line and "--resume" in line
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-0000001"]  # no step-0000002.tmp
    assert json.loads((run / "checkpoints" / "step-0000001" / "state.json").read_text())["global_step"] == 1
    monkeypatch.setattr(hf.Policy, "save", save)
    assert main(["train", "--resume", str(run)]) == 0
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_a_full_disk_while_logging_is_one_line(tmp_path, monkeypatch, capsys):
    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "r" / "metrics.jsonl"))

    monkeypatch.setattr(metrics.MetricsLogger, "log", full)
    assert main(["train", *BASE, f"run_dir={tmp_path / 'r'}", "rl.steps=1"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "metrics.jsonl: No space left on device" in line and "--resume" in line


def test_a_model_directory_without_tokenizer_files_is_one_line_in_chat_eval_and_train(tmp_path, capsys):
    src, model = qwen_dir("qwen2.5"), tmp_path / "weights-only"
    model.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):  # a transformers model.save_pretrained
        shutil.copy(src / name, model / name)
    for argv in (["chat", str(model)], ["eval", "--model", str(model), "--tasks", "builtin:toy"],
                 ["train", *BASE, f"model.path={model}", f"run_dir={tmp_path / 'r'}"]):
        assert main(argv) == 2, argv
        assert "the model directory has no tokenizer" in one_line(capsys.readouterr().err), argv
    shutil.copy(src / "tokenizer_config.json", model / "tokenizer_config.json")  # special tokens, no vocabulary
    assert main(["eval", "--model", str(model), "--tasks", "builtin:toy"]) == 2
    assert "no tokenizer" in one_line(capsys.readouterr().err)
    Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")).save(str(model / "tokenizer.json"))  # empty
    assert main(["eval", "--model", str(model), "--tasks", "builtin:toy"]) == 2
    assert "the tokenizer has no vocabulary (1 tokens besides its" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "r").exists()


def fake_wandb(monkeypatch, fail: str = "") -> list[dict]:
    """A stand-in for the wandb package (not a dependency of the tests): records each init's arguments."""
    calls, ids = [], (f"id{i}" for i in itertools.count())
    mod = types.ModuleType("wandb")
    mod.__spec__ = importlib.machinery.ModuleSpec("wandb", None)  # transformers looks before the model loads
    mod.util = types.SimpleNamespace(generate_id=lambda: next(ids))

    def init(**kw):
        if fail:
            raise RuntimeError(fail)
        calls.append(kw)
        return types.SimpleNamespace(id=kw["id"], log=lambda *a, **k: None, finish=lambda: None)

    mod.init = init
    monkeypatch.setitem(sys.modules, "wandb", mod)
    return calls


def test_a_resumed_run_continues_its_wandb_run_and_a_forced_one_opens_a_new(tmp_path, monkeypatch):
    calls, run = fake_wandb(monkeypatch), tmp_path / "r"
    assert main(["train", *BASE, f"run_dir={run}", "rl.steps=1", "log.wandb=true"]) == 0
    assert main(["train", "--resume", str(run), "rl.steps=2"]) == 0
    assert [(c["id"], c["resume"]) for c in calls] == [("id0", "allow"), ("id0", "allow")]
    assert main(["train", *BASE, f"run_dir={run}", "rl.steps=1", "log.wandb=true", "--force"]) == 0
    assert calls[-1]["id"] == "id1" and (run / "wandb-run-id").read_text().strip() == "id1"


def test_no_wandb_login_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    fake_wandb(monkeypatch, fail="api_key not configured (no-tty). call wandb.login(key=[your_api_key])")
    assert main(["train", *BASE, f"run_dir={tmp_path / 'r'}", "rl.steps=1", "log.wandb=true"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "log.wandb: W&B did not start (api_key not configured" in line and "wandb login" in line
    assert not (tmp_path / "r").exists()


def test_without_wandb_installed_the_run_says_so_and_logs_to_metrics(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.warns(UserWarning, match="wandb is not installed"):
        assert main(["train", *BASE, f"run_dir={tmp_path / 'r'}", "rl.steps=1", "log.wandb=true"]) == 0
    assert (tmp_path / "r" / "metrics.jsonl").read_text().count("\n") == 1


def _can_mount_tmpfs() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs root and mount namespaces (unshare -m)")
def test_a_really_full_disk_is_one_line_and_keeps_the_finished_checkpoint(tmp_path):
    """A 50 MiB tmpfs in a private mount namespace: the first checkpoint (~30 MiB) fits, the second does not."""
    disk = tmp_path / "disk"
    disk.mkdir()
    run = disk / "r"
    script = (f"mount -t tmpfs -o size=50m tmpfs {disk} && {sys.executable} -m codechat train "
              + " ".join(BASE) + f" rl.steps=4 checkpoint.keep_last=5 run_dir={run}; echo rc=$?; "
              f"ls {run / 'checkpoints'}")
    p = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    line = one_line(p.stderr)
    assert "step-0000002: not written" in line and "MiB were free" in line and "--resume" in line, p.stderr
    assert p.stdout.split() == ["rc=2", "step-0000001"]  # no step-0000002.tmp left
