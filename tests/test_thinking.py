"""Thinking blocks: the split grammar (fuzzed), code inside a block never runs, per-mode metrics, the nothink-bonus
reward and its Lagrange constraint, balanced sampling (its estimator: tests/test_thinking_weights.py), and a short
RL run with all of it on."""
import json
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from codechat import CodechatError
from codechat.config import RewardConfig, ThinkingConfig, VerifierConfig
from codechat.config.io import ConfigError, load_config
from codechat.policy import SampleBatch
from codechat.rollout.collect import Rollouts
from codechat.rollout.rewards import RewardContext, REWARDS
from codechat.rollout.thinking import BalancedSampler, ForcedBatch, NothinkConstraint, thinking_metrics
from codechat.tasks import Task
from codechat.train import train
from codechat.verifier.thinking import split_thinking
from codechat.verifier.verdict import Verdict
from codechat.verifier.verify import Verifier

ON = ThinkingConfig(enabled=True)
ADD = Task("add", "Write add.", ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"], "add")
GOOD = "```python\ndef add(a, b):\n    return a + b\n```\n"
WRONG = "```python\ndef add(a, b):\n    return a * b\n```\n"


# --- the split -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,thinking,answer", [
    ("<think>plan</think>code", "plan", "code"),
    ("<think></think>code", "", "code"),
    ("code", "", "code"),
    ("<think>plan, never closed code", "plan, never closed code", ""),
    ("plan from the prompt's open tag</think>code", "plan from the prompt's open tag", "code"),
    ("a<think>x</think>b<think>y</think>c", "x\ny", "abc"),
    ("<think></think>plan after a forced empty block</think>code", "\nplan after a forced empty block", "code"),
    ("a</think>b</think>c<think>x</think>d</think>e", "a</think>b\nx\nd", "ce"),
])
def test_split_grammar(text, thinking, answer):
    s = split_thinking(text, ON)
    assert (s.thinking, s.answer) == (thinking, answer)


def test_split_off_keeps_the_completion_and_custom_tags_work():
    assert split_thinking("<think>x</think>y", ThinkingConfig()).answer == "<think>x</think>y"
    s = split_thinking("[[plan]]go", ThinkingConfig(enabled=True, open="[[", close="]]"))
    assert (s.thinking, s.answer, s.thought) == ("plan", "go", True)
    assert not split_thinking("<think> \n</think>go", ON).thought  # a blank block is no-think


free = st.text(alphabet="ab<>/thinkc \n", max_size=30).filter(lambda t: "<think>" not in t and "</think>" not in t)


@settings(max_examples=300, deadline=None)
@given(free, free, free)
def test_fuzz_block_text_never_reaches_the_answer(a, t, b):
    s = split_thinking(a + "<think>" + t + "</think>" + b, ON)
    assert (s.thinking, s.answer) == (t, a + b)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="<>/thinkab\n", max_size=60))
def test_fuzz_any_text_answer_has_no_open_tag(text):
    s = split_thinking(text, ON)
    assert "<think>" not in s.answer and "</think>" not in s.answer and len(s.answer) <= len(text)


def test_bad_tags_are_refused():
    with pytest.raises(CodechatError, match="open and close"):
        split_thinking("x", ThinkingConfig(enabled=True, open="", close="</think>"))
    with pytest.raises(ConfigError, match="open and close"):
        load_config(None, ["verifier.thinking.enabled=true", "verifier.thinking.close=<think>"])


# --- the verifier ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=2, timeout_s=3, thinking=ON)) as v:
        yield v


def test_code_inside_a_think_block_is_never_the_answer(verifier):
    v = verifier.verify(ADD, "<think>" + GOOD + "</think>")
    assert (v.status, v.thought) == ("no_code", True)
    v = verifier.verify(ADD, "<think>" + GOOD + "</think>" + WRONG)  # the right code was only thought of
    assert (v.status, v.thought) == ("failed", True)
    v = verifier.verify(ADD, "<think>" + GOOD)  # cut off while thinking
    assert v.status == "no_code"


def test_verdicts_mark_the_mode_in_order(verifier):
    vs = verifier.verify_many([(ADD, "<think>" + WRONG + "</think>" + GOOD), (ADD, "<think></think>" + GOOD),
                               (ADD, GOOD)])
    assert [(v.passed, v.thought) for v in vs] == [(True, True), (True, False), (True, False)]


def test_without_thinking_the_block_is_code_text():
    with Verifier(VerifierConfig(workers=1, timeout_s=3)) as v:  # off: the fenced code inside is extracted
        assert v.verify(ADD, "<think>" + GOOD + "</think>").passed


# --- metrics and the reward ------------------------------------------------------------------------------------
def _rollouts(texts, passed, thought, lens, rewards=None, bonus=None):
    n = len(texts)
    batch = SampleBatch(torch.zeros(n, dtype=torch.long), torch.zeros(n, 4, dtype=torch.long), torch.ones(n, 4),
                        torch.zeros(n, 4), ["stop"] * n, texts, torch.tensor(lens))
    verdicts = [Verdict("passed" if p else "failed", p, float(p), thought=t) for p, t in zip(passed, thought)]
    r = torch.tensor(rewards if rewards is not None else [float(p) for p in passed])
    comps = {} if bonus is None else {"pass-all": torch.tensor([float(p) for p in passed]),
                                      "nothink-bonus": torch.tensor(bonus)}
    return Rollouts([ADD], [[1]], batch, verdicts, r, comps)


