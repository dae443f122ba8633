"""The demo: its SFT data, its table and report, and `--quick` end to end (SFT -> RFT -> GRPO on builtin:toy,
about a minute on 2 CPU cores), which must raise the pass rate. Also the compare command's budget arithmetic."""
import json

import pytest

from codechat import CodechatError
from codechat.commands import demo as demo_cmd
from codechat.config.io import save_config
from codechat.demos.demo import (StageRow, demo_config, passk_curves, passk_table, run_demo, summarize, table,
                                 write_report)
from codechat.train.rl import stage_algo


def test_synthetic_sft_has_buggy_references_and_true_tests():
    from codechat.tasks import load_tasks

    sft, train = load_tasks("builtin:synthetic-sft"), {t.task_id: t for t in load_tasks("builtin:synthetic-train")}
    assert len({t.task_id for t in sft}) == len(sft) == 2 * len(train)
    buggy = [t for t in sft if t.metadata["bug"]]
    assert {t.metadata["bug"] for t in buggy} == {"boundary"}
    assert 0.2 < len(buggy) / len(sft) < 0.4  # 80 % of the examples whose task admits a boundary bug
    for t in buggy[:50]:
        orig = train[t.task_id.split("#")[0]]
        assert t.solution not in orig.metadata["solutions"].values()  # the reference is wrong ...
        assert t.tests == orig.tests  # ... the tests are the true ones
    clean = load_tasks("builtin:synthetic-sft-clean")
    assert not any(t.metadata["bug"] for t in clean)


def test_overrides_win_over_demo_defaults():
    cfg = demo_config("runs/x", quick=False, overrides=["rl.steps=3", "seed=5"])
    assert cfg.stages == ["sft", "rft", "grpo"] and cfg.rl.steps == 3 and cfg.seed == 5 and cfg.run_dir == "runs/x"
    assert demo_config(quick=True).data.train == "builtin:toy"


def test_the_qwen_demo_trains_a_qwen_shaped_model_in_the_run_dir_through_the_chat_template():
    cfg = demo_config("runs/q", overrides=["rl.steps=3"], model="qwen3")
    assert cfg.model.path == "runs/q/model" and cfg.model.chat and cfg.rl.steps == 3
    assert demo_config("runs/q", overrides=["model.path=/m"], model="qwen2.5").model.path == "/m"  # the user's wins
    assert not demo_config("runs/q").model.chat and demo_config("runs/q").model.path == "tiny"
    with pytest.raises(CodechatError, match="--model llama"):
        demo_config("runs/q", model="llama")
    with pytest.raises(CodechatError, match="agent demo trains the tiny-agent preset only"):
        demo_cmd.run(demo_cmd.argparse.Namespace(agent=True, quick=False, seeds=None, run_dir=None, model="qwen3",
                                                 overrides=[]))


