"""Task-load checks a user hits: bad field types, tests that do not parse (named task, not every completion
blamed), MBPP splits (`FILE:train`), and the train/eval overlap warning. Fuzzed: any record loads or fails with
one TaskFormatError line."""
from __future__ import annotations

import json
import warnings

import pytest
from hypothesis import given, settings, strategies as st

from codechat.tasks import Task, TaskFormatError, load_tasks
from codechat.tasks.splits import normalise_prompt, overlap, warn_overlap


def write(tmp_path, *records, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return p


GOOD = {"task_id": "a", "prompt": "Write add(a, b).", "tests": ["assert add(1, 2) == 3"]}


@pytest.mark.parametrize("field,value,message", [
    ("metadata", [1, 2], "field 'metadata' must be a JSON object, got list"),
    ("metadata", "x", "field 'metadata' must be a JSON object, got str"),
    ("timeout_s", float("nan"), "field 'timeout_s' must be a positive number, got nan"),
    ("timeout_s", float("inf"), "field 'timeout_s' must be a positive number"),
    ("timeout_s", True, "field 'timeout_s' must be a positive number, got True"),
    ("tests", "assert add(1, 2) == 3", "field 'tests' must be a list of strings, got a string"),
    ("tests", ["assert add(1, 2) == 3", "assert add(1, 2) =="],
     "task 'a': test 2 is not valid Python \\(invalid syntax, line 1\\)"),
])
def test_bad_field_is_a_one_line_error_naming_file_and_line(tmp_path, field, value, message):
    p = write(tmp_path, GOOD, {**GOOD, "task_id": "a2", field: value} if field != "tests" else {**GOOD, field: value})
    if field == "tests" and isinstance(value, list):
        p = write(tmp_path, {**GOOD, field: value})
    with pytest.raises(TaskFormatError, match=message) as e:
        load_tasks(p)
    assert str(e.value).startswith(str(p) + ":") and "\n" not in str(e.value)


def test_syntax_error_in_mbpp_test_names_the_task(tmp_path):
    rec = {"task_id": 7, "text": "Add.", "code": "def add(a, b):\n    return a + b", "test_list": ["assert add(1,"]}
    with pytest.raises(TaskFormatError, match=r"t.jsonl:1: task '7': test 1 is not valid Python"):
        load_tasks(write(tmp_path, rec))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["task_id", "prompt", "tests", "metadata", "timeout_s", "entry_point",
                                        "setup", "solution"]),
                       st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
                                 st.lists(st.text(max_size=20), max_size=3),
                                 st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))))
def test_fuzzed_records_load_or_fail_with_one_line(tmp_path_factory, rec):
    p = tmp_path_factory.mktemp("fz") / "t.jsonl"
    p.write_text(json.dumps({"prompt": "p", "tests": [], **rec}) + "\n")
    try:
        tasks = load_tasks(p)
    except TaskFormatError as e:
        assert "\n" not in str(e) and str(e).startswith(str(p))
        return
    t = tasks[0]
    assert isinstance(t.metadata, dict) and all(isinstance(x, str) for x in t.tests)
    assert t.timeout_s is None or t.timeout_s > 0 and t.timeout_s < float("inf")


# --- MBPP splits ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("split,lo,hi,count", [("test", 11, 510, 500), ("train", 601, 974, 374),
                                               ("validation", 511, 600, 90), ("prompt", 1, 10, 10)])
def test_mbpp_split_takes_the_standard_id_range(shared_data, split, lo, hi, count):
    tasks = load_tasks(f"{shared_data}/mbpp/mbpp.jsonl:{split}")
    assert len(tasks) == count and {int(t.task_id) for t in tasks} == set(range(lo, hi + 1))
    plus = load_tasks(f"{shared_data}/mbpp/MbppPlus-v0.2.0.jsonl.gz:{split}")  # ids Mbpp/N: the same ranges
    assert plus and all(lo <= int(t.task_id.split("/")[1]) <= hi for t in plus)


def test_split_errors(tmp_path, shared_data):
    with pytest.raises(TaskFormatError, match="unknown split 'dev' \\(valid: prompt, test, validation, train\\)"):
        load_tasks(f"{shared_data}/mbpp/mbpp.jsonl:dev")
    p = write(tmp_path, GOOD)
    with pytest.raises(TaskFormatError, match="only defined for MBPP files"):
        load_tasks(f"{p}:train")


# --- train/eval overlap ------------------------------------------------------------------------------------------
def test_overlap_by_id_within_a_family_and_by_normalised_prompt():
    train = [Task("11", "Write a function to add.\nYour code should pass this test:\nassert add(1,2)==3\n", [],
                  metadata={"source": "mbpp"}),
             Task("x", "Reverse   a STRING.", [])]
    evals = {"plus": [Task("Mbpp/11", "something else", []), Task("Mbpp/12", "other", [])],
             "mine": [Task("y", '"""\nreverse a string\n"""', []), Task("11", "new", [])],
             "clean": [Task("z", "Sort a list.", [])]}
    found = {o.eval_set: o for o in overlap(train, evals)}
    assert set(found) == {"plus", "mine"}  # "11" in a codechat file is not MBPP's 11
    assert found["plus"].by_id == ["Mbpp/11"] and found["mine"].by_prompt == ["y"] and found["mine"].count == 1
    assert normalise_prompt(train[0].prompt) == "write a function to add assert add 1 2 == 3"
    with pytest.warns(UserWarning, match=r"train/eval overlap: 1 of 2 tasks of plus are also in T \(1 by id"):
        warn_overlap(train, {"plus": evals["plus"]}, "T")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_overlap(train, {"clean": evals["clean"]}) == []


def test_the_arith_sets_do_not_overlap_though_prompts_differ_only_in_operators():
    """`Expand $(x + 6)(x + 7)$.` and `Expand $(x - 6)(x - 7)$.` are different problems: no false overlap warning
    between the generated train and held-out arithmetic sets (split by a hash of the exact text)."""
    assert normalise_prompt("Expand $(x + 6)(x + 7)$.") != normalise_prompt("Expand $(x - 6)(x - 7)$.")
    assert overlap(load_tasks("builtin:arith-train"), {"heldout": load_tasks("builtin:arith-heldout")}) == []


def test_mbpp_plus_overlaps_sanitized_mbpp_completely(shared_data):
    """The issue's case: every MBPP+ task is in sanitized-mbpp.json; the split option shrinks but does not
    remove the overlap (MBPP+ spans all splits)."""
    plus = load_tasks(f"{shared_data}/mbpp/MbppPlus-v0.2.0.jsonl.gz")
    (o,) = overlap(load_tasks(f"{shared_data}/mbpp/sanitized-mbpp.json"), {"plus": plus})
    assert o.count == 378 == len(plus)
    (o,) = overlap(load_tasks(f"{shared_data}/mbpp/mbpp.jsonl:train"), {"plus": plus})
    assert len(o.by_id) == 108
    assert overlap(load_tasks(f"{shared_data}/mbpp/mbpp.jsonl:train"),
                   {"plus": load_tasks(f"{shared_data}/mbpp/MbppPlus-v0.2.0.jsonl.gz:test")})[0].by_id == []


def test_training_warns_at_load_time(tmp_path):
    from codechat.config.io import load_config
    from codechat.train.runner import load_task_sets
    cfg = load_config(None, ["data.train=builtin:toy", "data.eval=builtin:toy", f"run_dir={tmp_path}"])
    with pytest.warns(UserWarning, match="train/eval overlap: .* tasks of builtin:toy are also in builtin:toy"):
        load_task_sets(cfg)
