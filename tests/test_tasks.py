"""Task loaders: every shared MBPP file loads with the README's counts; each bad input names file and line."""
import gzip
import json

import pytest

from codechat.cli import main
from codechat.tasks import TaskFormatError, load_tasks, load_tasks_with_format, save_tasks

COUNTS = {
    "mbpp.jsonl": (974, "mbpp"),
    "sanitized-mbpp.json": (427, "mbpp-sanitized"),
    "MbppPlus-v0.2.0.jsonl.gz": (378, "evalplus"),
    "MbppPlus-NoExtreme-v0.2.0.jsonl.gz": (378, "evalplus"),
    "MbppPlus-OriginFmt-v0.2.0.jsonl.gz": (378, "mbpp-originfmt"),
}


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_shared_mbpp_files_load_with_readme_counts(shared_data, name):
    tasks, fmt = load_tasks_with_format(shared_data / "mbpp" / name)
    assert (len(tasks), fmt) == COUNTS[name]
    assert all(t.tests and t.entry_point and t.solution for t in tasks)


def test_mbpp_details(shared_data):
    tasks = {t.task_id: t for t in load_tasks(shared_data / "mbpp" / "mbpp.jsonl")}
    assert len(tasks["11"].tests) == 3 and "\r" not in tasks["11"].solution
    assert tasks["367"].setup  # test_setup_code kept
    assert tasks["11"].metadata["challenge_tests"]
    plus = {t.task_id: t for t in load_tasks(shared_data / "mbpp" / "MbppPlus-v0.2.0.jsonl.gz")}
    t = plus["Mbpp/2"]
    assert t.entry_point == "similar_elements" and t.metadata["base_input"] and t.metadata["plus_input"]
    assert "atol" in t.metadata
    assert sum(len(t.metadata["base_input"]) for t in plus.values()) == 1174


def test_builtin_set_is_well_formed():
    """Unique ids, tests that compile, and every reference solution defines the entry point its tests call."""
    import ast

    tasks = load_tasks("builtin")
    assert len({t.task_id for t in tasks}) == len(tasks) > 0
    for t in tasks:
        assert t.tests, t.task_id
        for test in t.tests:
            compile(test, t.task_id, "exec")
        if t.solution and t.entry_point:
            defined = {n.name for n in ast.walk(ast.parse(t.solution)) if isinstance(n, ast.FunctionDef)}
            assert t.entry_point in defined, t.task_id
            assert any(t.entry_point in test for test in t.tests), t.task_id


def test_humaneval_format(tmp_path):
    rec = {"task_id": "HumanEval/0", "prompt": "def add(a, b):\n", "canonical_solution": "    return a + b\n",
           "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n", "entry_point": "add"}
    p = tmp_path / "he.jsonl.gz"
    p.write_bytes(gzip.compress((json.dumps(rec) + "\n").encode()))
    tasks, fmt = load_tasks_with_format(p)
    assert fmt == "humaneval" and tasks[0].tests[0].rstrip().endswith("check(add)")
    assert tasks[0].solution == rec["prompt"] + rec["canonical_solution"]


def test_roundtrip_own_schema(tmp_path, shared_data):
    tasks = load_tasks(shared_data / "mbpp" / "sanitized-mbpp.json")[:5]
    save_tasks(tasks, tmp_path / "t.jsonl")
    again, fmt = load_tasks_with_format(tmp_path / "t.jsonl")
    assert fmt == "codechat"
    assert [(t.task_id, t.prompt, t.tests, t.setup, t.solution) for t in again] == \
           [(t.task_id, t.prompt, t.tests, t.setup, t.solution) for t in tasks]


def _write(tmp_path, text, name="bad.jsonl"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _error(path, fmt=None):
    with pytest.raises(TaskFormatError) as e:
        load_tasks(path, fmt)
    return str(e.value)


GOOD = '{"task_id": "a", "prompt": "p", "tests": ["assert True"]}\n'


def test_error_malformed_json_names_file_and_line(tmp_path):
    p = _write(tmp_path, GOOD + '{"task_id": "b", "prompt": \n')
    msg = _error(p)
    assert str(p) in msg and ":2:" in msg and "malformed JSON" in msg


def test_error_missing_field(tmp_path):
    p = _write(tmp_path, GOOD + '{"task_id": "b", "tests": []}\n')
    msg = _error(p, "codechat")
    assert f"{p}:2" in msg and "'prompt'" in msg


def test_error_duplicate_id(tmp_path):
    p = _write(tmp_path, GOOD + GOOD)
    msg = _error(p)
    assert f"{p}:2" in msg and "duplicate task_id 'a'" in msg


def test_error_empty_file(tmp_path):
    p = _write(tmp_path, "\n\n")
    assert f"{p}: empty file" in _error(p)


def test_error_unknown_format(tmp_path):
    p = _write(tmp_path, '{"question": "q", "answer": 1}\n')
    msg = _error(p)
    assert f"{p}:1" in msg and "unknown format" in msg
    assert "unknown format 'xml'" in _error(_write(tmp_path, GOOD, "ok.jsonl"), "xml")


def test_error_missing_file(tmp_path):
    assert "no such file" in _error(tmp_path / "nope.jsonl")


def test_cli_prints_one_line_error(tmp_path, capsys):
    p = _write(tmp_path, GOOD + "not json\n")
    assert main(["tasks", "show", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(p) in err and "Traceback" not in err


def test_cli_show_warns_about_duplicates_free_and_prints_examples(shared_data, capsys):
    assert main(["tasks", "show", str(shared_data / "mbpp" / "mbpp.jsonl"), "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "format: mbpp" in out and "tasks: 974" in out and "--- 1 " in out


def test_cli_show_takes_every_spec_training_takes(shared_data, capsys):
    """FILE:SPLIT, A+B and a repository set, as data.train takes them (not "no such file")."""
    assert main(["tasks", "show", f"{shared_data}/mbpp/mbpp.jsonl:train", "--limit", "0"]) == 0
    assert "format: mbpp 374\ntasks: 374" in capsys.readouterr().out
    assert main(["tasks", "show", "builtin:toy+builtin:basic", "--limit", "0"]) == 0
    assert "format: builtin:basic 53, builtin:toy 10\ntasks: 63" in capsys.readouterr().out
    assert main(["tasks", "show", "builtin:repo-train", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "format: repository tasks" in out and "--- " in out
    assert main(["tasks", "show", f"{shared_data}/mbpp/mbpp.jsonl:dev"]) == 2
    assert "unknown split 'dev'" in capsys.readouterr().err


def test_cli_show_warns_on_tasks_without_tests(tmp_path, capsys):
    p = _write(tmp_path, '{"task_id": "a", "prompt": "p", "tests": []}\n')
    assert main(["tasks", "show", str(p)]) == 0
    assert "warning: task a: no tests" in capsys.readouterr().out
