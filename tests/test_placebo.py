"""The placebo control: shuffled advantages keep their multiset and leave the other rows alone, the trainer's
placebo arm trains on the same first batch with the same advantages on other samples, and `codechat probe`
reports both arms, their drift and their paired difference."""
import json

import pytest
import torch

from codechat.algos import placebo_advantages
from codechat.cli import main
from codechat.config.io import load_config
from codechat.train import rl, train
from codechat.train.placebo import ArmReport, report, run_probe

BASE = ["data.train=builtin:toy", "sampling.max_new_tokens=12", "log.progress=false", "log.plot=false",
        "verifier.workers=2", "rl.prompts_per_step=4", "rl.group_size=4", "checkpoint.every=0", "log.audit=false",
        "sampling.temperature=1.5"]


def test_placebo_advantages_permute_the_trained_rows_only():
    adv = torch.tensor([0.5, -0.5, 1.5, -1.5, 0.0, 2.0, -2.0, 0.25])
    rows = torch.tensor([0, 1, 2, 3, 5, 6])  # rows 4 and 7 are not trained (e.g. a skipped group)
    out = placebo_advantages(adv, rows, seed=3)
    assert sorted(out[rows].tolist()) == sorted(adv[rows].tolist())  # the same multiset: the same-size update
    assert out[4] == adv[4] and out[7] == adv[7]
    assert not torch.equal(out[rows], adv[rows])  # moved to other samples
    assert torch.equal(out, placebo_advantages(adv, rows, seed=3))  # seeded
    assert torch.equal(adv, torch.tensor([0.5, -0.5, 1.5, -1.5, 0.0, 2.0, -2.0, 0.25]))  # input untouched
    assert not torch.equal(out, placebo_advantages(adv, rows, seed=4))


def test_placebo_arm_gets_the_real_batch_with_its_advantages_shuffled(tmp_path, monkeypatch):
    """Two runs from the same model and seed: step 1 samples the same completions (the weights have not moved
    yet) and the placebo arm's advantages are a reordering of the real arm's."""
    seen = {}
    real_update = rl.rl_update
    # an untrained model fails every toy task: give each sample a distinct advantage so the shuffle is visible
    monkeypatch.setattr(rl, "advantages", lambda ctx, r, a, tracker: torch.linspace(-1, 1, len(r.verdicts)))

    def spy(ctx, r, adv, rows, *a, **kw):
        seen.setdefault(ctx.cfg.rl.placebo, []).append((list(r.batch.texts), adv.clone()))
        return real_update(ctx, r, adv, rows, *a, **kw)

    monkeypatch.setattr(rl, "rl_update", spy)
    for placebo in (False, True):
        train(load_config(None, BASE + [f"run_dir={tmp_path / str(placebo)}", "stages=[grpo]", "rl.steps=2",
                                        f"rl.placebo={placebo}"]))
    (texts_r, adv_r), (texts_p, adv_p) = seen[False][0], seen[True][0]
    assert texts_r == texts_p
    assert sorted(adv_r.tolist()) == pytest.approx(sorted(adv_p.tolist()))
    assert torch.equal(adv_r, torch.linspace(-1, 1, 16)) and not torch.equal(adv_r, adv_p)


def _arm(name, passes, kl=0.0):
    return ArmReport(name, passes, 4, kl, 1.0)


def test_report_pairs_the_arms_over_tasks():
    ks = [1, 4]
    out = report([_arm("start", {"a": 2, "b": 0}), _arm("real", {"a": 4, "b": 2}, 0.1),
                  _arm("placebo", {"a": 1, "b": 0}, 0.2)], ks)
    assert out["real"]["pass@1"] == pytest.approx(0.75) and out["placebo"]["pass@1"] == pytest.approx(0.125)
    d = out["real-placebo"]["pass@1"]
    assert d["diff"] == pytest.approx(0.625) and d["lo"] <= d["diff"] <= d["hi"] and d["n"] == 2
    assert out["real-placebo"]["pass@4"]["diff"] == pytest.approx(0.5)  # a: 1 - 1, b: 1 - 0
    assert "real-placebo" not in report([_arm("start", {"a": 1}), _arm("real", {"a": 2})], ks)


def test_probe_runs_both_arms_from_one_model(tmp_path):
    out = tmp_path / "probe"
    res = run_probe(BASE, None, "tiny", steps=1, out=out, tasks=3, n=2, ks=(1, 2))
    assert json.loads((out / "probe.json").read_text()) == res
    for arm in ("start", "real", "placebo"):
        assert set(res[arm]) >= {"pass@1", "pass@2", "kl", "entropy"} and res[arm]["entropy"] > 0
    assert res["start"]["kl"] == res["start"]["kl_from_start"] == 0.0
    assert res["real"]["kl"] >= 0 and res["real"]["kl_from_start"] >= 0 and len(res["placebo"]["step_pass_rates"]) == 1
    assert res["tasks"] == 3 and set(res["real-placebo"]) == {"pass@1", "pass@2"}
    assert load_config(out / "placebo" / "config.yaml").rl.placebo
    assert not load_config(out / "real" / "config.yaml").rl.placebo


@pytest.mark.parametrize("argv, message", [
    (["--k", "1,16", "--n", "8"], "each k must be <= --n 8"),
    (["--steps", "0"], "expected at least 1 RL step"),
    (["--arms", "real,sham"], "expected some of real, placebo"),
    (["--demo", "tiny", "--config", "c.yaml"], "give one of them"),
    (["data.train=builtin:repo-mini"], "bench/agent_grpo_probe.py --placebo"),
])
def test_probe_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, message):
    assert main(["probe", "--model", "tiny", "--out", str(tmp_path / "p"), *argv, "rl.lr=1e-4"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not (tmp_path / "p").exists()
