"""`codechat demo --seeds`: the seed list, the per-seed tables with mean and range, the pooled paired interval
over (task, seed) pairs, and the command running one demo per seed into RUN_DIR/seed-N."""
import json
from dataclasses import asdict

import pytest

from codechat import CodechatError
from codechat.commands import demo as demo_cmd
from codechat.demos import agent as agent_demo
from codechat.demos.agent import AgentRow
from codechat.demos.demo import StageRow
from codechat.demos.seeds import (agent_seed_table, parse_seeds, pooled_resolve_change, read_agent_rows,
                                  seed_table, spread)
from codechat.evaluation.stats import paired_bootstrap


def test_parse_seeds_reads_a_list_and_names_a_bad_one():
    assert parse_seeds("0,1,2") == [0, 1, 2] and parse_seeds("7") == [7]
    for bad in ("0,x", "1,1", "-1", ""):
        with pytest.raises(CodechatError, match="--seeds"):
            parse_seeds(bad)


def test_seed_table_has_each_seed_and_the_mean_and_range():
    res = {s: [StageRow("sft", 300, 0.3 + s / 100, 0.4, 0.8, 8, 60.0, 0),
               StageRow("grpo", 430, 0.7, 0.8 + s / 100, 0.85, 8, 300.0 + 60 * s, 99)] for s in (0, 1, 2)}
    text = seed_table(res)
    assert "| 0 | 30.0 / 40.0 / 80.0 % | 70.0 / 80.0 / 85.0 % | +40.0 / +40.0 / +5.0 | 5.0 min |" in text
    assert "| 2 | 32.0 / 40.0 / 80.0 % | 70.0 / 82.0 / 85.0 % | +38.0 / +42.0 / +5.0 | 7.0 min |" in text
    assert "| mean (range) | 31.0 (30.0 to 32.0) /" in text
    assert "+39.0 (+38.0 to +40.0) / +41.0 (+40.0 to +42.0)" in text
    assert spread([-1.0, 3.0], signed=True) == "+1.0 (-1.0 to +3.0)" and spread([1.0, 3.0]) == "2.0 (1.0 to 3.0)"


def _agent_run(path, sft_c, grpo_c, n=4, rft_c=None):
    stages = [("sft", "sft", sft_c)] + ([("rft", "rft", rft_c)] if rft_c else []) + [("grpo", "rft+grpo", grpo_c)]
    for stage, _, cs in stages:
        (path / f"eval-{stage}").mkdir(parents=True)
        per = {f"t{i}": {"c": c, "n": n} for i, c in enumerate(cs)}
        (path / f"eval-{stage}" / "summary.json").write_text(json.dumps({"metrics": {}, "per_task": per}))
    rows = [AgentRow(st, sum(cs) / (n * len(cs)), 0.5, n, 0.9, 0.0, 1.0, 5.0, 600.0 * (i + 1))
            for i, (_, st, cs) in enumerate(stages)]
    (path / "rows.json").write_text(json.dumps([asdict(r) for r in rows]))
    return path


def test_pooled_interval_pairs_every_task_of_every_seed(tmp_path):
    dirs = {0: _agent_run(tmp_path / "a", [0, 1, 2, 4], [2, 2, 4, 4]), 1: _agent_run(tmp_path / "b", [1, 0], [1, 4])}
    ci = pooled_resolve_change(dirs)
    ref = paired_bootstrap([0, .25, .5, 1, .25, 0], [.5, .5, 1, 1, .25, 1])
    assert ci.n == 6 and (ci.diff, ci.lo, ci.hi) == pytest.approx((ref.diff, ref.lo, ref.hi))
    assert ci.lo < ci.diff < ci.hi
    text = agent_seed_table({s: read_agent_rows(d) for s, d in dirs.items()}, ci)
    assert "| 1 | 12.5 / 50.0 % | 62.5 / 50.0 % | +50.0 / +0.0 | 20.0 min |" in text
    assert "over 6 (task, seed) pairs" in text and f"{ci.diff * 100:+.1f} pts" in text


def test_three_stage_table_shows_grpo_over_rft_per_seed_and_pooled(tmp_path):
    dirs = {0: _agent_run(tmp_path / "a", [0, 1], [2, 4], rft_c=[1, 3]), 1: _agent_run(tmp_path / "b", [0, 0], [2, 2],
                                                                                        rft_c=[2, 2])}
    last = pooled_resolve_change(dirs, "rft", "grpo")
    ref = paired_bootstrap([.25, .75, .5, .5], [.5, 1, .5, .5])
    assert last.n == 4 and (last.diff, last.lo, last.hi) == pytest.approx((ref.diff, ref.lo, ref.hi))
    text = agent_seed_table({s: read_agent_rows(d) for s, d in dirs.items()}, pooled_resolve_change(dirs), last)
    assert "| seed | sft resolve@1 / @4 | rft resolve@1 / @4 | rft+grpo resolve@1 / @4 | change" in text
    assert "| 0 | 12.5 / 50.0 % | 50.0 / 50.0 % | 75.0 / 50.0 % | +62.5 / +0.0 | +25.0 / +0.0 | 30.0 min |" in text
    assert "| mean (range) |" in text and "+12.5 (+0.0 to +25.0) / +0.0 (+0.0 to +0.0)" in text
    assert "change rft -> rft+grpo +12.5 pts" in text and "change sft -> rft+grpo" in text


