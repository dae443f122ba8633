"""The synthetic family: deterministic, splits disjoint by composition, true references (every style) pass,
buggy references fail, and the SFT mixer does what its options say. Our own generated code runs with `exec`."""
from __future__ import annotations

import random

import pytest

from codechat.tasks import load_tasks, save_tasks
from codechat.tasks.synthetic import (BUG_KINDS, HELDOUT_SIZE, RARE_PRIMITIVES, STYLES, TRAIN_SIZE, code,
                                      compositions, evaluate, generate_tasks, sft_examples, sft_records, with_bug)
from codechat.tasks.synthetic.generate import _input_pool
from codechat.tasks.synthetic.spec import ablations

TRAIN = load_tasks("builtin:synthetic-train")
HELDOUT = load_tasks("builtin:synthetic-heldout")
ALL = TRAIN + HELDOUT


def run(code_text: str, tests: list[str]) -> list[bool]:
    """Whether each test passes after `code_text` (one fresh namespace per call; the tests do not mutate it)."""
    ns: dict = {}
    try:
        exec(compile(code_text, "<solution>", "exec"), ns)
    except Exception:
        return [False] * len(tests)
    results = []
    for t in tests:
        try:
            exec(compile(t, "<test>", "exec"), ns)
            results.append(True)
        except Exception:
            results.append(False)
    return results


def call(code_text: str, arg):
    ns: dict = {}
    exec(compile(code_text, "<solution>", "exec"), ns)
    try:
        return ns["f"](arg)
    except Exception as e:  # a buggy variant may crash; the spec then must not return normally either
        return type(e).__name__


def test_registered_sets_and_shape():
    assert len(TRAIN) == TRAIN_SIZE and len(HELDOUT) == HELDOUT_SIZE
    assert len({t.task_id for t in ALL}) == len(ALL)
    assert {t.metadata["level"] for t in TRAIN} == {1, 2, 3} and {t.metadata["level"] for t in HELDOUT} == {2, 3}
    assert {t.metadata["family"] for t in HELDOUT} == {"list", "str", "arith"}
    for t in ALL:
        assert t.entry_point == "f" and t.prompt.startswith("Write a function `f(")
        assert 4 <= len(t.tests) <= 6
        assert len(t.prompt.split()) <= 40, t.prompt
        assert all(len(s.strip().splitlines()) <= 8 for s in t.metadata["solutions"].values())
        assert set(t.metadata["solutions"]) == set(STYLES[t.metadata["family"]])
        assert len({repr(evaluate(t.metadata["spec"], a)) for a in _arg_list(t)}) > 1, "constant task"
        for rival in ablations(t.metadata["spec"]):  # every operation in the statement matters to the asserts
            assert any(evaluate(rival, a) != evaluate(t.metadata["spec"], a) for a in _arg_list(t)), t.prompt


def _arg_list(task):
    return [eval(t[len("assert f("):t.rindex(") == ")]) for t in task.tests]


def test_same_seed_same_tasks_other_seed_other_tasks():
    a, b = generate_tasks("train", 60, seed=7), generate_tasks("train", 60, seed=7)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    c = generate_tasks("train", 60, seed=8)
    assert [t.prompt for t in a] != [t.prompt for t in c]


def test_splits_are_disjoint_by_composition_and_share_primitives():
    comps = compositions()
    train_keys = {k for (split, _, _), cs in comps.items() if split == "train" for k in map(_key, cs)}
    held_keys = {k for (split, _, _), cs in comps.items() if split == "heldout" for k in map(_key, cs)}
    assert held_keys and not train_keys & held_keys
    assert {t.metadata["composition"] for t in TRAIN}.isdisjoint(t.metadata["composition"] for t in HELDOUT)
    for seed in (1, 2):  # any seed: the split is a property of the composition
        assert {t.metadata["composition"] for t in generate_tasks("train", 100, seed)}.isdisjoint(
            t.metadata["composition"] for t in generate_tasks("heldout", 50, seed))
    train_prims = {(t.metadata["family"], p) for t in TRAIN for p in t.metadata["primitives"]}
    for t in HELDOUT:
        for p in t.metadata["primitives"]:
            assert (t.metadata["family"], p) in train_prims, (t.task_id, p)


def _key(comp: dict) -> str:
    names = [comp[s] or "-" for s in ("source", "filter", "map", "reduce", "cond", "then", "else") if s in comp]
    return comp["family"] + ":" + ":".join(names)


def test_every_style_of_every_reference_passes():
    for t in ALL:
        for style, sol in t.metadata["solutions"].items():
            assert all(run(sol, t.tests)), (t.task_id, style, sol)


