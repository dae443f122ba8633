"""Failures in the first hour end in one line and never cost finished work: a full disk while a checkpoint is
written (the partial copy removed, the earlier checkpoints kept, --resume goes on), a full disk elsewhere, and a
model directory without tokenizer files (chat, eval and train say so instead of running on an empty vocabulary)."""
import errno
import json
import shutil

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
