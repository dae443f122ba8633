"""Reference check over the public task files beside the checkout: every reference solution judged right,
a do-nothing program never.

    PYTHONPATH=. python bench/real_references.py [--files leetcode,mbpp,...] [--limit N] [--workers 2]

For each file under ../shared/data that carries reference solutions (MBPP, MBPP sanitized, MBPP+, LeetCodeDataset,
APPS, CodeContests, LiveCodeBench, DeepCoder, GSM8K, MATH, QuixBugs), loads it as a user would (`load_tasks`), runs
every task's reference through the verifier, and do-nothing programs per task (`return None` and `return []` for function
tasks, no output for stdin/stdout tasks, an empty answer for answer tasks; for QuixBugs, a repository set, the
corrected program is the reference and the untouched buggy program and a `return None` body the do-nothing changes,
judged by `RepoJudge`). Tasks listed in
codechat/tasks/data/reference_quarantine.txt (the dataset's own faults, one reason each) are counted apart.
Tasks whose statement accepts several answers and that have no checker are counted apart (`several_answers`):
comparing output cannot judge them, and training leaves them out by default. Prints one JSON line per file
`{"file", "tasks", "reference_pass", "none_pass", "quarantined", "several_answers", "judged_pass_rate", "failing"}`
and a final line with the totals.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from codechat.config import VerifierConfig
from codechat.tasks import Task, load_tasks
from codechat.tasks.repo_loaders import load_quixbugs
from codechat.tasks.statement import not_unique
from codechat.verifier.repo import RepoJudge
from codechat.verifier.verify import Verifier

DATA = Path(os.environ.get("CODECHAT_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
QUARANTINE = Path(__file__).resolve().parents[1] / "codechat" / "tasks" / "data" / "reference_quarantine.txt"
FILES = {
    "mbpp": "mbpp/mbpp.jsonl", "mbpp-sanitized": "mbpp/sanitized-mbpp.json",
    "mbppplus": "mbpp/MbppPlus-v0.2.0.jsonl.gz", "mbppplus-noextreme": "mbpp/MbppPlus-NoExtreme-v0.2.0.jsonl.gz",
    "mbppplus-originfmt": "mbpp/MbppPlus-OriginFmt-v0.2.0.jsonl.gz",
    "leetcode": "leetcode/LeetCodeDataset-v0.2.0-train.jsonl.gz",
    "apps": "stdio/apps", "codecontests": "stdio/deepcoder-test-code_contests.json",
    "codeforces": "stdio/deepcoder-test-codeforces.json", "livecodebench": "stdio/deepcoder-test-livecodebench.json",
    "codecontests-sf": "stdio/codecontests-sandboxfusion.jsonl", "livecodebench-sf": "stdio/livecodebench-sandboxfusion.jsonl",
    "gsm8k": "math/gsm8k_test.jsonl", "math": "math/math-test-4500.jsonl", "quixbugs": "repo/quixbugs",
}


def quarantine() -> set[tuple[str, str]]:
    """(file key, task id) pairs whose reference is wrong for the dataset's own reason."""
    if not QUARANTINE.exists():
        return set()
    out = set()
    for line in QUARANTINE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, tid = line.split("\t")[:2]
            out.add((key, tid))
    return out


def do_nothing(task: Task) -> str:
    if task.kind == "answer":
        return "I do not know."
    if task.stdio is not None:
        return "```python\npass\n```"
    head = (task.entry_point or "f").split("(")[0].split(".")[0]
    if "(" in (task.entry_point or ""):  # `Solution().twoSum`: every method returns None
        return f"class {head}:\n    def __getattr__(self, name):\n        return lambda *a, **k: None\n"
    return f"def {head}(*a, **k):\n    return None\n"


