"""Score the reference solutions of an evalplus file (default: MBPP+ v0.2.0) as candidates: expected outputs
come from running the same references in the sandbox, so anything below 100% is a harness problem.

    python bench/evalplus_refs.py [--tasks FILE] [--limit N] [--workers N]

FILE may be any evalplus file, MBPP+ OriginFmt too (there the file's own expected outputs are compared, and
the reference is run against them once for its time).
Ends with one JSON line: {"tasks", "base_pass", "plus_pass", "failed": [...], "seconds"}.
"""
import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from codechat.config import VerifierConfig
from codechat.evaluation.evaluate import evaluate_completions
from codechat.tasks import load_tasks
from codechat.verifier.verify import Verifier

DEFAULT = Path(os.environ.get("CODECHAT_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data") \
    / "mbpp" / "MbppPlus-v0.2.0.jsonl.gz"

ap = argparse.ArgumentParser()
ap.add_argument("--tasks", default=str(DEFAULT))
ap.add_argument("--limit", type=int, default=0)
ap.add_argument("--workers", type=int, default=0)
args = ap.parse_args()
tasks = load_tasks(args.tasks)[: args.limit or None]
with tempfile.TemporaryDirectory() as d:
    comp = Path(d) / "refs.jsonl"
    comp.write_text("".join(json.dumps({"task_id": t.task_id, "completion": t.solution}) + "\n" for t in tasks))
    t0 = time.time()
    with Verifier(VerifierConfig(workers=args.workers, timeout_s=20)) as v:
        rep = evaluate_completions(v, tasks, str(comp), [1])
    secs = time.time() - t0
failed = sorted(tid for tid, t in rep.per_task.items() if t["c"] < t["n"])
print(f"{len(tasks)} tasks: base {rep.metrics['base_pass@1']:.4f}, plus {rep.metrics['plus_pass@1']:.4f} in {secs:.0f}s")
print(json.dumps({"tasks": len(tasks), "base_pass": rep.metrics["base_pass@1"], "plus_pass": rep.metrics["plus_pass@1"],
                  "failed": failed, "seconds": round(secs, 1)}))
