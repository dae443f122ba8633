"""`codechat verify`: results per completion line, a summary, and bad input reported without crashing."""
import json

import pytest

from codechat.cli import main
from codechat.serve.batch import BadVerifyRequest, parse

TASKS = [{"task_id": "add", "prompt": "Write add(a, b).", "entry_point": "add",
          "tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]},
         {"task_id": "neg", "prompt": "Write neg(x).", "entry_point": "neg", "tests": ["assert neg(1) == -1"]}]


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def test_verify_cli_end_to_end(tmp_path, capsys):
    tasks, comps, out = tmp_path / "tasks.jsonl", tmp_path / "comps.jsonl", tmp_path / "out.jsonl"
    write_jsonl(tasks, TASKS)
    write_jsonl(comps, [
        {"task_id": "add", "sample_id": 0, "completion": "```python\ndef add(a, b):\n    return a + b\n```"},
        {"task_id": "add", "sample_id": 1, "completion": "def add(a, b):\n    return a - b\n"},
        {"task_id": "neg", "completion": "def neg(x):\n    return -x\n"},
        {"task_id": "nope", "completion": "x = 1"},
        "{not json",
        {"task_id": "neg", "completion": ""},
        {"completion": "def neg(x): return -x"},
    ])
    rc = main(["verify", "--tasks", str(tasks), "--completions", str(comps), "--out", str(out),
               "--workers", "2", "--timeout", "3", "--quiet"])
    captured = capsys.readouterr()
    assert rc == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["passed", "failed", "passed", "error", "error", "no_code", "error"]
    assert rows[0]["sample_id"] == 0 and rows[0]["task_id"] == "add" and rows[1]["tests_passed"] == 0
    assert "unknown task_id 'nope'" in captured.err and "malformed line" in captured.err
    assert "empty completion" in captured.err and "missing task_id" in captured.err
    assert "pass rate 28.6% (2/7)" in captured.out and "no_code" in captured.out


def test_verify_cli_needs_its_files(tmp_path, capsys):
    assert main(["verify", "--tasks", str(tmp_path / "x.jsonl")]) == 2
    assert "needs --tasks, --completions and --out" in capsys.readouterr().err


def test_regress_bad_attack_files_are_one_line_errors(tmp_path, capsys):
    """Before any sandbox starts: a missing file, a line that is not JSON (or not UTF-8), a record without its
    task or completion, each named by file and line."""
    p = tmp_path / "attacks.jsonl"
    cases = [(None, "attacks.jsonl: no such attack file"),
             (b'{"task": {"task_id": "t", "tests": []}, "completion": ""}\n{oops\n', "attacks.jsonl:2: invalid JSON"),
             (b'{"task": {"task_id": "t", "tests": []}}\n', "attacks.jsonl:1: malformed attack record"),
             (b'{"completion": "\xff"}\n', "attacks.jsonl:1: attack file is not UTF-8 text")]
    for data, needle in cases:
        if data is not None:
            p.write_bytes(data)
        assert main(["verify", "--regress", str(p)]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err


def test_every_unknown_task_id_is_reported_in_one_line_before_other_warnings(tmp_path, capsys):
    """Many bad lines first (over the cap of 20 per-line warnings), then completions naming six distinct task ids
    that are not in the task set (one of them twice): one line names the count, the first ids and the task file."""
    tasks, comps, out = tmp_path / "tasks.jsonl", tmp_path / "comps.jsonl", tmp_path / "out.jsonl"
    write_jsonl(tasks, TASKS)
    unknown = [{"task_id": f"nope{i}", "completion": "x = 1"} for i in (1, 2, 3, 4, 5, 6, 1)]
    write_jsonl(comps, [{"task_id": "add", "completion": ""}] * 25 + unknown)
    assert main(["verify", "--tasks", str(tasks), "--completions", str(comps), "--out", str(out),
                 "--workers", "1", "--quiet"]) == 0
    err = capsys.readouterr().err.splitlines()
    named = [line for line in err if "unknown task_id" in line]
    assert len(named) == 1, err
    assert "'nope1', 'nope2', 'nope3', 'nope4', 'nope5' and 1 more (6 distinct)" in named[0]
    assert "(7 lines, first 26)" in named[0] and str(tasks) in named[0] and err[0] == named[0]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["message"] for r in rows[25:]] == [f"unknown task_id 'nope{i}'" for i in (1, 2, 3, 4, 5, 6, 1)]


def test_eval_of_a_completions_file_reports_every_unknown_task_id(tmp_path, capsys):
    p = tmp_path / "c.jsonl"
    write_jsonl(p, ["not json"] * 21 + [{"task_id": f"nope{i}", "completion": "x"} for i in range(3)])
    assert main(["eval", "--completions", str(p), "--tasks", "builtin:toy", "--k", "1",
                 "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "unknown task_id 'nope0', 'nope1', 'nope2' (3 lines, first 22)" in err and "and 2 more" in err


def test_a_verify_request_names_all_its_unknown_task_ids():
    body = {"tasks": TASKS, "completions": [{"task_id": t, "completion": "x"} for t in ("add", "a", "b", "neg", "c")]}
    with pytest.raises(BadVerifyRequest, match=r"unknown task_id 'a', 'b', 'c' \(3 completions, first 1\)"):
        parse(body, {}, max_batch=10)
