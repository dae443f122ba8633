"""The pipeline on Qwen-shaped models (Qwen's vocabulary and ChatML, random weights; policy/qwen.py): SFT and GRPO
through the chat template, agent episodes with tool calls, the thinking objective with single-token tags, LoRA,
export -> transformers, `codechat chat`. Small sizes: 2 layers x 64 wide, the full 151,936-token vocabulary."""
from __future__ import annotations

import json

import pytest
import torch

from codechat.config import AgentConfig, ModelConfig, SamplingConfig
from codechat.configio import load_config
from codechat.policy import SampleBatch, Sampler, load_policy
from codechat.rollout.agents import ModelAgent
from codechat.rollout.episode import EpisodeRunner
from codechat.rollout.tools import format_call
from codechat.tasks.repo import RepoLimits
from codechat.tasks.repo_family import generate_repo_tasks
from codechat.train import train
from codechat.train.checkpoint import Checkpointer
from codechat.verifier.repo import RepoJudge
from qwen_helpers import qwen_dir, qwen_policy

BASE = ["data.train=builtin:toy", "data.sft=builtin:toy-sft", "sampling.max_new_tokens=8", "log.progress=false",
        "log.plot=false", "verifier.workers=1", "rl.prompts_per_step=2", "rl.group_size=2", "checkpoint.every=0",
        "model.chat=true", "model.device=cpu"]


def weights(model_dir):
    from safetensors.torch import load_file
    return load_file(str(model_dir / "model.safetensors"))


def run(tmp_path, family, stage, extra=()):
    out = tmp_path / stage
    model = qwen_dir(family)
    train(load_config(None, BASE + [f"run_dir={out}", f"stages=[{stage}]", f"model.path={model}", *extra]))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if r.get("loss") is not None]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    before, after = weights(model), weights(Checkpointer(out).latest() / "model")
    assert any(not torch.equal(before[k], after[k]) for k in before), f"{stage} did not change the weights"
    return out, rows


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2.5", "qwen3"])
def test_sft_and_grpo_through_the_chat_template(tmp_path, family):
    run(tmp_path, family, "sft", ["sft.steps=2", "sft.batch_size=2"])
    # An untrained model passes nothing: a length reward and a common stop string give the groups variance.
    out, _ = run(tmp_path, family, "grpo", ["rl.steps=2", "rl.lr=1e-3", "algo.kl_beta=0.04", "rl.group_size=4",
                                            "sampling.stop=[e]", "rewards.components={pass-all: 1.0, length: 1.0}",
                                            "rewards.length_budget=0", "rewards.length_per_token=0.1"])
    saved = load_policy(ModelConfig(path=str(Checkpointer(out).latest() / "model"), device="cpu"))
    assert len(saved.tokenizer) == len(qwen_policy(family).tokenizer)  # the checkpoint keeps Qwen's tokenizer


@pytest.mark.slow
def test_thinking_objective_with_single_token_tags(tmp_path):
    tok = qwen_policy("qwen3").tokenizer
    assert len(tok("<think></think>", add_special_tokens=False)["input_ids"]) == 2  # one token per tag
    run(tmp_path, "qwen3", "grpo", [
        "rl.steps=1", "rl.lr=1e-3", "rl.group_size=4", "verifier.thinking.enabled=true",
        "verifier.thinking.forced_nothink_frac=0.5", "verifier.thinking.free_frac=0.25",
        "rewards.components={pass-all: 1.0, nothink-bonus: 0.3}", "rewards.malformed_opening_penalty=0.3"])


def test_lora_wraps_qwens_projections_not_the_tied_head():
    pytest.importorskip("peft")
    policy = qwen_policy("qwen3", lora_r=4)
    wrapped = {n.split(".")[-1] for n, m in policy.model.named_modules() if hasattr(m, "lora_A")}
    assert wrapped == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    trainable = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


class ToolCallSampler:
    """Writes one fixed turn (a run_tests call, then <|im_end|>) for every context; the real sampler's shape."""

    def __init__(self, policy):
        self.turn = policy.tokenizer(format_call("run_tests") + "<|im_end|>", add_special_tokens=False)["input_ids"]
        self.policy = policy

    def release_kv(self):
        pass

    def sample(self, prompts, n, cfg, keys=None, max_new=None):
        k = len(prompts)
        toks = torch.tensor([self.turn] * k)  # (k, T)
        return SampleBatch(torch.arange(k), toks, torch.ones(toks.shape), torch.zeros(toks.shape), ["stop"] * k,
                           [self.policy.decode(self.turn)] * k, torch.full((k,), len(self.turn)))


def test_agent_episode_in_chatml_with_tool_calls():
    policy = qwen_policy("qwen3", chat=True)
    tok = policy.tokenizer
    agent = ModelAgent(policy, SamplingConfig(max_new_tokens=64), sampler=ToolCallSampler(policy))
    task = generate_repo_tasks("train", 1, seed=1)[0]
    task.limits = RepoLimits(max_turns=2, max_tokens=100_000)
    with RepoJudge() as judge:
        (r,) = EpisodeRunner(agent, judge, AgentConfig(turn_tokens=64)).run([(task, 0)], seed=0)
    tr = r.transcript
    prompt = tok.decode(tr.tokens[:tr.prompt_len])
    assert prompt.startswith("<|im_start|>system\n") and "# Tools" in prompt and '"name": "run_tests"' in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    assert r.tool_calls == 2 and r.tests_runs == 2  # both turns' calls parsed and run
    turn = tr.turns[0]
    env = tr.tokens[turn.model_end:turn.env_end]
    assert env[:4] == tok("\n<|im_start|>user\n", add_special_tokens=False)["input_ids"]
    assert 151665 in env and 151666 in env  # <tool_response> and </tool_response>: single tokens in qwen3
    assert tok.decode(env).endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_export_loads_in_transformers_with_the_same_greedy_tokens(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from codechat.cli import main

    assert main(["model", "export", str(qwen_dir("qwen3")), "--out", str(tmp_path / "x")]) == 0
    policy = qwen_policy("qwen3", chat=True)
    prompt = policy.encode_prompt("Write add(a, b).")
    ours = Sampler(policy).sample([prompt], 1, SamplingConfig(temperature=0.0, max_new_tokens=8))
    tok = AutoTokenizer.from_pretrained(tmp_path / "x", local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "x", local_files_only=True)
    ids = tok.apply_chat_template([{"role": "user", "content": "Write add(a, b)."}], add_generation_prompt=True,
                                  tokenize=True, return_dict=True)["input_ids"]
    assert list(ids) == prompt
    out = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=8, min_new_tokens=8)[0, len(ids):]
    n = int(ours.n_tokens[0])
    assert out[:n].tolist() == ours.tokens[0, :n].tolist()


def test_chat_one_turn_in_chatml(capsys):
    from codechat.chat.session import ChatSession, Turn
    from codechat.cli import main

    path = str(qwen_dir("qwen3"))
    rc = main(["chat", path, "--once", "Write add(a, b).", "--max-new-tokens", "6", "--seed", "3",
               "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0
    policy = load_policy(ModelConfig(path=path, device="cpu", chat=True))
    prompt = ChatSession(policy).prompt_ids([Turn("Write add(a, b).")])
    assert policy.tokenizer.decode(prompt).endswith("<|im_start|>user\nWrite add(a, b).<|im_end|>\n"
                                                    "<|im_start|>assistant\n")
    ref = Sampler(policy).sample([prompt], 1, SamplingConfig(temperature=0.7, top_p=0.95, max_new_tokens=6, seed=3))
    assert out == ref.texts[0] + "\n"
