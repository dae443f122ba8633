"""The shortened "learning when not to think" run (the issue's last line), and the SFT sets it needs.

The run is `codechat train` with configs/thinking.yaml's stages and objective (SFT on thinking traces, then GRPO
with nothink-bonus under the Lagrange constraint, balanced sampling with its importance weights, the malformed
penalty and the opening-tag loss), at the sizes of bench/thinking_run.py's SHORT (= `--short`): a 0.34M-parameter
model (the tiny preset's tokenizer, 64 wide, 2 layers), SFT 100 steps on builtin:toy-think-sft-cold (ten
phrasings of `f(x) = x + 1`, a cold start: the SFT model skips thinking on ~2-3% of free samples), GRPO 16 steps,
and the eval set = the training set (the mechanism, not generalisation). It asserts that the SFT model thinks at
a high pass rate, and that after RL the no-think share is > 50%, the pass rate is within 8 points of the SFT
model's (320 samples each at T = 1: a standard error of ~1.7 points on the change at p ~ 0.95), responses are
>= 25% shorter and malformed openings stay rare. docs/thinking.md ("The shortened run in the suite") has its
numbers over 3 seeds and which broken objectives it catches (no bonus, no balanced sampling, no opening-tag loss)
and which not (dropped importance weights: tests/test_thinking_weights.py catches those).
"""
import copy
import importlib.util
from pathlib import Path

import pytest

from codechat import CodechatError
from codechat.config import ModelConfig, ThinkingConfig, VerifierConfig
from codechat.config.io import load_config
from codechat.policy import load_policy
from codechat.rollout.collect import prompt_text
from codechat.rollout.thinking import BalancedSampler
from codechat.tasks import load_tasks
from codechat.tasks.thinking_sft import COLD_COPIES
from codechat.train import train
from codechat.train.sft import prefilled_examples
from codechat.verifier.verify import Verifier

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "thinking.yaml"


def load_bench():
    spec = importlib.util.spec_from_file_location("thinking_run", ROOT / "bench" / "thinking_run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BENCH = load_bench()  # SHORT, SMALL and the before/after reader: the suite's run is the bench's --short


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    return BENCH.small_model(tmp_path_factory.mktemp("small") / "model")


def short_run(run_dir: Path, model: Path, seed: int = 0) -> dict[str, float]:
    """The short run in this process (= bench/thinking_run.py --short) -> {name_before, name_after}: before =
    `ref_eval/` (the SFT model, evaluated by the RL stage before its first update), after = the last `eval/`."""
    train(load_config(CONFIG, [*BENCH.COMMON, *BENCH.SHORT, f"model.path={model}", f"run_dir={run_dir}",
                               f"seed={seed}"]))
    return BENCH.before_after(run_dir)


def check_short_run(r: dict[str, float]) -> None:
    assert r["nothink_before"] < 0.2 and r["pass1_before"] > 0.85, r  # the SFT model thinks, and is right
    assert r["nothink_after"] > 0.5, r  # it learned to skip thinking
    assert r["pass1_after"] > r["pass1_before"] - 0.08, r  # 320 samples each: ~4.7 standard errors of the change
    assert r["tokens_after"] < 0.75 * r["tokens_before"], r
    assert r["malformed_after"] < 0.15, r  # by clean empty blocks, not mangled tags (seeds 0-2: 4-8%)


@pytest.mark.slow  # ~40 s of CPU (model build + SFT + RL): the shortened run, a real one
@pytest.mark.filterwarnings("ignore:train/eval overlap")  # evaluated on its training tasks, on purpose
def test_short_run_skips_thinking_and_keeps_the_pass_rate(tmp_path, small_model):
    check_short_run(short_run(tmp_path / "run", small_model))


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


def test_the_cold_set_repeats_each_thinking_reference():
    cold, pre = load_tasks("builtin:toy-think-sft-cold"), load_tasks("builtin:toy-think-sft-prefilled")
    by_id = {t.task_id: t for t in pre}
    count = {tid: sum(c.task_id.split("#")[0] == tid for c in cold) for tid in by_id}
    thinking = {t.task_id for t in pre if t.solution.startswith("<think>Plan")}
    assert len(thinking) == 10 and all(count[t] == (COLD_COPIES if t in thinking else 1) for t in by_id)
    assert len(cold) == len(pre) + (COLD_COPIES - 1) * 10 and len({c.task_id for c in cold}) == len(cold)
    for c in cold:
        t = by_id[c.task_id.split("#")[0]]
        assert (c.prompt, c.solution, c.metadata.get("prefill")) == (t.prompt, t.solution, t.metadata.get("prefill"))
