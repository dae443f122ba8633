"""Two evaluations side by side (`codechat eval --compare A B`): metrics, gained and lost tasks, and a paired
bootstrap interval for the pass@1 difference over the tasks both cover; a warning when they cover different
tasks (or were run with different settings, as far as their summary.json records them)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from codechat import CodechatError
from codechat.evaluation.stats import paired_bootstrap

SETTINGS = ("tasks", "n", "temperature", "top_p", "max_new_tokens", "seed", "chat")


def load_summary(d: str) -> dict:
    f = Path(d) / "summary.json"
    if not f.is_file():
        raise CodechatError(f"{d}: no summary.json (not an eval output directory)")
    try:
        data = json.loads(f.read_text())
    except ValueError as e:
        raise CodechatError(f"{f}: unreadable ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("per_task"), dict):
        raise CodechatError(f"{f}: not an eval summary (no per_task)")
    return data


def task_score(t: dict) -> float | None:
    """A task's pass@1 estimate: c/n when sampled, else its greedy result."""
    if t.get("n"):
        return t["c"] / t["n"]
    return float(t["greedy"]) if "greedy" in t else None


def compare(a: str, b: str, warn=None) -> str:
    warn = warn or (lambda msg: print(f"warning: {msg}", file=sys.stderr))
    runs = [load_summary(a), load_summary(b)]
    pa, pb = runs[0]["per_task"], runs[1]["per_task"]
    common = sorted(set(pa) & set(pb))
    if set(pa) != set(pb):
        only_a, only_b = sorted(set(pa) - set(pb)), sorted(set(pb) - set(pa))
        warn(f"the two evaluations cover different tasks: {len(only_a)} only in A ({', '.join(only_a[:5])}), "
             f"{len(only_b)} only in B ({', '.join(only_b[:5])}); the metrics below are over each one's own tasks, "
             f"the paired difference over the {len(common)} common ones")
    prov = [r.get("provenance") or {} for r in runs]
    differ = [k for k in SETTINGS if k in prov[0] and k in prov[1] and prov[0][k] != prov[1][k]]
    if differ:
        warn("the two evaluations differ in " + ", ".join(f"{k} ({prov[0][k]!r} vs {prov[1][k]!r})" for k in differ))
    lines = [f"| metric | {a} | {b} | delta |", "|---|---|---|---|"]
    for k in sorted(set(runs[0]["metrics"]) & set(runs[1]["metrics"])):
        x, y = runs[0]["metrics"][k], runs[1]["metrics"][k]
        lines.append(f"| {k} | {x:.4f} | {y:.4f} | {y - x:+.4f} |")

    def solved(t):
        return t.get("greedy", t.get("c", 0) > 0)
    gained = [t for t in common if solved(pb[t]) and not solved(pa[t])]
    lost = [t for t in common if solved(pa[t]) and not solved(pb[t])]
    lines += ["", f"gained ({len(gained)}): {', '.join(gained[:50])}", f"lost ({len(lost)}): {', '.join(lost[:50])}"]
    for label, score in (("pass@1", task_score),
                         ("greedy pass@1", lambda t: float(t["greedy"]) if "greedy" in t else None)):
        pairs = [(score(pa[t]), score(pb[t])) for t in common]
        pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
        if pairs:
            ci = paired_bootstrap([x for x, _ in pairs], [y for _, y in pairs])
            lines.append(f"{label} B - A: {ci}")
    return "\n".join(lines)
