"""`codechat verify` and `codechat eval` on repository tasks."""
import json

from codechat.cli import main
from codechat.tasks.repo_family import generate_repo_tasks
from codechat.verifier.patches import make_diff

TASKS = generate_repo_tasks("heldout", 32, seed=0)  # = builtin:repo-heldout


def test_verify_patches(tmp_path, capsys):
    t = TASKS[0]
    (path, fixed), = t.solution.items()
    test_file = next(p for p in t.files if p.startswith("tests/"))
    lines = [{"task_id": t.task_id, "patch": make_diff(t.files.get, t.solution), "sample_id": 0},
             {"task_id": t.task_id, "files": {test_file: "def test_x():\n    assert True\n"}},
             {"task_id": t.task_id, "files": {"conftest.py": "import pytest\n"}},
             {"task_id": "nope", "patch": ""}, "not json"]
    (tmp_path / "p.jsonl").write_text("\n".join(l if isinstance(l, str) else json.dumps(l) for l in lines) + "\n")
    rc = main(["verify", "--tasks", "builtin:repo-heldout", "--completions", str(tmp_path / "p.jsonl"),
               "--out", str(tmp_path / "v.jsonl")])
    assert rc == 0
    out = [json.loads(l) for l in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert [o["status"] for o in out] == ["passed", "failed", "failed", "error", "error"]
    assert out[1]["dropped"] == [f"{test_file}: protected"] and "unknown task_id" in out[3]["message"]
    assert "resolve rate 20.0% (1/5)" in capsys.readouterr().out


def test_verify_reads_swebench_predictions(tmp_path):
    t = TASKS[0]
    pred = {"instance_id": t.task_id, "model_name_or_path": "m", "model_patch": make_diff(t.files.get, t.solution)}
    (tmp_path / "preds.jsonl").write_text(json.dumps(pred) + "\n")
    assert main(["verify", "--tasks", "builtin:repo-heldout", "--completions", str(tmp_path / "preds.jsonl"),
                 "--out", str(tmp_path / "v.jsonl")]) == 0
    out = json.loads((tmp_path / "v.jsonl").read_text())
    assert out["task_id"] == t.task_id and out["status"] == "passed"


def test_eval_scripted_reference(tmp_path, capsys):
    rc = main(["eval", "--model", "scripted:reference", "--tasks", "builtin:repo-heldout", "--n", "2", "--k", "1,2",
               "--limit", "2", "--out", str(tmp_path / "ev")])
    assert rc == 0
    summary = json.loads((tmp_path / "ev" / "summary.json").read_text())["metrics"]
    assert summary["resolve@1"] == summary["resolve@2"] == 1.0 and summary["tested_before_submit"] == 1.0
    assert summary["episodes"] == 4 and summary["truncated"] == 0 and summary["protected_attempts"] == 0
    samples = [json.loads(l) for l in (tmp_path / "ev" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4 and samples[0]["turns"][-1]["tool"] == "submit"
    tr = samples[0]["transcript"]
    assert len(tr["tokens"]) == len(tr["is_model"]) == len(tr["logprobs"]) and sum(tr["is_model"]) > 0


def test_eval_needs_a_model_for_repo_tasks(capsys):
    assert main(["eval", "--tasks", "builtin:repo-heldout", "--completions", "x.jsonl"]) == 2
    assert "needs --model" in capsys.readouterr().err


def test_missing_swebench_repo_is_one_line(shared_data, tmp_path, capsys):
    rc = main(["eval", "--model", "scripted:reference", "--tasks", str(shared_data / "repo" / "swe-bench-lite-test.json"),
               "--repos", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "not found under" in err


def test_chat_drives_the_tools_by_hand(monkeypatch, capsys):
    t = next(t for t in TASKS if t.metadata["unit"] == "is_leap")
    (path, fixed), = t.solution.items()
    lines = iter(["/issue", f'read_file {{"path": "{path}"}}', 'write_file {"path": "tests/test_dates.py", "content": ""}',
                  "write_file " + json.dumps({"path": path, "content": fixed}), "/diff", "/judge", "nope", "/quit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    assert main(["chat", "--repo-task", "builtin:repo-heldout", "--task-id", t.task_id]) == 0
    out = capsys.readouterr().out
    assert "is_leap(1900)" in out and "   1 def is_leap(year):" in out and "is protected" in out
    assert f"+++ b/{path}" in out and "passed: " in out and "unknown tool 'nope'" in out


def test_chat_without_model_or_task_is_one_line(capsys):
    assert main(["chat"]) == 2 and "needs MODEL_OR_RUN_DIR" in capsys.readouterr().err


def test_memory_mb_limits_repository_tests(tmp_path):
    task = {"kind": "repo", "task_id": "mem", "problem": "allocates 600 MiB", "files": {"lib.py": "N = 1\n"},
            "hidden_tests": {"tests/test_mem.py": "import lib\n\ndef test_big():\n"
                             "    assert len(bytearray(600 << 20)) == 600 << 20\n"}}
    (tmp_path / "t.jsonl").write_text(json.dumps(task) + "\n")
    (tmp_path / "p.jsonl").write_text(json.dumps({"task_id": "mem", "patch": ""}) + "\n")
    statuses = []
    for extra in ([], ["--memory-mb", "300"]):
        assert main(["verify", "--tasks", str(tmp_path / "t.jsonl"), "--completions", str(tmp_path / "p.jsonl"),
                     "--out", str(tmp_path / "v.jsonl"), *extra]) == 0
        statuses.append(json.loads((tmp_path / "v.jsonl").read_text())["status"])
    assert statuses == ["passed", "failed"]