def test_summarize_keeps_the_last_eval_of_each_stage(tmp_path):
    rows = [{"step": 5, "time": 1.0, "stage": "sft", "eval/pass@1": 0.1, "eval/pass@8": 0.3, "eval/greedy_pass@1": 0.2},
            {"step": 10, "time": 2.0, "stage": "sft", "eval/pass@1": 0.2, "eval/pass@8": 0.4, "eval/greedy_pass@1": 0.3},
            {"step": 11, "time": 2.5, "stage": "grpo", "pass_rate": 0.5},
            {"step": 20, "time": 9.0, "stage": "grpo", "eval/pass@1": 0.5, "eval/pass@8": 0.6,
             "eval/greedy_pass@1": 0.45, "samples": 128}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = summarize(tmp_path)
    assert got == [StageRow("sft", 10, 0.2, 0.3, 0.4, 8, 2.0, 0), StageRow("grpo", 20, 0.5, 0.45, 0.6, 8, 9.0, 128)]
    assert "+30.0 pts" in table(got) and "+15.0 pts" in table(got)


def test_the_demo_evaluates_every_25_grpo_steps_with_pass_at_1_to_8():
    cfg = demo_config()
    assert (cfg.eval.every, cfg.eval.every_stages, cfg.eval.n, cfg.eval.k) == (25, ["grpo"], 8, list(range(1, 9)))
    assert cfg.rl.steps // cfg.eval.every >= 4  # the GRPO curve has more points than the stage ends


def test_the_demo_grpo_is_held_to_the_rft_model_by_kl():
    a = stage_algo(demo_config(), "grpo")
    assert a.kl_beta == 0.05 and a.kl_estimator == "k3"  # without it pass@8 fell 13 points (docs/demo.md)


def test_passk_curves_read_the_last_eval_of_each_stage(tmp_path):
    rows = [{"step": 5, "time": 1.0, "stage": "sft", "eval/pass@1": 0.1, "eval/pass@2": 0.2, "eval/greedy_pass@1": 0.2},
            {"step": 10, "time": 2.0, "stage": "sft", "eval/pass@1": 0.2, "eval/pass@2": 0.35, "eval/greedy_pass@1": 0.3},
            {"step": 20, "time": 3.0, "stage": "grpo", "eval/pass@2": 0.6, "eval/pass@1": 0.5}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curves = passk_curves(tmp_path)
    assert curves == {"sft": [(1, 0.2), (2, 0.35)], "grpo": [(1, 0.5), (2, 0.6)]}
    assert passk_table(curves).splitlines()[2:] == ["| sft | 20.0% | 35.0% |", "| grpo | 50.0% | 60.0% |"]
    save_config(demo_config(str(tmp_path)), tmp_path / "config.yaml")
    report = write_report(tmp_path).read_text()
    assert "| stage | pass@1 | pass@2 |" in report and "| grpo | 50.0% | 60.0% |" in report


def test_compare_spends_equal_budgets():
    """Each method's resolved config (demo settings + the method's batch shape + its stage lengths) samples the
    budget: completions counted from the config's own fields, stage by stage."""
    from codechat.compare.plan import METHODS, stage_overrides

    budget = 2048
    for m in METHODS:
        cfg = demo_config(overrides=METHODS[m])
        cfg = demo_config(overrides=METHODS[m] + stage_overrides(m, budget, cfg))
        per_stage = {"grpo": cfg.rl.steps * cfg.rl.prompts_per_step * cfg.rl.group_size,
                     "rloo": cfg.rl.steps * cfg.rl.prompts_per_step * cfg.rl.group_size,
                     "rft": cfg.rft.rounds * cfg.rft.prompts * cfg.rft.group_size,
                     "dpo": cfg.dpo.steps * cfg.dpo.prompts_per_step * cfg.dpo.group_size}
        spent = sum(per_stage[s] for s in cfg.stages)
        assert spent == budget, (m, cfg.stages, spent)


@pytest.fixture
def one_thread():
    """One torch thread: on a busy machine two spinning threads make this test ~8x slower (measured), and the
    result does not depend on the core count."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.slow
def test_quick_demo_raises_pass_rate(tmp_path, one_thread):
    cfg = demo_config(str(tmp_path / "demo"), quick=True, overrides=["log.progress=false"])
    run_dir, rows = run_demo(cfg)
    assert [r.stage for r in rows] == ["sft", "rft", "grpo"]
    sft, final = rows[0], rows[-1]
    assert final.pass1 >= sft.pass1 + 0.08, table(rows)  # seeded: +15 points measured
    rates = [json.loads(line)["pass_rate"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
             if '"stage": "grpo"' in line and '"pass_rate"' in line]
    assert sum(rates[-4:]) / 4 > sum(rates[:4]) / 4 + 0.08, rates
    assert (run_dir / "report.md").is_file() and (run_dir / "pass_rates.png").is_file()
    assert "greedy pass@1" in (run_dir / "report.md").read_text()
