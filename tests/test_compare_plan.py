"""`codechat compare`'s plan and report without training: budgets spent exactly, argument parsing (fuzzed),
the crossed bootstrap against a loop, the report from result files, and the one-line errors."""
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from codechat import CodechatError
from codechat.cli import main
from codechat.compare.plan import METHODS, PRESETS, min_budget, parse_ints, parse_methods, stage_overrides
from codechat.compare.report import load_results, paired_tasks_seeds, report
from codechat.compare.runs import Result, expected_samples, result_path
from codechat.demos.demo import demo_config


def spent(cfg) -> int:
    per = {"grpo": cfg.rl.steps * cfg.rl.prompts_per_step * cfg.rl.group_size,
           "rloo": cfg.rl.steps * cfg.rl.prompts_per_step * cfg.rl.group_size,
           "rft": cfg.rft.rounds * cfg.rft.prompts * cfg.rft.group_size,
           "dpo": cfg.dpo.steps * cfg.dpo.prompts_per_step * cfg.dpo.group_size}
    return sum(per[s] for s in cfg.stages)


def test_every_preset_budget_is_spent_as_the_runs_count_it():
    base = demo_config()
    for name, p in PRESETS.items():
        assert set(p.methods) <= set(METHODS) and p.budgets == sorted(set(p.budgets)), name
        for m in p.methods:
            for b in p.budgets:
                cfg = demo_config(overrides=METHODS[m] + p.overrides + stage_overrides(m, b, base))
                assert spent(cfg) == expected_samples(m, b, base) <= b, (name, m, b)
                assert b - spent(cfg) < 1024  # rounded down by less than one RFT round
    # the curves' budgets are spent exactly by the RL methods and rft-grpo (RFT rounds: 12,288 for 12,800)
    for m in ("grpo", "rloo", "rft-grpo", "dpo"):
        assert [expected_samples(m, b, base) for b in (5120, 12800, 25600)] == [5120, 12800, 25600]
    assert [expected_samples("rft", b, base) for b in (5120, 12800, 25600)] == [5120, 12288, 25600]


def test_rloo_claim_preset_changes_the_settings_it_names():
    cfg = demo_config(overrides=PRESETS["rloo-claim"].overrides)
    demo = demo_config()
    assert (cfg.rl.lr, cfg.rl.epochs) == (1e-3, 4) != (demo.rl.lr, demo.rl.epochs)
    assert cfg.rewards.components == {"pass-all": 1.0, "pass-fraction": 0.1}


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789,- x", max_size=20), st.booleans())
def test_parse_ints_returns_valid_lists_or_a_codechat_error(text, positive):
    try:
        xs = parse_ints(text, "--budgets", positive=positive)
    except CodechatError as e:
        assert "--budgets" in str(e) and "\n" not in str(e)
        return
    assert xs and all(isinstance(x, int) for x in xs)
    if positive:
        assert xs[0] > 0 and all(b > a for a, b in zip(xs, xs[1:]))
    else:
        assert min(xs) >= 0 and len(set(xs)) == len(xs)


def test_parse_methods_names_the_valid_ones():
    assert parse_methods("grpo, rloo") == ["grpo", "rloo"]
    with pytest.raises(CodechatError, match="unknown method.*ppo.*valid: grpo"):
        parse_methods("grpo,ppo")
    with pytest.raises(CodechatError, match="at least one"):
        parse_methods(" , ")
    assert min_budget("rft-grpo", demo_config()) == 1024 + 128


def loop_bootstrap(a, b, n_boot, seed):
    """Reference: the same draws, one bootstrap sample at a time."""
    d = b - a
    S, T = d.shape
    rng = np.random.default_rng(seed)
    si, ti = rng.integers(0, S, size=(n_boot, S)), rng.integers(0, T, size=(n_boot, T))
    means = [np.mean([d[s, t] for s in si[k] for t in ti[k]]) for k in range(n_boot)]
    return np.quantile(means, [0.025, 0.975])


def test_crossed_bootstrap_matches_a_loop_and_a_constant_shift_has_no_width():
    rng = np.random.default_rng(1)
    a, b = rng.random((3, 7)), rng.random((3, 7))
    ci = paired_tasks_seeds(a, b, n_boot=300, seed=4)
    assert np.allclose([ci.lo, ci.hi], loop_bootstrap(a, b, 300, 4))
    assert ci.diff == pytest.approx((b - a).mean()) and ci.n == 21
    shift = paired_tasks_seeds(a, a + 0.25)
    assert shift.lo == pytest.approx(0.25) and shift.hi == pytest.approx(0.25)
    with pytest.raises(ValueError):
        paired_tasks_seeds(a, b[:, :3])


def point(budget, pass_rates, n=4):
    c = [round(p * n) for p in pass_rates]
    return {"budget": budget, "samples": budget, "pass1": sum(c) / (n * len(c)), "greedy": 0.5, "passk": {},
            "n": n, "c": c, "g": [1] * len(c), "eval_s": 1.0, "train_s": 60.0, "tokens": 5000, "update_s": 9.0,
            "clip": 0.05, "zero_var": 0.3, "group_std": 0.2}


