"""`codechat verify`, `eval` and `train` work unchanged on stdin/stdout tasks (and on the APPS folders)."""
import json

from codechat.cli import main
from codechat.config.io import load_config
from codechat.train import train

TASKS = [{"task_id": f"double-{i}", "prompt": "Print twice the number.", "kind": "stdio",
          "tests": [{"input": f"{n}\n", "output": f"{2 * n}\n"} for n in (i, i + 1, i + 7)],
          "solution": "print(2 * int(input()))"} for i in range(3)]


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_verify_cli_on_stdio_tasks(tmp_path):
    tasks = write(tmp_path / "t.jsonl", TASKS)
    comps = write(tmp_path / "c.jsonl", [
        {"task_id": "double-0", "completion": "```python\nprint(2 * int(input()))\n```"},
        {"task_id": "double-1", "completion": "print(int(input()) + 2)"},
        {"task_id": "double-2", "completion": "Sorry, I cannot do that."}])
    out = tmp_path / "r.jsonl"
    assert main(["verify", "--tasks", str(tasks), "--completions", str(comps), "--out", str(out), "--quiet",
                 "--workers", "2"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["status"], r["tests_passed"], r["tests_total"]) for r in rows] == \
        [("passed", 3, 3), ("failed", 1, 3), ("no_code", 0, 3)]
    assert rows[0]["cpu_s"] > 0


def test_verify_cli_cpu_time_flag(tmp_path):
    # sleeping 1.2 s with a 1 s limit: a wall-clock timeout, but well under the limit in CPU time
    tasks = write(tmp_path / "t.jsonl", [{**TASKS[0], "timeout_s": 1.0}])
    comps = write(tmp_path / "c.jsonl", [{"task_id": "double-0",
                                          "completion": "import time\ntime.sleep(1.2)\nprint(2 * int(input()))"}])
    statuses = []
    for flag in ([], ["--cpu-time"]):
        out = tmp_path / f"r{len(flag)}.jsonl"
        main(["verify", "--tasks", str(tasks), "--completions", str(comps), "--out", str(out), "--quiet",
              "--workers", "1", *flag])
        statuses.append(json.loads(out.read_text())["status"])
    assert statuses == ["timeout", "passed"]


def test_eval_completions_on_an_apps_folder(shared_data, tmp_path, capsys):
    from codechat.tasks import load_tasks

    tasks = load_tasks(shared_data / "stdio" / "apps")
    comps = write(tmp_path / "c.jsonl", [{"task_id": t.task_id, "completion": t.solution} for t in tasks]
                  + [{"task_id": t.task_id, "completion": "print(-1)"} for t in tasks])
    assert main(["eval", "--completions", str(comps), "--tasks", str(shared_data / "stdio" / "apps"), "--k", "1",
                 "--out", str(tmp_path / "ev"), "--workers", "2"]) == 0
    assert "| pass@1 | 0.5 |" in capsys.readouterr().out  # each task: its reference passes, print(-1) does not


def test_grpo_trains_on_stdio_tasks(tmp_path):
    tasks = write(tmp_path / "t.jsonl", TASKS)
    run = tmp_path / "run"
    train(load_config(None, [f"data.train={tasks}", "sampling.max_new_tokens=8", "log.progress=false",
                             "log.plot=false", "verifier.workers=2", "rl.prompts_per_step=2", "rl.group_size=2",
                             "checkpoint.every=0", "rl.steps=1", "stages=[grpo]", f"run_dir={run}",
                             "model.path=tiny"]))
    rows = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["task_id"] for r in rows} <= {t["task_id"] for t in TASKS}
