"""Why a demo run's evaluated episodes fail: outcome shares per evaluation (codechat/rollout/failures.py).

    python bench/agent_failures.py runs/demo-agent-quick [more run dirs or samples.jsonl files]

For every RUN_DIR/eval-*/samples.jsonl (or a samples.jsonl given directly): the episodes' outcomes (passed,
broken, unsubmitted, wrong_fix, noop_edit, failed_edit, no_edit) as counts, the share of bad model turns and
that share right after a failed turn vs after a successful one. No model runs: it reads the stored episodes.
Ends with one JSON line: {PATH: {"episodes", "counts", "bad_turn_share", "bad_after_error", "bad_after_ok"}}.
"""
import argparse
import json
from dataclasses import asdict
from pathlib import Path

from codechat import CodechatError
from codechat.rollout.failures import failure_breakdown

ap = argparse.ArgumentParser()
ap.add_argument("paths", nargs="+", help="demo run directories or samples.jsonl files")
args = ap.parse_args()

files = []
for p in map(Path, args.paths):
    found = [p] if p.is_file() else sorted(p.glob("eval-*/samples.jsonl"))
    if not found:
        raise SystemExit(f"{p}: no samples.jsonl there (expected RUN_DIR/eval-*/samples.jsonl)")
    files += found
out = {}
for f in files:
    try:
        rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        b = failure_breakdown(rows, str(f))
    except (json.JSONDecodeError, CodechatError) as e:
        raise SystemExit(f"{f}: {e}")
    out[str(f)] = asdict(b)
    print(f"{f}: {b.episodes} episodes " + ", ".join(f"{k} {v}" for k, v in b.counts.items())
          + f"; bad turns {b.bad_turn_share:.2f} (after an error {b.bad_after_error:.2f}, after ok {b.bad_after_ok:.2f})")
print(json.dumps(out))