def test_seeds_runs_one_demo_per_seed_and_writes_the_table(tmp_path, monkeypatch, capsys):
    ran = []

    def fake_agent(args):
        seed = int(args.overrides[-1].split("=")[1])
        ran.append((args.run_dir, args.overrides))
        _agent_run(tmp_path / "r" / f"seed-{seed}", [0, 1], [2, 3 + seed % 2])
        return 0

    monkeypatch.setattr(demo_cmd, "run_agent", fake_agent)
    args = demo_cmd.argparse.Namespace(agent=True, quick=False, seeds="0,1", run_dir=str(tmp_path / "r"), model="tiny",
                                       overrides=["rl.steps=2"])
    assert demo_cmd.run(args) == 0
    assert ran == [(str(tmp_path / "r" / "seed-0"), ["rl.steps=2", "seed=0"]),
                   (str(tmp_path / "r" / "seed-1"), ["rl.steps=2", "seed=1"])]
    table = (tmp_path / "r" / "seeds.md").read_text()
    assert "--seeds 0,1" in table and "| mean (range) |" in table and "(task, seed) pairs" in capsys.readouterr().out
    with pytest.raises(CodechatError, match="seed="):
        demo_cmd.run(demo_cmd.argparse.Namespace(agent=False, quick=False, seeds="0", run_dir=None, model="tiny",
                                                 overrides=["seed=3"]))


def test_seeds_reuses_a_finished_run_with_the_same_settings_only(tmp_path, monkeypatch):
    ran = []

    def fake_agent(args):
        seed = int(args.overrides[-1].split("=")[1])
        ran.append(args.overrides)
        _agent_run(tmp_path / "r" / f"seed-{seed}", [0, 1], [2, 3])
        return 0

    monkeypatch.setattr(demo_cmd, "run_agent", fake_agent)

    def args(seeds, overrides):
        return demo_cmd.argparse.Namespace(agent=True, quick=False, seeds=seeds, run_dir=str(tmp_path / "r"),
                                           model="tiny", overrides=overrides)

    assert demo_cmd.run(args("0", ["rl.steps=2"])) == 0 and ran == [["rl.steps=2", "seed=0"]]
    (tmp_path / "r" / "seeds.md").unlink()
    # seed 0 finished with these settings: reused, only seed 1 runs, and the table has both
    assert demo_cmd.run(args("0,1", ["rl.steps=2"])) == 0
    assert ran == [["rl.steps=2", "seed=0"], ["rl.steps=2", "seed=1"]]
    assert "| 1 |" in (tmp_path / "r" / "seeds.md").read_text()
    # other settings: seed 0 is not reused (its directory then refuses a second run, as a single demo's does)
    monkeypatch.setattr(demo_cmd, "run_agent", lambda a: ran.append(a.overrides) or 0)
    monkeypatch.setattr(demo_cmd, "read_agent_rows", lambda d: [])
    monkeypatch.setattr(demo_cmd, "agent_seed_table", lambda *a: "")
    demo_cmd.run(args("0", ["rl.steps=3"]))
    assert ran[-1] == ["rl.steps=3", "seed=0"]


def test_seeds_runs_again_when_the_demo_settings_changed(tmp_path, monkeypatch):
    ran = []

    def fake_agent(args):
        ran.append(args.overrides)
        _agent_run(tmp_path / "r" / "seed-0", [0, 1], [2, 3])
        return 0

    monkeypatch.setattr(demo_cmd, "run_agent", fake_agent)
    args = demo_cmd.argparse.Namespace(agent=True, quick=False, seeds="0", run_dir=str(tmp_path / "r"),
                                       model="tiny", overrides=[])
    assert demo_cmd.run(args) == 0 and len(ran) == 1
    # a codechat whose agent demo has other settings (same command line): the old run is not this demo's
    monkeypatch.setattr(agent_demo, "AGENT", agent_demo.AGENT + ["rl.steps=11"])
    monkeypatch.setattr(demo_cmd, "run_agent", lambda a: ran.append(a.overrides) or 0)
    monkeypatch.setattr(demo_cmd, "read_agent_rows", lambda d: [])
    monkeypatch.setattr(demo_cmd, "agent_seed_table", lambda *a: "")
    demo_cmd.run(args)
    assert len(ran) == 2
