"""Several expert transcripts per task (`sft.expert_per_task`): every built-in task has plausible but wrong
fixes (pass the visible asserts, fail a hidden one), and each task's transcripts mix them with the reference,
so the SFT policy is a mixture per task that GRPO's groups can compare."""
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codechat import CodechatError
from codechat.config import AgentConfig, ModelConfig
from codechat.config.io import load_config
from codechat.policy import load_policy
from codechat.rollout.expert import edit_arguments, expert_episodes, expert_fixes, pick_wrong
from codechat.tasks.repo_loaders import load_repo_tasks
from codechat.train import sft, train
from codechat.verifier.repo import RepoJudge

MINI = load_repo_tasks("builtin:repo-mini")
BASE = ["data.train=builtin:repo-train", "data.eval=", "log.progress=false", "log.plot=false",
        "checkpoint.every=0", "model.device=cpu", "stages=[sft]", "sft.steps=1", "sft.batch_size=2",
        "sft.warmup=0"]


def asserts(text: str) -> list[str]:
    return [m.strip() for m in re.findall(r"^    (assert .*)$", text, flags=re.M)]


def holds(task, fix: dict[str, str], tests: list[str]) -> list[bool]:
    """Which asserts of the test files hold with `fix` applied (our own generated modules, run in-process)."""
    ns: dict = {}
    modules = {p: t for p, t in task.files.items() if p.endswith(".py") and not p.startswith("tests/")}
    for path, text in {**modules, **fix}.items():  # every module of the package, the fixed one replaced
        exec(compile(text, path, "exec"), ns)  # the family's template code, never a model's
    out = []
    for a in (a for p in tests for a in asserts(task.hidden_tests.get(p) or task.files[p])):
        try:
            exec(compile(a, "<assert>", "exec"), dict(ns))
            out.append(True)
        except Exception:  # noqa: BLE001 - a failing or raising assert
            out.append(False)
    return out


@pytest.mark.parametrize("task", MINI, ids=lambda t: t.task_id)
def test_every_wrong_fix_passes_the_visible_tests_and_fails_a_hidden_one(task):
    wrongs = task.metadata["wrong_fixes"]
    assert wrongs and len({json.dumps(w, sort_keys=True) for w in wrongs}) == len(wrongs)
    visible = [p for p in task.visible_tests if p in task.files]
    for fix in wrongs:
        assert fix != task.solution and set(fix) == set(task.solution)
        assert all(holds(task, fix, visible))
        assert not all(holds(task, fix, list(task.hidden_tests)))
    assert all(holds(task, task.solution, list(task.hidden_tests)))
    assert wrongs[-1] == {p: task.files[p] for p in task.solution}  # last: the module with its bug left in
    if task.metadata["wrong_fix"]:
        assert wrongs[0] == task.metadata["wrong_fix"]


def test_every_train_task_has_a_wrong_fix():
    train_tasks = load_repo_tasks("builtin:repo-train")
    assert all(t.metadata["wrong_fixes"] for t in train_tasks)
    # a real wrong fix (a mutation, a hand-written one or another bug of the unit) besides the bug left in
    assert all(len(t.metadata["wrong_fixes"]) > 1 for t in train_tasks)
    assert sum(bool(t.metadata["wrong_fix"]) for t in train_tasks) == 32  # MUTATIONS alone: a quarter


def test_one_transcript_per_task_keeps_the_share_of_tasks():
    fixes = expert_fixes(MINI, 0.5, 3)
    wrong = pick_wrong(MINI, 0.5, 3)
    assert all(len(f) == 1 for f in fixes.values())
    assert {tid for tid, f in fixes.items() if f[0] != next(t.solution for t in MINI if t.task_id == tid)} == wrong


@settings(max_examples=40, deadline=None)
@given(share=st.floats(0, 1), per_task=st.integers(2, 9), seed=st.integers(0, 2**16))
def test_each_task_mixes_round_share_times_n_wrong_fixes(share, per_task, seed):
    fixes = expert_fixes(MINI, share, seed, per_task)
    assert fixes == expert_fixes(MINI, share, seed, per_task)  # seeded
    for t in MINI:
        got = fixes[t.task_id]
        assert len(got) == per_task
        wrong = [f for f in got if f != t.solution]
        assert len(wrong) == round(share * per_task)
        assert all(f in t.metadata["wrong_fixes"] for f in wrong)
        pool = t.metadata["wrong_fixes"]
        if len(wrong) >= len(pool):  # cycled: every wrong fix of the task is drawn before any repeats
            assert all(f in wrong for f in pool)


