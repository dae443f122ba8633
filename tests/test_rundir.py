"""A run directory as a model: RUN/final and RUN/best links written by the checkpointer, `final` by default,
`best` on request, model.path accepting them; chat and `model sample` speak the format the run trained with
(in a real terminal too); a full disk during a checkpoint leaves no .tmp and loses no finished checkpoint."""
from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from codechat import CodechatError
from codechat.chat.session import ChatSession, Turn
from codechat.config import ModelConfig, SamplingConfig
from codechat.config.io import load_config
from codechat.policy import Sampler, load_policy
from codechat.rollout.collect import prompt_text
from codechat.io.rundir import checkpoint_dir, resolve_model, run_prompt_format
from codechat.tasks import Task
from codechat.train import train
from codechat.train.checkpoint import Checkpointer

ROOT = Path(__file__).resolve().parents[1]
BASE = ["data.train=builtin:toy", "data.sft=builtin:toy-sft", "sampling.max_new_tokens=8", "log.progress=false",
        "log.plot=false", "verifier.workers=1", "stages=[sft]", "sft.batch_size=2", "sft.warmup=0"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 4-step SFT run with a checkpoint after every 2 steps and an evaluation at each (best = one of them)."""
    d = tmp_path_factory.mktemp("run") / "r"
    train(load_config(None, BASE + [f"run_dir={d}", "sft.steps=4", "checkpoint.every=2", "checkpoint.keep_last=1",
                                    "data.eval=builtin:toy", "data.max_eval_tasks=2", "eval.every=2", "eval.n=1"]))
    return d


def test_links_name_the_final_and_best_checkpoints(run):
    state, _ = Checkpointer.load_state(Checkpointer(run).latest())
    assert (run / "final").is_symlink() and not os.path.isabs(os.readlink(run / "final"))
    assert (run / "final").resolve() == (Checkpointer(run).latest() / "model").resolve()
    assert (run / "best").resolve() == (run / "checkpoints" / state.best_checkpoint / "model").resolve()
    assert resolve_model(str(run)) == str(Checkpointer(run).latest() / "model")  # final by default
    assert resolve_model(str(run), "best") == str(run / "checkpoints" / state.best_checkpoint / "model")
    assert resolve_model("tiny") == "tiny"
    with pytest.raises(CodechatError, match="expected one of final, best"):
        resolve_model(str(run), "latest")


def test_model_path_accepts_a_run_and_its_links(run, tmp_path):
    for path in (run, run / "final", run / "best"):
        assert load_policy(ModelConfig(path=str(path), device="cpu")).model is not None
    copy = tmp_path / "copy"  # copied without symlinks: RUN/final still resolves from the checkpoints
    shutil.copytree(run, copy, symlinks=True, ignore=lambda d, names: [n for n in names if n in ("final", "best")])
    assert resolve_model(str(copy / "final")) == str(checkpoint_dir(copy, "final") / "model")


def test_best_needs_an_evaluation(tmp_path):
    d = tmp_path / "noeval"
    train(load_config(None, BASE + [f"run_dir={d}", "sft.steps=1"]))
    assert not (d / "best").exists()
    with pytest.raises(CodechatError, match="no best checkpoint"):
        resolve_model(str(d), "best")
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    with pytest.raises(CodechatError, match="no complete checkpoint"):
        resolve_model(str(tmp_path / "empty"))


def test_chat_prompts_are_the_training_prompts(run, tmp_path):
    """raw run: the chat prompt is exactly encode_prompt(prompt_text(task)); a chat=true run: the template."""
    q = "Write a function add(a, b)."
    assert run_prompt_format(run / "final") == "raw" and run_prompt_format("tiny") is None
    policy = load_policy(ModelConfig(path=str(run / "final"), device="cpu"))
    s = ChatSession(policy, prompt_format="raw", trained=True)
    assert s.prompt_ids([Turn(q)]) == policy.encode_prompt(prompt_text(Task("t", q, [])))
    chat_run = tmp_path / "chatrun"
    shutil.copytree(run, chat_run, symlinks=True)
    cfg = yaml.safe_load((chat_run / "config.yaml").read_text())
    cfg["model"]["chat"] = True
    (chat_run / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert run_prompt_format(chat_run / "final") == "chat"
    chat_policy = load_policy(ModelConfig(path=str(chat_run / "final"), device="cpu", chat=True))
    s = ChatSession(chat_policy, prompt_format="chat", trained=True)
    assert s.prompt_ids([Turn(q)]) == chat_policy.encode_prompt(prompt_text(Task("t", q, [])))


def test_model_sample_uses_the_training_format(run, capsys):
    from codechat.cli import main
    assert main(["model", "sample", str(run), "--prompt", "def add(a, b):", "--temperature", "0",
                 "--max-new-tokens", "6"]) == 0
    policy = load_policy(ModelConfig(path=str(run / "final"), device="cpu"))
    ref = Sampler(policy).sample([policy.encode_prompt(prompt_text(Task("t", "def add(a, b):", [])))], 1,
                                 SamplingConfig(temperature=0, max_new_tokens=6))
    assert capsys.readouterr().out.split("\n", 1)[1].rstrip("\n") == ref.texts[0]


def test_chat_in_a_terminal_speaks_the_training_format(run, tmp_path):
    """A pseudo-terminal session on the run: the banner names the format, and the greedy answer is what the
    sampler draws from the training prompt (not from the chat template the tiny tokenizer also has)."""
    pexpect = pytest.importorskip("pexpect")
    from codechat.policy.presets import cache_root

    q = "Write a function add(a, b)."
    policy = load_policy(ModelConfig(path=str(run / "final"), device="cpu"))
    draw = Sampler(policy).sample
    greedy = SamplingConfig(temperature=0, max_new_tokens=8)
    trained = draw([policy.encode_prompt(prompt_text(Task("t", q, [])))], 1, greedy).texts[0]
    templated = draw([ChatSession(policy, prompt_format="chat").prompt_ids([Turn(q)])], 1, greedy).texts[0]
    assert trained.strip() != templated.strip()  # the two formats are told apart by the answer
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "presets").symlink_to(cache_root() / "presets")
    env = {**os.environ, "CODECHAT_CACHE": str(cache), "TERM": "dumb", "PYTHONPATH": str(ROOT),
           "OMP_NUM_THREADS": "1"}
    child = pexpect.spawn(sys.executable, ["-m", "codechat", "chat", str(run), "--temperature", "0", "--device",
                                           "cpu", "--max-new-tokens", "8"], env=env, cwd=str(tmp_path),
                          encoding="utf-8", timeout=90, dimensions=(50, 200))
    try:
        child.expect(r"\(raw continuation, as trained\)")
        child.expect("you> ")
        child.sendline(q)
        child.expect("model> ")
        child.expect("you> ", timeout=60)
        said = child.before.replace("\r\n", "\n").replace("[max_new_tokens reached]", "")
        assert said.strip() == trained.strip(), (said, trained)
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_full_disk_during_a_checkpoint_keeps_the_finished_ones(run, tmp_path, monkeypatch):
    d = tmp_path / "r"
    shutil.copytree(run, d, symlinks=True)
    ck = Checkpointer(d)
    before = [p.name for p in ck.list()]
    state, _ = Checkpointer.load_state(ck.latest())
    state.global_step += 1
    policy = load_policy(ModelConfig(path=str(d / "final"), device="cpu"))

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr("torch.save", full)
    with pytest.raises(CodechatError, match="No space left on device.*earlier checkpoints are intact"):
        ck.save(policy, state)
    assert [p.name for p in ck.list()] == before
    assert not list((d / "checkpoints").glob("*.tmp")) and (d / "final").resolve().is_dir()
    assert json.loads((ck.latest() / "state.json").read_text())["global_step"] == state.global_step - 1