def test_rendered_code_agrees_with_the_plain_evaluator_beyond_the_asserts():
    rng = random.Random(0)
    for t in ALL[::5]:
        spec = t.metadata["spec"]
        for arg in _input_pool(spec, rng):
            want = evaluate(spec, arg)
            for style in STYLES[spec["family"]]:
                assert call(code(spec, style), arg) == want, (t.task_id, style, arg)


def test_every_buggy_reference_fails_and_behaves_as_its_spec():
    n_buggy = 0
    for t in ALL:
        spec = t.metadata["spec"]
        assert set(t.metadata["bugs"]) <= set(BUG_KINDS)
        for kind in t.metadata["bugs"]:
            bug = with_bug(spec, kind)
            for style in STYLES[spec["family"]]:
                text = code(bug, style)
                assert not all(run(text, t.tests)), (t.task_id, kind, style, text)
                for arg in _arg_list(t):
                    assert call(text, arg) == evaluate(bug, arg), (t.task_id, kind, style, arg)
                n_buggy += 1
    assert n_buggy > len(ALL)
    assert sum(bool(t.metadata["bugs"]) for t in TRAIN) > 0.8 * len(TRAIN)


def test_trivially_wrong_answers_fail_every_task():
    wrong = ["def f(a):\n    return None\n", "def f(a):\n    return a\n", "def f(a):\n    return 0\n"]
    for t in ALL:
        for w in wrong:
            assert not all(run(w, t.tests)), (t.task_id, w)


def test_levels_and_bad_arguments():
    assert {t.metadata["level"] for t in generate_tasks("train", 20, seed=0, level=1)} == {1}
    assert {t.metadata["family"] for t in generate_tasks("train", 20, seed=0, families=("str",))} == {"str"}
    with pytest.raises(ValueError, match="levels"):
        generate_tasks("heldout", 5, seed=0, level=1)
    with pytest.raises(ValueError, match="valid: train, heldout"):
        generate_tasks("test", 5)
    with pytest.raises(ValueError, match="distinct"):
        generate_tasks("heldout", 10_000, seed=0, families=("str",))


def test_sft_buggy_share_styles_and_determinism():
    clean = sft_records(TRAIN, buggy_fraction=0.0, seed=0)
    assert all(r["bug"] is None and r["solution"] in _task(r).metadata["solutions"].values() for r in clean)
    recs = sft_records(TRAIN, buggy_fraction=0.3, seed=0, per_task=2)
    assert len(recs) == 2 * len(TRAIN) and recs == sft_records(TRAIN, buggy_fraction=0.3, seed=0, per_task=2)
    share = sum(r["bug"] is not None for r in recs) / len(recs)
    assert 0.2 < share < 0.35
    for r in recs:
        task = _task(r)
        passed = all(run(r["solution"], task.tests))
        assert passed == (r["bug"] is None), r
    assert {r["style"] for r in recs} == {s for ss in STYLES.values() for s in ss}
    refs = {(t.prompt, v) for t in TRAIN[:20] for v in t.metadata["solutions"].values()}
    pairs = sft_examples(TRAIN[:20], buggy_fraction=0.0)
    assert len(pairs) == 20 and set(pairs) <= refs


def test_sft_bug_kinds_rare_keep_and_styles():
    recs = sft_records(TRAIN, buggy_fraction=1.0, seed=1, bug_kinds=["boundary"])
    assert {r["bug"] for r in recs} == {"boundary", None}
    assert all((r["bug"] == "boundary") == ("boundary" in _task(r).metadata["bugs"]) for r in recs)
    kept = sft_records(TRAIN, seed=1, rare_keep=0.0)
    assert kept and all(r["region"] == "common" for r in kept)
    assert all(not set(_task(r).metadata["primitives"]) & set(RARE_PRIMITIVES) for r in kept)
    assert {r["style"] for r in sft_records(TRAIN, seed=1, styles=["loop", "if"])} == {"loop", "if"}
    with pytest.raises(ValueError, match="valid"):
        sft_records(TRAIN, bug_kinds=["typo"])


def test_round_trip_through_jsonl_keeps_spec(tmp_path):
    path = tmp_path / "syn.jsonl"
    save_tasks(HELDOUT[:10], path)
    back = load_tasks(path)
    assert [t.tests for t in back] == [t.tests for t in HELDOUT[:10]]
    assert sft_examples(back, buggy_fraction=1.0, seed=3) == sft_examples(HELDOUT[:10], buggy_fraction=1.0, seed=3)


_BY_ID = {t.task_id: t for t in ALL}


def _task(rec):
    return _BY_ID[rec["task_id"]]
