"""Why repository episodes fail: each episode (a `samples.jsonl` row of an evaluation) gets one outcome.

    python bench/agent_failures.py runs/demo-agent-quick          # every eval-*/samples.jsonl of a demo run
    breakdown = failure_breakdown(samples)                          # -> FailureBreakdown (shares and counts)

Outcomes, the first that applies: `passed`; `broken` (the judge could not run the hidden tests on the changes:
verdict status other than passed/failed, e.g. `no_tests` when the module no longer imports); `unsubmitted` (the
workspace changed but a budget ended the episode before submit); `wrong_fix` (changed, submitted, a hidden
test fails); then the workspace is unchanged: `noop_edit` (an edit call succeeded and changed nothing: `old`
== `new`, or a function rewritten as it was, which the "bug left in" expert transcripts teach), `failed_edit`
(every edit, replace_function or write_file call failed, e.g. `old` not found), `no_edit` (none was made). Turn habits: the share of model turns without a successful call, split by
whether the turn before it failed (`bad_after_error` vs `bad_after_ok`: does the model recover from an error
result?). `advantage_mass`: over a GRPO run's rollouts.jsonl, which episodes carry the update's weight (the share of
|advantage| x model characters from passing, failing-submitted and truncated episodes).

Simplifications: reads the stored episode dicts only (no task, no workspace), so an edit that changed the file
and a later edit that changed it back count as `wrong_fix`/`unsubmitted` or as unchanged by the final changes.
"""
from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from codechat import CodechatError
from codechat.rollout.tools import RESULT_CLOSE, RESULT_OPEN

OUTCOMES = ("passed", "broken", "unsubmitted", "wrong_fix", "noop_edit", "failed_edit", "no_edit")
"""Every outcome `classify` returns, in its order of precedence."""
EDIT_TOOLS = ("edit", "write_file", "replace_function")
_KEYS = ("passed", "changes", "submitted", "verdict", "turns")


@dataclass
class FailureBreakdown:
    """Outcomes and turn habits of a set of episodes."""

    episodes: int
    """Episodes read."""
    counts: dict[str, int] = field(default_factory=dict)
    """Outcome -> episodes (every name of OUTCOMES, 0 when none)."""
    bad_turn_share: float = 0.0
    """Share of model turns whose call was malformed or whose tool failed."""
    bad_after_error: float = 0.0
    """Of the turns right after a failed turn, the share that fail too (0 when there are none)."""
    bad_after_ok: float = 0.0
    """Of the turns right after a successful turn, the share that fail."""

    def shares(self) -> dict[str, float]:
        return {k: v / max(self.episodes, 1) for k, v in self.counts.items()}


def _check(sample, where: str) -> None:
    if not isinstance(sample, dict):
        raise CodechatError(f"{where}: an episode must be a JSON object, got {type(sample).__name__}")
    missing = [k for k in _KEYS if k not in sample]
    if missing:
        raise CodechatError(f"{where}: episode lacks {', '.join(missing)} (not an evaluation's samples.jsonl row?)")
    if not isinstance(sample["turns"], list) or not all(isinstance(t, dict) for t in sample["turns"]) \
            or not isinstance(sample["verdict"], dict):
        raise CodechatError(f"{where}: `turns` must be a list of objects and `verdict` an object")


def classify(sample: dict, where: str = "episode") -> str:
    """The outcome of one episode dict (OUTCOMES); a malformed one fails naming `where`."""
    _check(sample, where)
    if sample["passed"]:
        return "passed"
    if sample["verdict"].get("status", "failed") != "failed":
        return "broken"
    if sample["changes"]:
        return "wrong_fix" if sample["submitted"] else "unsubmitted"
    edits = [t for t in sample["turns"] if t.get("tool") in EDIT_TOOLS]
    if any(t.get("ok") for t in edits):  # it succeeded, yet nothing changed: `old` == `new`, the same code again
        return "noop_edit"
    return "failed_edit" if edits else "no_edit"


def failure_breakdown(samples: list[dict], where: str = "samples") -> FailureBreakdown:
    """Outcome counts and turn habits over the episodes."""
    counts = Counter({k: 0 for k in OUTCOMES})
    turns = bad = 0
    after = {True: [0, 0], False: [0, 0]}  # previous turn ok? -> [turns, bad ones]
    for i, s in enumerate(samples):
        counts[classify(s, f"{where}[{i}]")] += 1
        prev = None
        for t in s["turns"]:
            b = not t.get("ok")
            turns += 1
            bad += b
            if prev is not None:
                after[prev][0] += 1
                after[prev][1] += b
            prev = not b
    rate = (lambda n, k: k / n if n else 0.0)
    return FailureBreakdown(len(samples), dict(counts), rate(turns, bad), rate(*after[False]), rate(*after[True]))


_RESULT = re.compile(re.escape(RESULT_OPEN) + ".*?" + re.escape(RESULT_CLOSE), re.S)


def advantage_mass(rollouts: list[dict], where: str = "rollouts") -> dict[str, float]:
    """GRPO rollouts rows (step, group, reward, finish_reason, completion) -> {passed, failed, truncated}: each
    kind's share of sum |A| x model characters over the groups whose rewards differ (A = (r - mean) / std, the
    unbiased group std, as algos.grpo); a proxy for how much of a token-mean update each kind of episode drives.
    Model characters: the completion without its tool results. {} when no group has variance."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for i, r in enumerate(rollouts):
        if not isinstance(r, dict) or not all(k in r for k in ("step", "group", "reward", "completion")) \
                or not isinstance(r["completion"], str) or not isinstance(r["reward"], (int, float)):
            raise CodechatError(f"{where}[{i}]: a rollout needs step, group, a numeric reward and a completion")
        groups[(r["step"], r["group"])].append(r)
    mass = Counter({"passed": 0.0, "failed": 0.0, "truncated": 0.0})
    for g in groups.values():
        rewards = [float(r["reward"]) for r in g]
        if len(g) < 2 or len(set(rewards)) == 1:
            continue
        mean, std = statistics.mean(rewards), statistics.stdev(rewards)
        for r, x in zip(g, rewards):
            kind = "passed" if x > mean else "truncated" if r.get("finish_reason") == "length" else "failed"
            mass[kind] += abs(x - mean) / std * len(_RESULT.sub("", r["completion"]))
    total = sum(mass.values())
    return {k: v / total for k, v in mass.items()} if total else {}