@pytest.mark.slow
def test_expert_episodes_mix_and_play_each_distinct_fix_once():
    """(slow: two real sandboxed episodes, ~10-25 s on a busy machine) 3 transcripts of a task, round(0.4 x 3) =
    1 wrong, judged as such; its two reference episodes are one episode (played once, weighted twice). With
    `edit`, each fix is one edit call, and the judged change is the fix."""
    task = load_repo_tasks("builtin:repo-train")[0]
    policy = load_policy(ModelConfig(path="tiny", device="cpu"))
    with RepoJudge() as judge:
        got = expert_episodes(policy, judge, [task], AgentConfig(), 0.4, seed=0, per_task=3, edit="edit")
    assert [e.task_id for e in got] == [task.task_id] * 3
    assert [e.verdict.passed for e in got] == [False, True, True]
    assert got[1] is got[2] and got[0].transcript.tokens != got[1].transcript.tokens
    assert got[0].changes in task.metadata["wrong_fixes"] and got[1].changes == task.solution
    for e in got[:2]:
        assert [u.tool for u in e.transcript.turns] == ["read_file", "run_tests", "edit", "run_tests", "submit"]
        assert all(u.ok for u in e.transcript.turns)


@pytest.mark.parametrize("spec", ["builtin:repo-mini", "builtin:repo-train", "builtin:repo-heldout"])
def test_an_expert_edit_makes_exactly_the_fix(spec):
    for t in load_repo_tasks(spec):
        for fix in [t.solution] + t.metadata["wrong_fixes"]:
            for path, text in fix.items():
                args = edit_arguments(t.files[path], text, t.solution[path])
                assert args is not None and t.files[path].count(args["old"]) == 1
                assert t.files[path].replace(args["old"], args["new"], 1) == text
                assert len(args["old"].splitlines()) <= 4  # a few lines, not the file


LINES = st.lists(st.sampled_from(["a = 1", "b = 2", "    return x", "", "if x:", "c = a + b"]), min_size=1,
                 max_size=12)


@settings(max_examples=200, deadline=None)
@given(base=LINES, changes=st.lists(st.tuples(st.integers(0, 11), st.sampled_from(["z = 0", "a = 1", ""])),
                                    max_size=3), ref=st.integers(0, 11), nl=st.booleans())
def test_edit_arguments_fuzz(base, changes, ref, nl):
    """Any line replacements: the edit, when there is one, turns base into fix, and `old` is unique in base."""
    def text(lines):
        return "\n".join(lines) + ("\n" if nl else "")
    fix = list(base)
    for i, line in changes:
        fix[i % len(fix)] = line
    reference = list(base)
    reference[ref % len(base)] = "r = 9"
    args = edit_arguments(text(base), text(fix), text(reference))
    if args is not None:
        assert text(base).count(args["old"]) == 1
        assert text(base).replace(args["old"], args["new"], 1) == text(fix)


def test_sft_hands_expert_per_task_and_edit_to_the_expert(tmp_path, monkeypatch):
    seen = []

    def spy(policy, judge, tasks, cfg, share, seed, per_task=1, edit="write", recover=0.0):
        seen.append((share, per_task, edit, recover))
        raise RuntimeError("stop here")
    monkeypatch.setattr(sft, "expert_episodes", spy)
    with pytest.raises(RuntimeError, match="stop here"):
        train(load_config(None, BASE + [f"run_dir={tmp_path}", "sft.expert_wrong=0.4", "sft.expert_per_task=3",
                                         "sft.expert_edit=edit", "sft.expert_recover=0.25"]))
    assert seen == [(0.4, 3, "edit", 0.25)]


def test_an_unknown_expert_edit_form_or_recover_share_is_refused(tmp_path):
    with pytest.raises(CodechatError, match="sft.expert_edit: expected one of write, edit, function"):
        train(load_config(None, BASE + [f"run_dir={tmp_path}", "sft.expert_edit=lines"]))
    with pytest.raises(CodechatError, match=r"sft.expert_recover: expected in \[0, 1\], got 1.5"):
        train(load_config(None, BASE + [f"run_dir={tmp_path}", "sft.expert_recover=1.5"]))


def test_expert_per_task_below_one_is_refused(tmp_path):
    with pytest.raises(CodechatError, match="sft.expert_per_task"):
        train(load_config(None, BASE + [f"run_dir={tmp_path}", "sft.expert_per_task=0"]))
