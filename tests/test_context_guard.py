"""The context guard: data.max_prompt_tokens drops over-long tasks with a count, and sampling stops at the
model's context (max_position_embeddings) instead of running past it."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from codechat import CodechatError
from codechat.config import ModelConfig, SamplingConfig
from codechat.config.io import load_config
from codechat.policy import Sampler, load_policy
from codechat.policy.context import context_length, new_token_budget
from codechat.tasks import Task
from codechat.train.context import drop_long, prompt_limit


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return load_policy(ModelConfig(path="tiny", device="cpu"))


def test_context_length_of_the_tiny_preset(policy):
    assert context_length(policy.model) == 1024


def test_default_limit_leaves_room_for_the_answer(policy):
    cfg = load_config(None, ["sampling.max_new_tokens=100"])
    assert prompt_limit(cfg, policy) == 1024 - 100
    assert prompt_limit(load_config(None, ["data.max_prompt_tokens=50"]), policy) == 50
    with pytest.raises(CodechatError, match=r"data.max_prompt_tokens: 5000 leaves no room.*expected 1..1023"):
        prompt_limit(load_config(None, ["data.max_prompt_tokens=5000"]), policy)
    with pytest.raises(CodechatError, match="sampling.max_new_tokens: 2000 fills the model's context"):
        prompt_limit(load_config(None, ["sampling.max_new_tokens=2000"]), policy)


def test_long_tasks_are_dropped_with_a_count(policy, capsys):
    tasks = [Task("short", "def f():", ["assert True"]), Task("long", "x = 1\n" * 400, ["assert True"])]
    kept = drop_long(tasks, policy, 100, "train")
    assert [t.task_id for t in kept] == ["short"]
    assert "dropped 1 of 2 train tasks with prompts over 100 tokens" in capsys.readouterr().err
    with pytest.raises(CodechatError, match="every train task is longer than 1 prompt tokens"):
        drop_long(tasks, policy, 1, "train")


def test_sft_examples_must_fit_prompt_and_solution(policy):
    t = Task("s", "def f():", ["assert True"], metadata={"solution": "".join(f"    x{i} = {i * 7919}\n" for i in range(400))})
    assert drop_long([t, Task("ok", "def g():", [], metadata={"solution": "    return 2\n"})], policy, 900, "sft",
                     with_solution=True)[0].task_id == "ok"


def test_sampling_stops_at_the_context(policy):
    prompt = [5] * 1020  # 4 positions left of 1024
    b = Sampler(policy).sample([prompt], 2, SamplingConfig(max_new_tokens=50, temperature=1.0, seed=1))
    assert int(b.n_tokens.max()) <= 4 and b.tokens.shape[1] <= 4
    with pytest.raises(CodechatError, match="fills the model's context"):
        Sampler(policy).sample([[5] * 1024], 1, SamplingConfig(max_new_tokens=5))


@settings(max_examples=200, deadline=None)
@given(prompt=st.integers(0, 5000), new=st.integers(1, 5000), ctx=st.one_of(st.none(), st.integers(1, 4096)))
def test_budget_never_passes_the_context(prompt, new, ctx):
    if ctx is not None and prompt >= ctx:
        with pytest.raises(CodechatError):
            new_token_budget(prompt, new, ctx)
        return
    b = new_token_budget(prompt, new, ctx)
    assert 1 <= b <= new and (ctx is None or prompt + b <= ctx)


def test_a_run_drops_long_train_tasks(tmp_path, capsys):
    import json
    from codechat.train import train
    f = tmp_path / "tasks.jsonl"
    f.write_text("".join(json.dumps({"task_id": f"t{i}", "prompt": "def f():\n" * (1 + 200 * (i % 2)),
                                     "tests": ["assert True"], "solution": "    return 1\n"}) + "\n" for i in range(4)))
    train(load_config(None, [f"data.train={f}", "stages=[sft]", "sft.steps=1", "sft.batch_size=2", "log.plot=false",
                             "log.progress=false", "data.max_prompt_tokens=300", f"run_dir={tmp_path / 'r'}"]))
    assert "dropped 2 of 4 train tasks with prompts over 300 tokens" in capsys.readouterr().err
