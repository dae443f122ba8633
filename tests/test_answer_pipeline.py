"""Answer tasks through the rest of codechat: the `answer-match` and `format` rewards, the Verifier's dispatch,
`codechat verify` and `codechat eval` on math files, and a mixed code + math GRPO run logging pass rate per kind."""
import json

import pytest

from codechat.cli import main
from codechat.config import AnswerConfig, RewardConfig, VerifierConfig
from codechat.rollout.rewards import REWARDS, RewardContext, compose_rewards
from codechat.tasks import load_tasks
from codechat.tasks.answer import answer_task
from codechat.verifier.verdict import Verdict
from codechat.verifier.verify import Verifier

MATH = answer_task("half", "Half of one?", "\\frac12")
CODE = load_tasks("builtin:toy")[0]
PASS = Verdict("passed", True, 1.0, 1, 1)
FAIL = Verdict("failed", False, 0.0, 0, 1)
CTX = RewardContext(n_tokens=10, max_new_tokens=100)


def test_answer_match_scores_answer_tasks_only():
    assert REWARDS["answer-match"](MATH, "\\boxed{0.5}", PASS, CTX) == 1.0
    assert REWARDS["answer-match"](MATH, "\\boxed{2}", FAIL, CTX) == 0.0
    assert REWARDS["answer-match"](CODE, "def f(x): return x + 1", PASS, CTX) == 0.0
    total, parts = compose_rewards({"pass-all": 1.0, "answer-match": 0.5}, MATH, "\\boxed{0.5}", PASS, CTX)
    assert total == 1.5 and parts == {"pass-all": 1.0, "answer-match": 0.5}


@pytest.mark.parametrize("completion, want", [
    ("Half of one is \\boxed{\\frac{1}{2}}.", 1.0), ("$\\boxed{0.5}$", 1.0), ("It is 0.5.", 0.0),
    ("\\boxed{1} or \\boxed{0.5}", 0.0), ("\\boxed{} ", 0.0), ("\\boxed{0.5} and more words after", 0.0)])
def test_format_learns_the_boxed_convention_on_answer_tasks(completion, want):
    assert REWARDS["format"](MATH, completion, FAIL, RewardContext(cfg=RewardConfig())) == want


def test_format_of_code_tasks_is_unchanged():
    assert REWARDS["format"](CODE, "```python\ndef f(x):\n    return x + 1\n```", FAIL, CTX) == 1.0
    assert REWARDS["format"](CODE, "\\boxed{1}", FAIL, CTX) == 0.0


def test_verifier_judges_mixed_batches_in_order():
    with Verifier(VerifierConfig(workers=1)) as v:
        out = v.verify_many([(MATH, "\\boxed{0.5}"), (CODE, "def f(x):\n    return x + 1\n"), (MATH, "1/3"),
                             (MATH, "no idea"), (CODE, "def f(x):\n    return x\n")])
    assert [x.status for x in out] == ["passed", "passed", "failed", "no_answer", "failed"]