def write(out, method, seed, pts, budgets=(100, 200)):
    r = Result(method, seed, ["x=1"], list(budgets), [f"t{i}" for i in range(len(pts[0]["c"]))], pts)
    r.save(result_path(out, method, seed))


def test_report_reads_result_files_and_says_what_is_missing(tmp_path):
    for s, last in ((0, 0.25), (1, 0.5)):  # seed 1 reaches the target (40 %) at 200, seed 0 never
        write(tmp_path, "grpo", s, [point(100, [0, 0.25, 0.5, 0.5]), point(200, [last, 0.25, 0.5, 0.5])])
    write(tmp_path, "rloo", 0, [point(100, [0.5, 0.5, 0.5, 0.5]), point(200, [0.75, 0.75, 0.5, 0.5])])
    write(tmp_path, "rloo", 1, [point(100, [0.5, 0.5, 0.5, 0.5])])  # interrupted after one budget
    res = load_results(tmp_path, ["grpo", "rloo", "dpo"], [0, 1])
    assert list(res) == ["grpo", "rloo"] and [r.finished for r in res["rloo"]] == [True, False]
    sft = {"pass1": 0.2, "greedy": 0.1, "n": 4, "c": [0, 1, 1, 1]}
    text = report(res, sft, 0.4, [100, 200], [0, 1])
    assert "| rloo | 2 | 50.0% ± 0.0%" in text  # budget 100: both seeds
    assert "| rloo | 1 | 62.5% ± 0.0%" in text  # budget 200: seed 0 only ...
    assert "+25.0 pts" in text and "1 seeds" in text  # ... and its difference paired over that seed
    assert "| grpo | 200 (1/2)" in text and "| rloo | 100 (2/2)" in text  # samples to 40 %
    assert "Not finished: rloo seed 1 (to 1/2 budgets)" in text
    text = report(res, sft, 0.4, [100, 200, 300], [0, 1])
    assert "At 300" not in text and "No run has reached 300 completions yet." in text


def test_a_corrupt_result_is_a_one_line_error(tmp_path):
    p = result_path(tmp_path, "grpo", 0)
    p.parent.mkdir(parents=True)
    p.write_text("{not json")
    with pytest.raises(CodechatError, match="grpo-seed0.json: unreadable compare result"):
        Result.load(p)
    p.write_text(json.dumps({"method": "grpo"}))
    with pytest.raises(CodechatError, match="unreadable compare result"):
        Result.load(p)
    good = Result("grpo", 0, [], [100], ["t0", "t1"], [point(100, [0.5, 1.0])])
    good.save(p)
    assert Result.load(p) == good
    for bad in ({"c": [1]}, {"c": [1, 9]}, {"n": 0}, {"g": "xx"}):
        data = dict(good.__dict__, points=[{**good.points[0], **bad}])
        p.write_text(json.dumps(data))
        with pytest.raises(CodechatError, match="grpo-seed0.json: unreadable compare result .*point 0"):
            Result.load(p)
    p.write_text(json.dumps(dict(good.__dict__, points="x")))
    with pytest.raises(CodechatError, match="must be lists"):
        Result.load(p)


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=3),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=4),
                    max_leaves=12))
def test_any_json_in_a_result_file_loads_or_is_a_codechat_error(tmp_path_factory, value):
    p = tmp_path_factory.mktemp("r") / "grpo-seed0.json"
    p.write_text(json.dumps(value))
    try:
        Result.load(p)
    except CodechatError as e:
        assert "\n" not in str(e)


@pytest.mark.parametrize("args, msg", [
    (["--preset", "nope"], "unknown preset 'nope' (valid: curves, rloo-claim, warmup-claim)"),
    (["--methods", "grpo,xyz"], "unknown method(s) 'xyz'"),
    (["--budgets", "512,256"], "strictly increasing"),
    (["--seeds", "a"], "--seeds: expected comma-separated integers"),
    (["--methods", "rft-grpo", "--budgets", "1024"], "rft-grpo needs at least 1152 completions"),
    (["--report"], "no sft_eval.json"),
    (["--target", "1.5"], "--target: expected a pass rate in [0, 1], got 1.5"),
])
def test_bad_arguments_are_one_line_errors(tmp_path, capsys, args, msg):
    assert main(["compare", "--out", str(tmp_path / "o"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and "\n" not in err


def test_the_report_names_the_settings_the_results_were_trained_with():
    from codechat.commands.compare import settings_line
    from codechat.compare.plan import RUN

    r = Result("grpo", 0, [*METHODS["grpo"], "model.path=/x/sft", "seed=0", "rl.lr=1e-3", "rl.lr=5e-4", *RUN], [100], ["t0"])
    assert settings_line({"grpo": [r]}) == "Settings of these results (on top of the demo's): `rl.lr=5e-4`."
