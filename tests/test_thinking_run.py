"""Prefilled SFT examples, and a shortened "learning when not to think" run (docs/thinking.md; bench/thinking_run.py
at toy size): SFT on builtin:toy-think-sft-prefilled (every reference thinks first; prefilled copies teach
answering after a forced empty block), then GRPO with the nothink-bonus, balanced sampling and the importance
weight floor. Before = the RL start's reference eval (`ref_eval/...`), after = the stage-end eval, both
sampling freely: the no-think share must rise and the pass rate stay."""
import copy
import json

import pytest

from codechat import CodechatError
from codechat.config import ModelConfig, ThinkingConfig, VerifierConfig
from codechat.configio import load_config
from codechat.policy import load_policy
from codechat.rollout.collect import prompt_text
from codechat.rollout.thinking import BalancedSampler
from codechat.tasks import load_tasks
from codechat.train import train
from codechat.train.sft import prefilled_examples
from codechat.verifier.verify import Verifier

RUN = ["model.path=tiny", "data.sft=builtin:toy-think-sft-prefilled", "data.train=builtin:toy", "data.eval=builtin:toy",
       "sampling.max_new_tokens=56", "sft.steps=80", "sft.lr=3e-3", "sft.batch_size=16", "sft.warmup=5",
       "verifier.workers=2", "verifier.thinking.enabled=true", "verifier.thinking.forced_nothink_frac=0.5",
       "verifier.thinking.is_weight_floor=1.0", "verifier.thinking.free_frac=0.25", "rewards.nothink_ref_steps=3",
       "rewards.components={pass-all: 1.0, nothink-bonus: 0.3}",
       "rewards.nothink_margin=0.05", "rewards.nothink_lr=1.0", "algo.advantage=grpo", "algo.loss=ppo-clip",
       "rl.steps=10", "rl.lr=3e-4", "rl.prompts_per_step=5", "rl.group_size=8", "rl.zero_variance=skip",
       "eval.every=0", "eval.n=4", "eval.greedy=false", "log.progress=false", "log.plot=false",
       "log.audit=false", "checkpoint.every=0", "model.device=cpu"]


def test_prefilled_copies_answer_after_the_empty_block_and_it_is_context():
    tasks = load_tasks("builtin:toy-think-sft-prefilled")
    pre = [t for t in tasks if "prefill" in t.metadata]
    skips = [t for t in tasks if t.task_id.endswith("/skips")]  # one task in SKIP_EVERY skips by itself
    assert len(pre) == 10 and len(skips) == 1 and len(tasks) == 21 and len({t.task_id for t in tasks}) == 21
    assert skips[0].solution.startswith("<think></think>\n") and "prefill" not in skips[0].metadata
    with Verifier(VerifierConfig(workers=1, thinking=ThinkingConfig(enabled=True))) as v:
        vs = v.verify_many([(t, "".join(t.metadata["prefill"]) + t.solution) for t in pre])
        assert all(x.passed and not x.thought for x in vs)  # the forced block, then the reference: no-think, right
    policy = load_policy(ModelConfig(path="tiny"))
    enc = policy.tokenizer.encode
    ex = prefilled_examples(policy, tasks)
    assert len(ex) == len(tasks)
    prompt, answer = ex[tasks.index(pre[0])]
    forced = BalancedSampler(None, policy.tokenizer, ThinkingConfig(enabled=True, forced_nothink_frac=0.5))
    assert prompt == policy.encode_prompt(prompt_text(pre[0])) + forced.nothink_ids  # context, as RL forces it
    assert enc(skips[0].solution, add_special_tokens=False)[:len(forced.nothink_ids)] == forced.nothink_ids
    ref = enc(pre[0].solution, add_special_tokens=False)
    assert answer[:len(ref)] == ref  # the answer: the reference after the block
    assert prefilled_examples(policy, load_tasks("builtin:toy-think-sft")) is None  # no prefill: the text pairs
    bad = copy.deepcopy(pre[0])
    bad.metadata["prefill"] = "<think></think>"
    with pytest.raises(CodechatError, match="metadata.prefill must be a list"):
        prefilled_examples(policy, [bad])


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="measured: no-think 0.125 -> 0.475 but pass@1 0.875 -> 0.525 (forced think "
                   "samples push free samples off both paths; docs/thinking.md, The CPU run)")
def test_short_run_learns_to_skip_thinking_and_keeps_the_pass_rate(tmp_path):
    run = tmp_path / "r"
    train(load_config(None, RUN + ["stages=[sft,grpo]", f"run_dir={run}"]))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rl = [m for m in rows if m.get("stage") == "grpo"]
    before, after = rl[0], rl[-1]
    assert before["ref_eval/thinking/nothink_frac"] <= 0.1  # the SFT model thinks
    assert before["ref_eval/pass@1"] >= 0.5  # and solves the toy task
    assert after["eval/thinking/nothink_frac"] >= before["ref_eval/thinking/nothink_frac"] + 0.3
    assert after["eval/pass@1"] >= before["ref_eval/pass@1"] - 0.15
    assert after["eval/thinking/len"] < before["ref_eval/thinking/len"]