def test_thinking_metrics_per_mode():
    r = _rollouts(["<think>abcd</think>x", "<think>ab</think>y", "z", "<think></think>w"],
                  [True, False, True, False], [True, True, False, False], [10, 6, 2, 4])
    m = thinking_metrics(r, ON, len)  # count_tokens = characters here
    assert m["thinking/nothink_frac"] == 0.5
    assert (m["thinking/pass_rate/think"], m["thinking/pass_rate/nothink"]) == (0.5, 0.5)
    assert (m["thinking/len/think"], m["thinking/len/nothink"]) == (8, 3)
    assert m["thinking/tokens_mean"] == (4 + 2) / 4


def test_nothink_bonus_rewards_skipping_thinking():
    f = REWARDS["nothink-bonus"]
    assert f(ADD, "", Verdict("passed", True, 1.0, thought=False), RewardContext()) == 1.0
    assert f(ADD, "", Verdict("passed", True, 1.0, thought=True), RewardContext()) == 0.0
    with pytest.raises(ConfigError, match="nothink-bonus needs verifier.thinking"):
        load_config(None, ["rewards.components={pass-all: 1.0, nothink-bonus: 0.5}"])


def test_lagrange_multiplier_shrinks_the_bonus_only_when_accuracy_drops():
    c = NothinkConstraint(RewardConfig(nothink_margin=0.1, nothink_lr=2.0))
    bonus = [0.5, 0.0, 0.5, 0.0]

    def step(passed):
        r = _rollouts(["x"] * 4, passed, [False, True, False, True], [1] * 4,
                      rewards=[p + b for p, b in zip(passed, bonus)], bonus=list(bonus))
        m = c.apply(r)
        return r, m

    r, m = step([True, True, False, False])  # step 0: the reference pass rate 0.5
    assert m["thinking/ref_pass"] == 0.5 and m["thinking/lambda"] == 0.0 and torch.allclose(r.rewards[:1], torch.tensor([1.5]))
    _, m = step([True, False, False, False])  # 0.25 < 0.5 - 0.1: violated by 0.15 -> lambda 0.3
    assert m["thinking/lambda"] == pytest.approx(0.3)
    r, m = step([True, True, True, False])  # the bonus is now scaled by 1 / 1.3 ...
    assert m["thinking/bonus_scale"] == pytest.approx(1 / 1.3)
    assert r.rewards[0].item() == pytest.approx(1 + 0.5 / 1.3) and r.components["nothink-bonus"][0].item() == pytest.approx(0.5 / 1.3)
    assert m["thinking/lambda"] == pytest.approx(0.0)  # ... and accuracy back above the bound: lambda decays to 0
    fixed = NothinkConstraint(RewardConfig(nothink_lr=0.0))  # lr 0: the bonus is never scaled
    for p in ([True] * 4, [False] * 4):
        r = _rollouts(["x"] * 4, p, [False] * 4, [1] * 4, rewards=[1.0] * 4, bonus=[1.0] * 4)
        assert fixed.apply(r)["thinking/bonus_scale"] == 1.0
    c2 = NothinkConstraint(RewardConfig())
    c2.load_state_dict(c.state_dict())
    assert (c2.lam, c2.ref_pass) == (c.lam, c.ref_pass)


# --- balanced sampling -----------------------------------------------------------------------------------------
class FakeTok:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(ch) for ch in text]}


class FakeEngine:
    samples_training_weights = True

    def __init__(self):
        self.calls = []

    def sample(self, prompts, n, cfg):
        self.calls.append((prompts, n))
        N = len(prompts) * n
        return SampleBatch(torch.arange(len(prompts)).repeat_interleave(n), torch.full((N, 2), 7),
                           torch.ones(N, 2), torch.full((N, 2), -0.5), ["stop"] * N, ["ok"] * N,
                           torch.full((N,), 2))


def test_balanced_sampler_forces_the_prefixes_in_each_group():
    eng = FakeEngine()
    s = BalancedSampler(eng, FakeTok(), ThinkingConfig(enabled=True, open="<a>", close="</a>", forced_nothink_frac=0.25))
    b = s.sample([[1, 2], [3]], 4, None)  # G=4: 1 forced no-think + 3 forced think per group
    assert isinstance(b, ForcedBatch) and [n for _, n in eng.calls] == [1, 3]
    assert eng.calls[0][0][1] == [3] + [ord(c) for c in "<a></a>"]  # the prefix continues the prompt
    assert b.prompt_index.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert b.forced_nothink.tolist() == [True, False, False, False] * 2
    assert b.texts[0] == "<a></a>ok" and b.texts[1] == "<a>ok"
    assert b.prefix_len.tolist() == [7, 3, 3, 3] * 2 and b.n_tokens.tolist() == [9, 5, 5, 5] * 2
    assert b.tokens[1, :5].tolist() == [ord(c) for c in "<a>"] + [7, 7] and b.mask[1].sum() == 5 - 3
    assert b.mask[0, :3].sum() == 0 and b.mask[0].sum() == 9 - 3  # the shared `<a>`: not learned
    assert b.logprobs[0, 0].item() == pytest.approx(math.log(0.25)) and b.logprobs[1, 0].item() == pytest.approx(math.log(0.75))
    assert b.logprobs[1, 1:3].tolist() == [0.0, 0.0] and b.logprobs[1, 3].item() == -0.5
    with pytest.raises(CodechatError, match="forced_nothink_frac"):
        BalancedSampler(eng, FakeTok(), ThinkingConfig(enabled=True, forced_nothink_frac=1.0))


