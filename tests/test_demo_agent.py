"""The agent demo: its configs, its table, the GPU config and check, and `--quick` end to end (SFT on expert
episodes -> GRPO on episodes, resolve rate up)."""
import importlib.util
import dataclasses
import json
from dataclasses import replace
from pathlib import Path

import pytest

from codechat import CodechatError, plugins
from codechat.demos import agent as demo_agent
from codechat.cli import main
from codechat.config.io import load_config
from codechat.demos.agent import AGENT_QUICK_EVAL_N, AgentRow, agent_config, agent_table, run_agent_demo
from codechat.policy.presets import PRESETS
from codechat.tasks.repo_loaders import is_repo_spec, load_repo_tasks

ROOT = Path(__file__).resolve().parents[1]


def test_the_three_runs_share_settings_and_chain_their_weights(tmp_path):
    sft = agent_config(str(tmp_path), "sft", overrides=["sft.steps=7"])
    rft = agent_config(str(tmp_path), "rft", overrides=["rft.steps=5"])
    rl = agent_config(str(tmp_path), "grpo", overrides=["rl.steps=3"])
    assert sft.stages == ["sft"] and sft.sft.steps == 7 and sft.run_dir == f"{tmp_path}/sft"
    assert rft.stages == ["rft"] and rft.rft.steps == 5 and rft.model.path == f"{tmp_path}/sft"
    assert rl.stages == ["grpo"] and rl.rl.steps == 3 and rl.model.path == f"{tmp_path}/rft"
    assert sft.data.train == rft.data.train == rl.data.train == "builtin:repo-train" and sft.sft.expert_wrong > 0
    quick = agent_config(str(tmp_path), "sft", quick=True)
    assert quick.data.train == "builtin:repo-mini" and len(load_repo_tasks("builtin:repo-mini")) == 6
    with pytest.raises(ValueError, match="sft, rft, grpo"):
        agent_config(str(tmp_path), "rft+grpo")


def _fake_stages(monkeypatch, passes: dict[str, int]):
    """train() records each run; evaluate_stage() writes an evaluation where each of 4 tasks has passes[stage]
    of 4 episodes resolved."""
    trained = []

    def fake_train(cfg):
        trained.append((cfg.stages, cfg.model.path, cfg.run_dir))
        Path(cfg.run_dir).mkdir(parents=True)
        (Path(cfg.run_dir) / "config.yaml").write_text(json.dumps(dataclasses.asdict(cfg)))
        (Path(cfg.run_dir) / "metrics.jsonl").write_text(json.dumps({"step": 1, "stage": cfg.stages[0],
                                                                      "pass_rate": 0.5}) + "\n")

    def fake_eval(cfg, model_dir, spec, n, out, limit=0):
        c = passes[Path(model_dir).name]
        per = {f"t{i}": {"c": c, "n": 4} for i in range(4)}
        out.mkdir(parents=True)
        (out / "summary.json").write_text(json.dumps({"metrics": {}, "per_task": per}))
        return {"resolve@1": c / 4, f"resolve@{n}": float(c > 0), "tested_before_submit": 1.0,
                "protected_attempts": 0.0, "submitted": 1.0, "turns": 5.0}

    monkeypatch.setattr(demo_agent, "train", fake_train)
    monkeypatch.setattr(demo_agent, "evaluate_stage", fake_eval)
    return trained


def test_the_demo_evaluates_after_rft_and_after_grpo(tmp_path, monkeypatch):
    """Three runs chained by their weights, an evaluation after each, and the report's GRPO-over-RFT change
    read from eval-rft/ and eval-grpo/ of the same run."""
    trained = _fake_stages(monkeypatch, {"sft": 1, "rft": 2, "grpo": 3})
    d = tmp_path / "d"
    run_dir, rows = run_agent_demo(str(d))
    assert trained == [(["sft"], "tiny-agent", f"{d}/sft"), (["rft"], f"{d}/sft", f"{d}/rft"),
                       (["grpo"], f"{d}/rft", f"{d}/grpo")]
    assert [r.stage for r in rows] == ["sft", "rft", "rft+grpo"] and [r.resolve1 for r in rows] == [.25, .5, .75]
    assert demo_agent.resolve_change(d, "rft", "grpo").startswith("resolve@1 change rft -> grpo +25.0 pts")
    report = (d / "report.md").read_text()
    assert "GRPO over RFT alone: resolve@1 change rft -> grpo +25.0 pts" in report
    assert "| **rft+grpo - rft** | **+25.0 pts** |" in report and "| **rft+grpo - sft** | **+50.0 pts** |" in report


