"""Same seed, same episodes: tool results hold no wall-clock time (pytest's `in 0.13s` is dropped), so an expert
transcript and a seeded episode repeat token for token."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codechat.config import AgentConfig
from codechat.config.io import load_config
from codechat.rollout.tools import ToolBox, ToolCall, steady
from codechat.tasks.repo_loaders import load_repo_tasks
from codechat.train import train
from codechat.train.metrics import read_metrics
from codechat.verifier.repo import RepoJudge

COUNTS = st.lists(st.tuples(st.integers(0, 999), st.sampled_from(["passed", "failed", "error", "errors", "skipped",
                                                                  "warning", "warnings", "deselected"])),
                  min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(counts=COUNTS, secs=st.floats(0, 9999, allow_nan=False), clock=st.booleans(), bar=st.integers(0, 30),
       before=st.text(alphabet="abc .=:\n[]%0123456789", max_size=80))
def test_pytest_summary_loses_its_time_and_nothing_else(counts, secs, clock, bar, before):
    summary = ", ".join(f"{n} {w}" for n, w in counts)
    eq = "=" * bar
    timed = f"{secs:.2f}s" + (" (0:01:05)" if clock else "")
    line = f"{eq} {summary} in {timed} {eq}" if bar else f"{summary} in {timed}"
    want = f"{eq} {summary} {eq}" if bar else summary
    head = before.replace(" in ", " at ") + "\n"  # text above the summary line, with no time of its own
    assert steady(head + line) == steady(head) + want
    assert steady(want) == want


def test_text_without_a_pytest_time_is_unchanged():
    for text in ["ok exit 0\nplain in 3 steps", "1 passed in total", "def f():\n    return 'ran in 2s'", ""]:
        assert steady(text) == text


def test_two_runs_of_the_visible_tests_give_the_same_result():
    task = load_repo_tasks("builtin:repo-train")[0]
    out = []
    with RepoJudge() as judge:
        for _ in range(2):
            ws = judge.clone(task)
            out.append(ToolBox(task, ws, AgentConfig()).call(ToolCall("run_tests")).text)
            ws.remove()
    assert out[0] == out[1] and "passed" in out[0] and " in 0." not in out[0]


def test_two_workspaces_give_the_same_failing_output():
    """A broken module: pytest's traceback and Python's name the file by its absolute path, which differs per
    workspace."""
    task = load_repo_tasks("builtin:repo-train")[0]
    path = sorted(task.solution)[0]
    out, roots = [], []
    with RepoJudge() as judge:
        for _ in range(2):
            ws = judge.clone(task)
            box = ToolBox(task, ws, AgentConfig())
            assert box.call(ToolCall("write_file", {"path": path, "content": "def broken(:\n"})).ok
            out.append(box.call(ToolCall("run_tests")).text)
            code = f"import os, runpy; runpy.run_path(os.path.abspath('{path}'))"
            out.append(box.call(ToolCall("run", {"code": code})).text)
            roots.append(str(ws.root))
            ws.remove()
    assert roots[0] != roots[1] and out[:2] == out[2:]
    assert path in out[0] and "SyntaxError" in out[0] and path in out[1] and "SyntaxError" in out[1]
    assert not any(r in o for r in roots for o in out)


def test_the_workspace_path_becomes_relative():
    assert steady('File "/run/ws-8/pkg/a.py", line 3', "/run/ws-8") == 'File "pkg/a.py", line 3'
    assert steady("cwd /run/ws-8", "/run/ws-8") == "cwd ."


def without_times(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time") and "per_s" not in k and not k.endswith("_s")}
            for r in rows]


@pytest.mark.slow
def test_same_seed_same_sft_and_first_grpo_step(tmp_path, short_tasks):
    """(slow: two trainer runs, ~20-50 s on a busy machine) Expert transcripts (real run_tests results) -> 1 SFT step -> 1 GRPO step on episodes, twice with one seed:
    the same metrics (times aside) and the same sampled episodes."""
    runs = []
    for name in ("a", "b"):
        cfg = load_config(None, ["data.train=builtin:repo-train", "data.eval=", "log.progress=false",
                                 "log.plot=false", "log.audit=false", "checkpoint.every=0", "model.device=cpu",
                                 "stages=[sft,grpo]", "sft.steps=1", "sft.batch_size=2", "sft.warmup=0",
                                 "sft.expert_edit=edit", "rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=2",
                                 "rl.lr=1e-3", "agent.turn_tokens=8", "sampling.max_new_tokens=8",
                                 f"run_dir={tmp_path / name}"])
        train(cfg)
        runs.append(read_metrics(tmp_path / name))
    assert without_times(runs[0]) == without_times(runs[1])
    assert any("episode/turns" in r for r in runs[0]) and any("sft/expert_tokens_mean" in r for r in runs[0])
    rollouts = [(tmp_path / n / "rollouts.jsonl").read_text() for n in ("a", "b")]
    assert rollouts[0] and rollouts[0] == rollouts[1]
