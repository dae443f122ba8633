"""`codechat tasks check`: failing and flaky references are listed and quarantined; `data.exclude` drops them."""
import json

import pytest

from codechat import CodechatError
from codechat.cli import main
from codechat.config.io import load_config
from codechat.train.runner import load_task_sets

TASKS = [
    {"task_id": "ok", "prompt": "echo", "kind": "stdio", "tests": [{"input": "a\n", "output": "a\n"}],
     "solution": "print(input())"},
    {"task_id": "bad", "prompt": "echo", "kind": "stdio", "tests": [{"input": "a\n", "output": "b\n"}],
     "solution": "print(input())"},
    {"task_id": "coin", "prompt": "coin", "kind": "stdio", "tests": [{"input": "", "output": "1\n"}],
     "solution": "import os\nprint(os.urandom(1)[0] % 2)"},  # all 16 runs alike: p = 2^-15
    {"task_id": "noref", "prompt": "x", "tests": ["assert f() == 1"], "entry_point": "f"},
    {"task_id": "fn", "prompt": "x", "tests": ["assert f() == 1"], "entry_point": "f",
     "solution": "def f():\n    return 1"},
]


@pytest.fixture
def task_file(tmp_path):
    p = tmp_path / "tasks.jsonl"
    p.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    return p


def test_check_lists_failing_and_flaky_and_writes_a_quarantine(task_file, tmp_path, capsys):
    q = tmp_path / "quarantine.txt"
    rc = main(["tasks", "check", str(task_file), "--runs", "16", "--workers", "2", "--write-quarantine", str(q)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "bad: reference failed: test 0: wrong output" in out and "coin: flaky: " in out
    assert "checked 4 references x 16 runs: 1 failing, 1 flaky, 1 tasks without a reference" in out
    ids = {line.split("#")[0].strip() for line in q.read_text().splitlines()} - {""}
    assert ids == {"bad", "coin"}


def test_check_of_a_clean_set_exits_0(tmp_path, capsys):
    p = tmp_path / "clean.jsonl"
    p.write_text(json.dumps(TASKS[0]) + "\n" + json.dumps(TASKS[4]) + "\n")
    assert main(["tasks", "check", str(p), "--runs", "2", "--workers", "1"]) == 0
    assert main(["tasks", "check", str(p), "--runs", "0"]) == 2  # a bad value: one-line error
    assert "--runs must be at least 1" in capsys.readouterr().err


def test_data_exclude_drops_quarantined_tasks(task_file, tmp_path):
    q = tmp_path / "q.txt"
    q.write_text("# a comment\nbad  # reference failed\n\ncoin\n")
    base = [f"data.train={task_file}", f"data.eval={task_file}"]
    train, evals, _ = load_task_sets(load_config(None, base))
    assert {"bad", "coin"} <= {t.task_id for t in train}
    train, evals, _ = load_task_sets(load_config(None, base + [f"data.exclude={q}"]))
    assert {t.task_id for t in train} == {t.task_id for t in evals} == {"ok", "noref", "fn"}


def test_data_exclude_errors(task_file, tmp_path):
    with pytest.raises(CodechatError, match="data.exclude: .*missing.txt: no such file"):
        load_task_sets(load_config(None, [f"data.train={task_file}", f"data.exclude={tmp_path / 'missing.txt'}"]))
    everything = tmp_path / "all.txt"
    everything.write_text("".join(t["task_id"] + "\n" for t in TASKS))
    with pytest.raises(CodechatError, match="leaves no training task"):
        load_task_sets(load_config(None, [f"data.train={task_file}", f"data.exclude={everything}"]))