def test_the_demo_skips_grpo_at_zero_steps(tmp_path, monkeypatch):
    trained = _fake_stages(monkeypatch, {"sft": 1, "rft": 2})
    run_dir, rows = run_agent_demo(str(tmp_path / "d"), overrides=["rl.steps=0"])
    assert [t[0] for t in trained] == [["sft"], ["rft"]] and [r.stage for r in rows] == ["sft", "rft"]
    assert not (run_dir / "eval-grpo").exists() and demo_agent.resolve_change(run_dir, "rft", "grpo") == ""
    assert "no GRPO (rl.steps=0)" in (run_dir / "report.md").read_text()


def test_the_demo_writes_compact_calls_with_the_2k_tiny_preset(tmp_path):
    """The levers of docs/agent.md: the compact call format and a 2,048-token context, for both runs, fixes as
    replace_function calls; the function demo's `tiny` preset keeps its 1,024 positions."""
    for stage in ("sft", "rft", "grpo"):
        cfg = agent_config(str(tmp_path), stage, quick=True)
        assert cfg.agent.call_format == "compact"
    for quick in (False, True):  # several transcripts per task, fixes as replace_function calls
        cfg = agent_config(str(tmp_path), "sft", quick=quick)
        assert cfg.sft.expert_per_task == 4 and cfg.sft.expert_edit == "function" and cfg.sft.expert_wrong == 0.5
    assert agent_config(str(tmp_path), "grpo", quick=True).rl.lr == 1e-4 and AGENT_QUICK_EVAL_N == 4
    for quick in (False, True):  # GRPO runs past its warm-up (in it the lr is a fraction of rl.lr), without
        rl = agent_config(str(tmp_path), "grpo", quick=quick).rl  # learning from episodes cut by a budget
        assert rl.warmup < rl.steps and rl.mask_truncated
    assert agent_config(str(tmp_path), "sft").model.path == "tiny-agent"
    assert PRESETS["tiny"].max_positions == 1024 and PRESETS["tiny-agent"] == replace(PRESETS["tiny"],
                                                                                      max_positions=2048)


def test_table_shows_the_change_and_repeats_without_times():
    rows = [AgentRow("sft", 0.25, 0.5, 4, 0.4, 0.3, 0.9, 5.0, 60.0),
            AgentRow("grpo", 0.5, 0.75, 4, 0.6, 0.1, 1.0, 5.2, 300.0)]
    t = agent_table(rows)
    assert "+25.0 pts" in t and "+20.0 pts" in t and "-0.20" in t and "5.0 min" in t
    same = [AgentRow(*[getattr(r, f) for f in ("stage", "resolve1", "resolvek", "k", "tested_before_submit",
                                                "protected_attempts", "submitted", "turns")], 999.0) for r in rows]
    assert agent_table(rows, times=False) == agent_table(same, times=False) and "min" not in agent_table(rows, False)


def test_resolve_change_pairs_the_two_evaluations_by_task(tmp_path):
    for stage, cs in (("sft", [0, 1, 2, 4]), ("grpo", [2, 3, 2, 4])):
        (tmp_path / f"eval-{stage}").mkdir()
        per = {f"t{i}": {"n": 4, "c": c} for i, c in enumerate(cs)}
        (tmp_path / f"eval-{stage}" / "summary.json").write_text(json.dumps({"metrics": {}, "per_task": per}))
    got = demo_agent.resolve_change(tmp_path)
    assert got.startswith("resolve@1 change sft -> grpo +25.0 pts") and "over the 4 tasks" in got
    lo, hi = (float(x) for x in got.split("tasks ")[1].split(" pts")[0].split(" to "))
    assert lo <= 0 < 25 < hi <= 50  # per-task changes +50, +50, 0, 0


def test_cli_refuses_an_earlier_agent_demo(tmp_path, capsys):
    (tmp_path / "d" / "sft").mkdir(parents=True)
    assert main(["demo", "--agent", "--run-dir", str(tmp_path / "d")]) != 0
    assert "earlier agent demo" in capsys.readouterr().err


def test_gpu_config_parses_for_a_chat_model_with_lora_and_vllm():
    cfg = load_config(str(ROOT / "configs" / "agent_gpu.yaml"), [])
    assert cfg.model.chat and cfg.model.lora_r > 0 and cfg.rollout.engine == "vllm" and cfg.stages == ["grpo"]
    assert is_repo_spec(cfg.data.train) and cfg.rollout.vllm_prefix_caching


def load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_check_agent_part_skips_without_a_model():
    assert "skipped" in load_gpu_check().check_agent(None, "cpu")