def test_forced_sampling_is_refused_with_resample():
    with pytest.raises(ConfigError, match="resample"):
        load_config(None, ["verifier.thinking.enabled=true", "verifier.thinking.forced_nothink_frac=0.5",
                           "rl.zero_variance=resample"])
    with pytest.raises(ConfigError, match="needs verifier.thinking.enabled"):
        load_config(None, ["verifier.thinking.forced_nothink_frac=0.5"])


# --- SFT data with thinking traces ----------------------------------------------------------------------------
@pytest.mark.parametrize("name,base", [("builtin:toy-think-sft", "builtin:toy"),
                                       ("builtin:synthetic-sft-think", "builtin:synthetic-sft-clean")])
def test_think_sft_data_always_thinks_and_still_passes(verifier, name, base):
    from codechat.tasks.builtin import load_builtin
    tasks, plain = load_builtin(name), load_builtin(base)
    assert len(tasks) == len(plain) and all(t.metadata["source"] == name for t in tasks)
    for t, p in zip(tasks, plain):
        s = split_thinking(t.solution, ON)
        assert s.thought and s.answer.strip() == p.solution.strip()
    vs = verifier.verify_many([(t, t.solution) for t in tasks[:8]])
    assert all(v.passed and v.thought for v in vs)


# --- a short RL run --------------------------------------------------------------------------------------------
def test_rl_run_logs_modes_and_weighs_forced_samples(tmp_path):
    run = tmp_path / "r"
    train(load_config(None, ["data.train=builtin:toy", "sampling.max_new_tokens=12", "log.progress=false",
                             "log.plot=false", "verifier.workers=2", "rl.prompts_per_step=2", "rl.group_size=4",
                             "checkpoint.every=0", "rl.steps=2", f"run_dir={run}", "verifier.thinking.enabled=true",
                             "verifier.thinking.forced_nothink_frac=0.5", "rewards.nothink_lr=1.0",
                             "verifier.thinking.free_frac=0.25", "rewards.nothink_ref_steps=2",
                             "rewards.components={pass-all: 1.0, nothink-bonus: 0.2}", "data.eval=builtin:toy",
                             "data.max_eval_tasks=4", "eval.n=2", "eval.greedy=false"]))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    assert len(rows) == 2
    # the policy at the RL start is evaluated once (the difficulty reference); the stage-end eval by mode and bucket
    assert 0 <= rows[0]["ref_eval/thinking/nothink_frac"] <= 1 and "ref_eval/thinking/nothink_frac" not in rows[1]
    assert 0 <= rows[1]["eval/thinking/nothink_frac"] <= 1 and rows[1]["eval/thinking/len"] > 0
    assert sum(v for k, v in rows[1].items() if k.startswith("eval/difficulty/") and k.endswith("/tasks")) == 4
    assert 0 <= rows[1]["eval/thinking/malformed_frac"] <= 1  # free samples opening without the tag
    for m in rows:  # G=4: 2 forced to the empty block, 1 to the open tag, 1 free
        assert m["thinking/nothink_frac"] >= 0.5
        assert 0 <= m["thinking/malformed_frac"] <= m["thinking/offpath_frac"] + 1e-9
        assert m["thinking/lambda"] == 0.0  # the reference is still being averaged (nothink_ref_steps=2)
        assert 0 <= m["thinking/bonus_dropped_malformed"] <= 1
        assert m["thinking/is_weight_mean"] > 0 and math.isfinite(m["loss"])
        assert "thinking/lambda" in m and 0 < m["thinking/policy_nothink_p"] < 1
    recs = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert sum(r["completion"].startswith("<think></think>") for r in recs) >= len(recs) // 2


def test_shipped_thinking_config_loads_with_every_piece_on():
    cfg = load_config("configs/thinking.yaml")
    t = cfg.verifier.thinking
    assert t.enabled and t.forced_nothink_frac == 0.5 and cfg.rewards.components["nothink-bonus"] == 0.3
    assert cfg.data.sft == "builtin:synthetic-sft-think-prefilled" and cfg.rewards.nothink_lr == 1.0
    assert t.is_weight_floor == 1.0 and t.free_frac == 0.25 and cfg.rewards.nothink_ref_steps == 4
    assert t.opening_loss == 1.0 and cfg.rewards.malformed_opening_penalty == 0.3  # the shipped config of docs/thinking.md
