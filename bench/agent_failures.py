"""Why a demo run's evaluated episodes fail: outcome shares per evaluation (codechat/rollout/failures.py).

    python bench/agent_failures.py runs/demo-agent-quick [more run dirs or samples.jsonl files]

For every RUN_DIR/eval-*/samples.jsonl (or a samples.jsonl given directly): the episodes' outcomes (passed,
broken, unsubmitted, wrong_fix, noop_edit, failed_edit, no_edit) as counts, the share of bad model turns and
that share right after a failed turn vs after a successful one; for every RUN_DIR/grpo/rollouts.jsonl, the share
of |advantage| x model characters from passing, failing and truncated episodes (`advantage_mass`). No model
runs: it reads the stored episodes. Ends with one JSON line: {PATH: {"episodes", "counts", "bad_turn_share",
"bad_after_error", "bad_after_ok"} or {"passed", "failed", "truncated"} for a rollouts file}.
"""
import argparse
import json
from dataclasses import asdict
from pathlib import Path

from codechat import CodechatError
from codechat.rollout.failures import advantage_mass, failure_breakdown

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
for f in [p / "grpo" / "rollouts.jsonl" for p in map(Path, args.paths) if (p / "grpo" / "rollouts.jsonl").is_file()]:
    try:
        m = advantage_mass([json.loads(line) for line in f.read_text().splitlines() if line.strip()], str(f))
    except (json.JSONDecodeError, CodechatError) as e:
        raise SystemExit(f"{f}: {e}")
    out[str(f)] = m
    print(f"{f}: |A| x model chars " + ", ".join(f"{k} {v:.2f}" for k, v in m.items()))
print(json.dumps(out))