def check_file(v: Verifier, key: str, path: Path, limit: int | None, held: set) -> dict:
    tasks = [t for t in load_tasks(path) if t.solution]
    tasks = tasks[:limit] if limit else tasks
    refs = v.verify_many([(t, t.solution if t.kind == "answer" or t.stdio is None else f"```python\n{t.solution}\n```")
                          for t in tasks])
    none = v.verify_many([(t, do_nothing(t)) for t in tasks])
    empty = [t for t in tasks if t.kind != "answer" and t.stdio is None and "(" not in (t.entry_point or "")]
    for t, r in zip(empty, v.verify_many([(t, do_nothing(t).replace("return None", "return []")) for t in empty])):
        if r.passed:  # `return []` passes a test that broadcasts (np.allclose) or asserts nothing
            print(f"  {key} {t.task_id}: `return []` passes", flush=True)
            none = [r if x is t else n for x, n in zip(tasks, none)]
    # several right answers and no checker: comparing output cannot judge them (left out of training by default)
    several = {t.task_id for t in tasks if not_unique(t)}
    failing = [t.task_id for t, r in zip(tasks, refs)
               if not r.passed and (key, t.task_id) not in held and t.task_id not in several]
    for t, r in zip(tasks, refs):
        if t.task_id in failing:
            print(f"  {key} {t.task_id}: {r.status} {(r.message or '')[:160]!r}", flush=True)
    q = sum((key, t.task_id) in held for t in tasks)
    judged = [r for t, r in zip(tasks, refs) if t.task_id not in several and (key, t.task_id) not in held]
    return {"file": key, "tasks": len(tasks), "reference_pass": sum(r.passed for r in refs), "none_pass":
            sum(r.passed for r in none), "quarantined": q, "several_answers": len(several),
            "several_answers_pass": sum(r.passed for t, r in zip(tasks, refs) if t.task_id in several),
            "judged_pass_rate": round(sum(r.passed for r in judged) / max(len(judged), 1), 4),
            "failing": failing[:50]}


def check_quixbugs(key: str, path: Path, limit: int | None, held: set) -> dict:
    """Repository tasks: the corrected program passes; the buggy one and a `return None` body do not."""
    tasks = [t for t in load_quixbugs(path) if t.metadata.get("solution")]
    tasks = tasks[:limit] if limit else tasks
    refs, none, failing = [], [], []
    with RepoJudge() as judge:
        for t in tasks:
            prog = next(iter(t.metadata["solution"]))
            name = Path(prog).stem
            r = judge.judge(t, dict(t.metadata["solution"]))
            refs.append(r.passed)
            none.append(judge.judge(t, {}).passed or judge.judge(
                t, {prog: f"def {name}(*a, **k):\n    return None\n"}).passed)
            if not r.passed and (key, t.task_id) not in held:
                failing.append(t.task_id)
                print(f"  {key} {t.task_id}: {r.status} {r.message[:160]!r}", flush=True)
    judged = [ok for t, ok in zip(tasks, refs) if (key, t.task_id) not in held]
    return {"file": key, "tasks": len(tasks), "reference_pass": sum(refs), "none_pass": sum(none),
            "quarantined": sum((key, t.task_id) in held for t in tasks), "several_answers": 0,
            "several_answers_pass": 0, "judged_pass_rate": round(sum(judged) / max(len(judged), 1), 4),
            "failing": failing[:50]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", default=",".join(FILES), help=f"comma-separated keys of {', '.join(FILES)}")
    ap.add_argument("--data", type=Path, default=DATA, help=f"the shared data folder (default {DATA})")
    ap.add_argument("--limit", type=int, default=None, help="first N tasks with a reference per file")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per program (2 busy cores are slow)")
    a = ap.parse_args()
    held = quarantine()
    total = {"file": "total", "tasks": 0, "reference_pass": 0, "none_pass": 0, "quarantined": 0, "several_answers": 0}
    t0 = time.time()
    with Verifier(VerifierConfig(workers=a.workers, timeout_s=a.timeout)) as v:
        for key in a.files.split(","):
            path = a.data / FILES[key]
            if not path.exists():
                print(json.dumps({"file": key, "skipped": f"{path} not found"}))
                continue
            row = (check_quixbugs(key, path, a.limit, held) if key == "quixbugs"
                   else check_file(v, key, path, a.limit, held))
            print(json.dumps(row), flush=True)
            for k in ("tasks", "reference_pass", "none_pass", "quarantined", "several_answers"):
                total[k] += row[k]
    total["wall_s"] = round(time.time() - t0, 1)
    print(json.dumps(total))


if __name__ == "__main__":
    main()
