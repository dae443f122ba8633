"""A batch of 500 mixed samples through `codechat verify`: honest ones all pass, wrong ones all fail,
hostile ones (every attack of tests/attacks/attacks.jsonl, the batch-killers among them) never pass, and the
command exits 0 with one verdict per line."""
import json
from pathlib import Path

import pytest

from codechat.cli import main

ATTACKS = [json.loads(line) for line in (Path(__file__).parent / "attacks" / "attacks.jsonl").read_text()
           .splitlines() if line.strip()]
NEW = ("forged_hello_dunder_builtins", "forged_hello_module_import", "redefine_task_helper", "fake_numpy_alias",
       "mutates_its_argument", "realtime_signal_death", "huge_exception_type_name", "event_flood",
       "forged_reply_frames")
FAMILIES = {  # task id: (entry point, tests, honest, wrong)
    "b_add": ("add", ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
              "def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a - b\n"),
    "b_rev": ("rev", ["assert rev('abc') == 'cba'", "assert rev('') == ''"],
              "def rev(s):\n    return s[::-1]\n", "def rev(s):\n    return s\n"),
    "b_sort": ("srt", ["assert sorted(srt([3, 1, 2])) == [1, 2, 3]", "assert srt([2, 1]) == [1, 2]"],
               "def srt(xs):\n    return sorted(xs)\n", "def srt(xs):\n    return xs\n"),
    "b_inplace": ("push", ["xs = [1]\npush(xs, 2)\nassert xs == [1, 2]"],
                  "def push(xs, v):\n    xs.append(v)\n", "def push(xs, v):\n    xs = xs + [v]\n"),
    "b_close": ("half", ["assert abs(half(5) - 2.5) < 1e-6", "assert math.isclose(half(1), 0.5)"],
                "def half(x):\n    return x / 2\n", "def half(x):\n    return x // 2\n"),
}


def test_500_mixed_samples_every_verdict_right(tmp_path):
    tasks, rows, want = [], [], []
    for tid, (ep, tests, _, _) in FAMILIES.items():
        tasks.append({"task_id": tid, "prompt": f"Write {ep}.", "tests": tests, "entry_point": ep})
    for a in ATTACKS:
        tasks.append({**a["task"], "task_id": "atk_" + a["id"]})
    hostile = [a for a in ATTACKS] + [a for a in ATTACKS if a["id"] in NEW] * 5
    for i in range(200):
        tid = list(FAMILIES)[i % len(FAMILIES)]
        rows.append({"task_id": tid, "completion": FAMILIES[tid][2]})
        want.append(True)
        rows.append({"task_id": tid, "completion": FAMILIES[tid][3]})
        want.append(False)
    for a in hostile[:100]:
        rows.append({"task_id": "atk_" + a["id"], "completion": a["completion"]})
        want.append(False)
    assert len(rows) == 500
    for i, r in enumerate(rows):
        r["sample_id"] = i
    tfile, cfile, out = tmp_path / "tasks.jsonl", tmp_path / "c.jsonl", tmp_path / "r.jsonl"
    tfile.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    cfile.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rc = main(["verify", "--tasks", str(tfile), "--completions", str(cfile), "--out", str(out), "--workers", "2",
               "--timeout", "2", "--quiet"])
    assert rc == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(results) == 500
    by_id = {r["sample_id"]: r for r in results}
    wrong = [(i, rows[i]["task_id"], by_id[i]["status"], by_id[i]["message"][:80])
             for i in range(500) if by_id[i]["passed"] != want[i]]
    assert not wrong, wrong
    assert max(len(json.dumps(r)) for r in results) < 16384  # no verdict of megabytes
