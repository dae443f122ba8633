"""`eval.every` with `eval.every_stages`: the periodic held-out evaluation runs only in the stages listed, and
every stage is still evaluated at its end; an unknown stage name is refused."""
import json

import pytest

from codechat.config.io import ConfigError, load_config
from codechat.train import common, train

BASE = ["data.train=builtin:toy", "data.sft=builtin:toy-sft", "data.eval=builtin:toy", "data.max_eval_tasks=2",
        "sampling.max_new_tokens=8", "log.progress=false", "log.plot=false", "checkpoint.every=0",
        "stages=[sft]", "sft.steps=4", "sft.batch_size=2", "eval.every=1", "eval.n=1"]


def eval_steps(tmp_path, monkeypatch, extra):
    monkeypatch.setattr(common, "evaluate_policy",
                        lambda *a, **kw: type("Report", (), {"metrics": {"pass@1": 0.5, "greedy_pass@1": 0.5}})())
    run = tmp_path / "r"
    train(load_config(None, BASE + [f"run_dir={run}", *extra]))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if "eval/pass@1" in r]


def test_every_applies_to_the_listed_stages_only(tmp_path, monkeypatch):
    assert eval_steps(tmp_path / "a", monkeypatch, ["eval.every_stages=[sft]"]) == [1, 2, 3, 4]
    assert eval_steps(tmp_path / "b", monkeypatch, ["eval.every_stages=[grpo]"]) == [4]  # the stage end only
    assert eval_steps(tmp_path / "c", monkeypatch, []) == [1, 2, 3, 4]  # empty: every stage


def test_an_unknown_stage_is_refused():
    with pytest.raises(ConfigError, match="eval.every_stages: unknown stage 'gpro'"):
        load_config(None, ["eval.every_stages=[gpro]"])
