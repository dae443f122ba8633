"""Rewards for other trainers: TRL's GRPOTrainer (CodechatReward) and verl's compute_score, in-process and
against a running `codechat serve`; a short GRPOTrainer run on the tiny preset with codechat's reward."""
from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from codechat import CodechatError
from codechat.integrations.trl import CodechatReward
from codechat.integrations.verl import compute_score
from codechat.policy.presets import build_preset
from serve_helpers import served

ADD = {"task_id": "add", "prompt": "def add(a, b):", "entry_point": "add",
       "tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]}
DOUBLE = {"inputs": ["2\n", "5\n"], "outputs": ["4\n", "10\n"]}
COMPLETIONS = ["```python\ndef add(a, b):\n    return a + b\n```",
               [{"role": "assistant", "content": "def add(a, b):\n    return a * b"}],  # 1 of 2 tests
               "I cannot do that.", "def add(a, b):\n    return a - b"]


@pytest.fixture(scope="module")
def local_reward():
    r = CodechatReward(column="task", reward="pass-fraction")
    yield r
    r.close()


def test_trl_reward_scores_each_completion_from_the_column(local_reward):
    cells = [ADD, json.dumps(ADD), ADD, ADD["tests"]]  # a dict, its JSON text, a plain list of asserts
    assert local_reward(prompts=["p"] * 4, completions=COMPLETIONS, task=cells) == [1.0, 0.5, 0.0, 0.0]
    assert [v.status for v in local_reward.last] == ["passed", "failed", "no_code", "failed"]


def test_trl_reward_pass_is_all_or_nothing():
    r = CodechatReward(column="task")
    try:
        assert r(prompts=["p"] * 2, completions=COMPLETIONS[:2], task=[ADD, ADD]) == [1.0, 0.0]
        assert r.__name__ == "codechat_pass"
    finally:
        r.close()


def test_trl_reward_names_a_missing_column(local_reward):
    with pytest.raises(CodechatError, match="no column 'task'.*tests"):
        local_reward(prompts=["p"], completions=["x"], tests=[ADD["tests"]])
    with pytest.raises(CodechatError, match="unknown reward"):
        CodechatReward(reward="accuracy")


def test_verl_compute_score_on_stdio_ground_truth():
    assert compute_score("apps", "print(int(input()) * 2)", DOUBLE)["score"] == 1.0
    out = compute_score("apps", "print(4)", json.dumps(DOUBLE), reward="pass-fraction")
    assert out["score"] == 0.5 and out["acc"] is False and out["tests_total"] == 2
    assert compute_score("apps", "import sys\nsys.exit(1)", DOUBLE)["status"] == "error"
    assert compute_score("mbpp", COMPLETIONS[0], ADD)["acc"] is True


def test_rewards_against_the_server_equal_in_process(local_reward):
    cells = [ADD, ADD, ADD, ADD["tests"]]
    want = local_reward(prompts=["p"] * 4, completions=COMPLETIONS, task=cells)
    with served("--workers", "1", "--token", "t0k") as (url, _):
        remote = CodechatReward(column="task", reward="pass-fraction", url=url, token="t0k")
        assert remote(prompts=["p"] * 4, completions=COMPLETIONS, task=cells) == want
        assert [v.status for v in remote.last] == [v.status for v in local_reward.last]
        assert compute_score("apps", "print(4)", DOUBLE, url=url, token="t0k", reward="pass-fraction")["score"] == 0.5
        with pytest.raises(CodechatError, match="401"):
            CodechatReward(column="task", url=url, token="bad")(prompts=["p"], completions=["x"], task=[ADD])


@pytest.mark.slow
def test_grpo_trainer_steps_with_codechat_reward(tmp_path):
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    model_dir = build_preset("tiny", tmp_path / "tiny")
    ds = datasets.Dataset.from_list([{"prompt": "def add(a, b):", "task": json.dumps(ADD)}] * 4)
    reward = CodechatReward(column="task", reward="pass-fraction")
    calls = []

    def counted(**kw):
        out = reward(**kw)
        calls.append(len(out))
        return out
    counted.__name__ = reward.__name__
    cfg = trl.GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=2,
                         num_generations=2, max_completion_length=8, learning_rate=1e-4, use_cpu=True,
                         report_to="none", logging_steps=1, save_strategy="no", bf16=False, seed=0,
                         disable_tqdm=True, dataloader_num_workers=0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    trainer = trl.GRPOTrainer(model=model, reward_funcs=[counted], args=cfg, train_dataset=ds,
                              processing_class=AutoTokenizer.from_pretrained(model_dir))
    try:
        trainer.train()
    finally:
        reward.close()
    assert calls == [2, 2]  # one call per step, one reward per completion
    logged = [h for h in trainer.state.log_history if f"rewards/{reward.__name__}/mean" in h]
    assert len(logged) == 2 and all(0.0 <= h[f"rewards/{reward.__name__}/mean"] <= 1.0 for h in logged)
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in trainer.state.log_history if "loss" in h)
