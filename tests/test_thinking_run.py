"""Prefilled SFT examples: the copies that teach the tiny model to answer after a forced empty block (as the balanced
sampler forces it), and that the block is context, not learned.

The shortened "learning when not to think" run that was here (toy SFT 80 steps, then 10 RL steps) takes ~9 min on
the shared 2-core machine, thirty times this file's budget, so it lives in the bench (`bench/thinking_run.py --toy`,
measured in docs/thinking.md). The mechanism it demonstrated is tested at the token level, fast and exactly, in
tests/test_thinking_weights.py: the stratified weights against an enumeration, and the re-centred advantages that
leave the openings no sample chose alone (the drift the run showed); the RL loop's wiring of it in
tests/test_thinking.py::test_rl_run_logs_modes_and_weighs_forced_samples; the opening-tag loss that keeps the
malformed openings down, against a slow reference and in a 3-step RL run, in tests/test_thinking_opening.py
(docs/thinking.md, "The shortened run in the suite", says why no robust short run fits the suite)."""
import copy

import pytest

from codechat import CodechatError
from codechat.config import ModelConfig, ThinkingConfig, VerifierConfig
from codechat.policy import load_policy
from codechat.rollout.collect import prompt_text
from codechat.rollout.thinking import BalancedSampler
from codechat.tasks import load_tasks
from codechat.train.sft import prefilled_examples
from codechat.verifier.verify import Verifier

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