def test_verifier_answer_settings_reach_the_checker():
    with Verifier(VerifierConfig(answer=AnswerConfig(percent="number"))) as v:
        assert not v.verify(answer_task("p", "?", "0.5"), "\\boxed{50\\%}").passed
    with Verifier(VerifierConfig()) as v:
        assert v.verify(answer_task("p", "?", "0.5"), "\\boxed{50\\%}").passed


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_verify_cli_on_answer_tasks(tmp_path, capsys):
    tasks = write(tmp_path / "m.jsonl", [{"task_id": "a", "prompt": "1/2 as a decimal?", "answer": "0.5"},
                                         {"task_id": "b", "prompt": "Expand (x+1)^2.", "answer": "x^2+2x+1"}])
    comps = write(tmp_path / "c.jsonl", [{"task_id": "a", "completion": "It is \\boxed{\\frac{1}{2}}."},
                                         {"task_id": "a", "completion": "It is 0.55"},
                                         {"task_id": "b", "completion": "#### (x+1)^2"},
                                         {"task_id": "b", "completion": "I don't know"}])
    out = tmp_path / "r.jsonl"
    assert main(["verify", "--tasks", str(tasks), "--completions", str(comps), "--out", str(out), "--quiet"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["passed", "failed", "passed", "no_answer"]
    assert "pass rate 50.0% (2/4)" in capsys.readouterr().out


@pytest.mark.parametrize("percent, want", [("ratio", "passed"), ("number", "failed"), ("both", "passed")])
def test_verify_cli_percent_setting(tmp_path, percent, want):
    tasks = write(tmp_path / "m.jsonl", [{"task_id": "a", "prompt": "Half, as a number?", "answer": "0.5"}])
    comps = write(tmp_path / "c.jsonl", [{"task_id": "a", "completion": "50\\%"}])
    out = tmp_path / "r.jsonl"
    assert main(["verify", "--tasks", str(tasks), "--completions", str(comps), "--out", str(out), "--quiet",
                 "--percent", percent]) == 0
    assert json.loads(out.read_text())["status"] == want


@pytest.mark.parametrize("numbers, want", [("strict", "failed"), ("lenient", "passed")])
def test_verify_cli_numbers_setting(tmp_path, numbers, want):
    tasks = write(tmp_path / "m.jsonl", [{"task_id": "a", "prompt": "A third?", "answer": "\\frac{1}{3}"}])
    comps = write(tmp_path / "c.jsonl", [{"task_id": "a", "completion": "\\boxed{0.3333333}"}])
    out = tmp_path / "r.jsonl"
    assert main(["verify", "--tasks", str(tasks), "--completions", str(comps), "--out", str(out), "--quiet",
                 "--numbers", numbers]) == 0
    assert json.loads(out.read_text())["status"] == want


def test_eval_cli_completions_on_gsm8k(tmp_path, shared_data, capsys):
    tasks = load_tasks(shared_data / "math" / "gsm8k_test.jsonl")[:20]
    comps = write(tmp_path / "c.jsonl", [{"task_id": t.task_id, "completion": t.solution if i % 2 == 0 else
                                          "The answer is 0."} for i, t in enumerate(tasks)])
    sub = tmp_path / "gsm.jsonl"
    sub.write_text("".join(line + "\n" for line in
                           (shared_data / "math" / "gsm8k_test.jsonl").read_text().splitlines()[:20]))
    assert main(["eval", "--completions", str(comps), "--tasks", str(sub), "--k", "1", "--out",
                 str(tmp_path / "out")]) == 0
    assert "| pass@1 | 0.5 |" in capsys.readouterr().out


def test_mixed_code_and_math_grpo_logs_pass_rate_per_kind(tmp_path):
    from codechat.config.io import load_config
    from codechat.train import train

    from codechat.tasks import save_tasks

    run, math = tmp_path / "mixed", tmp_path / "math.jsonl"
    save_tasks(load_tasks("builtin:arith-heldout")[:10], math)
    train(load_config(None, [f"run_dir={run}", "stages=[grpo]", "model.path=tiny", "rl.steps=1",
                             f"data.train=builtin:toy+{math}", "rl.prompts_per_step=20",
                             "rl.group_size=2", "sampling.max_new_tokens=8", "log.progress=false", "log.plot=false",
                             "verifier.workers=1", "checkpoint.every=0",
                             "rewards={pass-all: 1.0, answer-match: 0.5, format: 0.1}"]))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    step = [r for r in rows if "pass_rate" in r][-1]
    assert {"pass_rate/function", "pass_rate/answer"} <= set(step), sorted(step)
    assert "reward/answer-match/mean" in step


def test_math_config_is_valid_and_its_sets_load():
    from pathlib import Path

    from codechat.config.io import load_config

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "math.yaml")
    assert cfg.stages == ["sft", "grpo"] and cfg.rewards.components == {"pass-all": 1.0, "format": 0.1}
    train, held = load_tasks(cfg.data.train), load_tasks(cfg.data.eval)
    assert all(t.kind == "answer" and t.solution for t in train + held)


def test_the_math_config_runs_both_stages_on_a_tiny_budget(tmp_path):
    from pathlib import Path

    from codechat.config.io import load_config
    from codechat.train import train

    run = tmp_path / "math"
    train(load_config(Path(__file__).resolve().parents[1] / "configs" / "math.yaml",
                      [f"run_dir={run}", "sft.steps=2", "sft.warmup=0", "sft.batch_size=4", "rl.steps=1",
                       "rl.prompts_per_step=2", "rl.group_size=2", "data.max_eval_tasks=2", "eval.n=1", "eval.k=[1]",
                       "sampling.max_new_tokens=8", "verifier.workers=1", "log.plot=false", "log.progress=false"]))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in rows} == {"sft", "grpo"} and any("eval/pass@1" in r for r in rows)
    assert (run / "final" / "model.safetensors").is_file()
