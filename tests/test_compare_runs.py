"""`codechat compare` end to end on builtin:toy with tiny settings: curve points at each budget, a rerun that
trains nothing, a longer curve that resumes the same run for one more segment, and segments that equal one
straight run (the resume is exact, so a curve's points are those of a single run to the largest budget)."""
import json

import pytest

from codechat.cli import main
from codechat.compare import runs
from codechat.compare.plan import METHODS, RUN
from codechat.demos.demo import demo_config
from codechat.io.runlog import read_metrics
from codechat.train import train

TINY = ["data.train=builtin:toy", "data.sft=builtin:toy-sft", "data.eval=builtin:toy", "sampling.max_new_tokens=24",
        "sft.steps=30", "sft.lr=3e-3", "sft.batch_size=16", "sft.warmup=5", "eval.n=2", "eval.k=[1,2]"]


@pytest.fixture(scope="module")
def curve(tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp") / "out"
    assert main(["compare", "--out", str(out), "--methods", "grpo", "--seeds", "0", "--budgets", "128,256", *TINY]) == 0
    return out


def test_one_run_gives_a_point_per_budget(curve):
    res = json.loads((curve / "results" / "grpo-seed0.json").read_text())
    assert [p["samples"] for p in res["points"]] == [128, 256]
    for p in res["points"]:
        assert len(p["c"]) == len(p["g"]) == len(res["tasks"]) == 10 and p["n"] == 2
        assert p["pass1"] == pytest.approx(sum(p["c"]) / 20)
        assert p["tokens"] > 0 and p["update_s"] > 0 and p["train_s"] > 0 and p["clip"] is not None
    assert res["points"][1]["tokens"] > res["points"][0]["tokens"]
    assert [r["step"] for r in read_metrics(curve / "runs" / "grpo-seed0")] == [1, 2]  # one run, two segments
    assert not any("eval/pass@1" in r for r in read_metrics(curve / "runs" / "grpo-seed0"))  # compare evaluates
    text = (curve / "compare.md").read_text()
    assert "**At 128 sampled completions**" in text and "**At 256 sampled completions**" in text
    assert "Curve points of this report: 128 / 256 completions; seeds 0." in text  # not the preset's budgets
    assert (curve / "compare.png").is_file() and (curve / "sft_eval.json").is_file()


def test_a_rerun_trains_nothing_and_a_longer_curve_resumes(curve, monkeypatch):
    calls = []
    real = runs.train

    def spy(cfg=None, resume=None, overrides=None, force=False):
        calls.append((resume, overrides))
        return real(cfg, resume=resume, overrides=overrides, force=force)
    monkeypatch.setattr(runs, "train", spy)
    before = (curve / "results" / "grpo-seed0.json").read_text()
    assert main(["compare", "--out", str(curve), "--methods", "grpo", "--seeds", "0", "--budgets", "128,256",
                 *TINY]) == 0
    assert calls == [] and (curve / "results" / "grpo-seed0.json").read_text() == before
    assert main(["compare", "--out", str(curve), "--methods", "grpo", "--seeds", "0", "--budgets", "128,256,384",
                 *TINY]) == 0
    assert calls == [(curve / "runs" / "grpo-seed0", ["rl.steps=3"])]  # --resume, one more step
    res = json.loads((curve / "results" / "grpo-seed0.json").read_text())
    assert [p["samples"] for p in res["points"]] == [128, 256, 384] and res["points"][:2] == json.loads(before)["points"]
    assert main(["compare", "--out", str(curve), "--methods", "grpo", "--seeds", "0", "--budgets", "128,512",
                 *TINY]) == 2  # other budgets than the stored points: refused, not mixed


def test_segments_equal_one_straight_run(curve, tmp_path):
    sft = json.loads((curve / "sft_eval.json").read_text())["model"]
    seg = {r["step"]: r for r in read_metrics(curve / "runs" / "grpo-seed0")}  # 2 or 3 segments of one step
    straight = tmp_path / "straight"
    train(demo_config(str(straight), overrides=[*METHODS["grpo"], f"model.path={sft}", "seed=0", *TINY, *RUN,
                                                 f"rl.steps={len(seg)}"]))
    assert len(read_metrics(straight)) == len(seg)
    for r in read_metrics(straight):
        for k in ("pass_rate", "loss", "grad_norm", "response_len_mean"):
            assert r[k] == pytest.approx(seg[r["step"]][k], rel=1e-5, abs=1e-7), (r["step"], k)
