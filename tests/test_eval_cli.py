"""`codechat eval`: defaults equal the training evaluation (it reproduces the run's logged numbers), one folder
per task set that is never overwritten by another set, provenance in summary.json, k > n refused, progress on a
terminal; `--compare` warns on different tasks and gives a paired bootstrap interval (checked against a loop)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from codechat import CodechatError
from codechat.cli import main
from codechat.config.io import load_config
from codechat.evaluation.compare import compare
from codechat.evaluation.stats import paired_bootstrap
from codechat.train import train

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("evalrun") / "r"
    train(load_config(None, ["data.train=builtin:toy", "data.sft=builtin:toy-sft", "data.eval=builtin:toy",
                             "data.max_eval_tasks=3", "sampling.max_new_tokens=10", "log.progress=false",
                             "log.plot=false", "verifier.workers=1", "stages=[sft]", "sft.steps=2",
                             "sft.batch_size=4", "eval.n=3", "eval.k=[1,3]", "seed=5", f"run_dir={d}"]))
    return d


def test_defaults_reproduce_the_training_evaluation(run, capsys):
    logged = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()][-1]
    assert main(["eval", "--model", str(run), "--tasks", "builtin:toy", "--limit", "3", "--workers", "1"]) == 0
    summary = json.loads((run / "eval" / "toy" / "summary.json").read_text())
    for k in ("pass@1", "pass@3", "greedy_pass@1"):
        assert summary["metrics"][k] == pytest.approx(logged[f"eval/{k}"]), k
    p = summary["provenance"]
    assert p["tasks"] == "builtin:toy" and p["checkpoint"] == "final" and p["n_tasks"] == 3
    assert (p["n"], p["k"], p["temperature"], p["max_new_tokens"], p["seed"], p["greedy"]) == (3, [1, 3], 1.0, 10,
                                                                                                104, True)
    assert p["model_path"].endswith("model") and "checkpoints/step-" in p["model_path"]


def test_each_task_set_has_its_own_folder_and_none_is_overwritten(run, tmp_path):
    common = ["--model", str(run), "--limit", "2", "--workers", "1", "--n", "1", "--k", "1", "--no-greedy"]
    before = (run / "eval" / "toy" / "summary.json").read_text() if (run / "eval" / "toy").exists() else None
    assert main(["eval", "--tasks", "builtin:basic", *common]) == 0
    assert (run / "eval" / "basic" / "summary.json").is_file()
    if before is not None:
        assert (run / "eval" / "toy" / "summary.json").read_text() == before
    with pytest.raises(CodechatError, match=r"holds the results of tasks 'builtin:basic', not 'builtin:toy'"):
        from codechat.commands import eval as ev
        import argparse
        p = argparse.ArgumentParser()
        ev.add_arguments(p)
        ev.run(p.parse_args(["--tasks", "builtin:toy", "--out", str(run / "eval" / "basic"), *common]))
    assert main(["eval", "--tasks", "builtin:basic", *common]) == 0  # the same evaluation again: fine


@pytest.mark.parametrize("flags,message", [
    (["--n", "2", "--k", "1,5"], "--k 5 exceeds --n 2: pass@k needs k <= n"),
    (["--n", "0"], "--n must be >= 1"),
    (["--k", "0"], "--k values must be >= 1"),
    (["--k", "a"], "--k must be comma-separated integers"),
])
def test_bad_sampling_flags_are_refused_before_any_work(run, capsys, flags, message):
    assert main(["eval", "--model", str(run), "--tasks", "builtin:toy", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_task_set_names():
    from codechat.commands.eval import set_name
    assert set_name("builtin:synthetic-heldout") == "synthetic-heldout" and set_name("builtin") == "builtin"
    assert set_name("data/MbppPlus-v0.2.0.jsonl.gz") == "MbppPlus-v0.2.0"


def test_progress_bar_on_a_terminal(run, tmp_path):
    pexpect = pytest.importorskip("pexpect")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TERM": "xterm"}
    child = pexpect.spawn(sys.executable, ["-m", "codechat", "eval", "--model", str(run), "--tasks", "builtin:toy",
                                           "--workers", "1", "--out", str(tmp_path / "e"), "--n", "1", "--k", "1"],
                          env=env, encoding="utf-8", timeout=120, dimensions=(30, 120))
    try:
        child.expect(r"eval toy .*0/10(\x1b\[0m)? tasks")  # drawn before the first batch, then updated
        child.expect(r"10/10(\x1b\[0m)? tasks")
        child.expect(r"per-sample results")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


# --- compare -----------------------------------------------------------------------------------------------------
def test_paired_bootstrap_equals_a_loop():
    rng = np.random.default_rng(1)
    a, b = list(rng.random(30)), list(rng.random(30))
    ci = paired_bootstrap(a, b, n_boot=500, seed=3)
    idx = np.random.default_rng(3).integers(0, 30, size=(500, 30))
    means = sorted(sum(b[j] - a[j] for j in row) / 30 for row in idx)
    assert ci.diff == pytest.approx(sum(y - x for x, y in zip(a, b)) / 30)
    assert ci.lo == pytest.approx(np.quantile(means, 0.025)) and ci.hi == pytest.approx(np.quantile(means, 0.975))
    shifted = paired_bootstrap(a, [x + 0.1 for x in a])  # a constant shift is known exactly
    assert shifted.lo == pytest.approx(0.1) and shifted.hi == pytest.approx(0.1)
    with pytest.raises(ValueError):
        paired_bootstrap([1.0], [1.0, 2.0])


def test_compare_warns_on_different_tasks_and_reports_the_interval(tmp_path):
    def summary(name, per_task, tasks):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(
            {"provenance": {"tasks": tasks, "n": 2}, "metrics": {"pass@1": 0.5}, "per_task": per_task}))
    summary("a", {"x": {"n": 2, "c": 0}, "y": {"n": 2, "c": 1}, "z": {"n": 2, "c": 2}}, "A.jsonl")
    summary("b", {"x": {"n": 2, "c": 2}, "y": {"n": 2, "c": 1}, "w": {"n": 2, "c": 0}}, "B.jsonl")
    warnings = []
    out = compare(str(tmp_path / "a"), str(tmp_path / "b"), warn=warnings.append)
    assert "different tasks: 1 only in A (z), 1 only in B (w)" in warnings[0]
    assert "differ in tasks ('A.jsonl' vs 'B.jsonl')" in warnings[1]
    assert "pass@1 B - A: +0.5000 (95% paired bootstrap CI" in out and "2 paired items" in out
    assert "gained (1): x" in out


def test_completions_with_too_few_samples_for_k_say_so(tmp_path, capsys):
    from codechat.tasks import load_tasks
    tasks = load_tasks("builtin:toy")[:2]
    comps = tmp_path / "c.jsonl"
    comps.write_text("".join(json.dumps({"task_id": t.task_id, "completion": t.solution or "x"}) + "\n"
                             for t in tasks))
    out = tmp_path / "o"
    assert main(["eval", "--completions", str(comps), "--tasks", "builtin:toy", "--k", "1,5", "--workers", "1",
                 "--out", str(out)]) == 0
    assert "pass@5 not reported: a task has only 1 completion(s)" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert "pass@1" in summary["metrics"] and "pass@5" not in summary["metrics"]
    assert summary["provenance"]["completions"] == str(comps)