@pytest.mark.slow
def test_gpu_check_agent_part_on_cpu_with_the_tiny_preset():
    """The multi-turn GRPO check itself, on CPU: plain prompts, the hf engine, one step."""
    out = load_gpu_check().check_agent("tiny", "cpu", plain=True, steps=1)
    assert out["ok"] and out["steps"] == 1 and out["turns"] > 0, out


@pytest.fixture
def one_thread():
    """One torch thread: on a busy machine two spinning threads make these runs several times slower."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def three_turns(monkeypatch):
    """The quick demo's tasks with 3-turn episodes for the model (the expert plays its 5 turns whatever the
    budget): the untrained model's episodes end after 3 turns, not 12."""
    def load(spec, repos=None):
        tasks = load_repo_tasks(spec, repos)
        for t in tasks:
            t.limits.max_turns = 3
        return tasks
    monkeypatch.setattr(plugins, "load_repo_tasks", load)
    monkeypatch.setattr(demo_agent, "load_repo_tasks", load)


@pytest.mark.slow
def test_quick_agent_demo_end_to_end(tmp_path, one_thread, three_turns):
    """SFT on expert episodes -> eval -> RFT + GRPO on episodes -> eval, with the table, report and plot. The
    wiring only (2 SFT steps); the rise is `test_short_agent_run_resolves_more_after_rft`."""
    short = ["log.progress=false", "sft.steps=2", "rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=2",
             "agent.turn_tokens=32"]
    run_dir, rows = run_agent_demo(str(tmp_path / "d"), quick=True, overrides=short, eval_n=2)  # the wiring
    assert [r.stage for r in rows] == ["sft", "rft", "rft+grpo"] and rows[0].k == 2
    sft_rows = [json.loads(line) for line in (run_dir / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert sft_rows[0]["sft/expert_transcripts"] == 6 * 4  # the demo's expert_per_task
    for stage in ("sft", "rft", "grpo"):
        samples = (run_dir / f"eval-{stage}" / "samples.jsonl").read_text().splitlines()
        assert len(samples) == 6 * 2 and all(json.loads(s)["turns"] for s in samples)
    rft = [json.loads(line) for line in (run_dir / "rft" / "metrics.jsonl").read_text().splitlines()]
    assert [r["rft/kept"] for r in rft if r.get("stage") == "rft"] == [0]  # 2 SFT steps resolve nothing
    grpo = [json.loads(line) for line in (run_dir / "grpo" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in grpo if "episode/turns" in r and r.get("stage") == "grpo"]
    assert len(steps) == 2 and all(r["episode/turns"] > 0 for r in steps)
    # every step either updated with a finite loss or skipped (zero-variance groups: all episodes failed alike)
    assert all(r.get("skipped_update") == 1.0 or r["loss"] == r["loss"] for r in steps)
    report = (run_dir / "report.md").read_text()
    assert "resolve@1 (T=1)" in report and "paired bootstrap interval over the 6 tasks" in report
    assert (run_dir / "resolve.png").is_file()
    assert json.loads((run_dir / "rows.json").read_text())[2]["stage"] == "rft+grpo"


@pytest.fixture
def one_task(monkeypatch):
    """repo-mini cut to its first task (the expert's 5 turns fit the model's 12)."""
    def load(spec, repos=None):
        return load_repo_tasks(spec, repos)[:1]
    monkeypatch.setattr(plugins, "load_repo_tasks", load)
    monkeypatch.setattr(demo_agent, "load_repo_tasks", load)


@pytest.mark.slow
def test_short_agent_run_resolves_more_after_rft(tmp_path, one_thread, one_task):
    """The demo shortened to ~70 s: one task, SFT on its 4 expert transcripts (2 with a wrong fix, 100 steps),
    8 sampled episodes, RFT on the 12 of one grow step that passed, 8 episodes again (on the trained task: the
    held-out rise is the full demo's). Seeds 0-3 measured 25% -> 87.5 / 87.5 / 87.5 / 75% (seed 3 from 50%),
    so the margin is one episode in 8 (`python bench/agent_short.py --seeds 0,1,2,3`)."""
    run_dir, (sft, end) = run_agent_demo(str(tmp_path / "d"), quick=True, eval_n=8,
                                         overrides=["log.progress=false"] + demo_agent.AGENT_SHORT)
    rft = [json.loads(line) for line in (run_dir / "rft" / "metrics.jsonl").read_text().splitlines()]
    kept = [r["rft/kept"] for r in rft if r.get("stage") == "rft" and "rft/kept" in r]
    assert kept and kept[0] >= 1, "RFT kept no passing episode: nothing to learn from"
    assert end.resolve1 >= sft.resolve1 + 1 / 8, (sft, end)
    assert end.submitted >= sft.submitted  # the trained behaviour: it ends its episodes by submitting
