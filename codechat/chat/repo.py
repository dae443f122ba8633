"""`codechat chat` on a repository task: drive the agent's tools by hand, or watch a model run an episode.

    codechat chat --repo-task builtin:repo-heldout --task-id repo-heldout-0000-is_leap-branch       # by hand
    codechat chat tiny --repo-task builtin:repo-heldout --task-id repo-heldout-0000-is_leap-branch  # watch

By hand, a line is a tool call: `read_file {"path": "corelib/dates.py"}`, `run_tests`, or the model's own
`<tool_call>{...}</tool_call>` text; `/issue` shows the problem, `/diff` the workspace's changes as a diff,
`/judge` runs the final judgement (hidden tests) on them, `/tools` lists the tools, `/quit` leaves. The tools
are those of an episode (same workspace sandbox, same output caps, protected paths refused).
Watching: one episode of the model, then each turn's text and tool result is printed, and the verdict.
"""
from __future__ import annotations

import json

from codechat.config import AgentConfig
from codechat.rollout.tools import TOOLS, ToolBox, ToolCall, parse_tool_call, tool_help
from codechat.tasks.repo import RepoTask
from codechat.verifier.patches import make_diff
from codechat.verifier.repo import RepoJudge

HELP = ("tool calls: NAME {json arguments} or <tool_call>{...}</tool_call>; /issue, /diff, /judge, /tools, /quit\n"
        + tool_help())


def parse_line(line: str) -> ToolCall:
    """`NAME`, `NAME {json}` or the model's `<tool_call>` format -> ToolCall (malformed: `error` is set)."""
    line = line.strip()
    if "<tool_call>" in line:
        return parse_tool_call(line)
    name, _, rest = line.partition(" ")
    if name not in TOOLS:
        return ToolCall("", error=f"unknown tool {name[:40]!r} (tools: {', '.join(TOOLS)})")
    try:
        args = json.loads(rest) if rest.strip() else {}
    except ValueError as e:
        return ToolCall(name, error=f"arguments are not valid JSON: {e}")
    return parse_tool_call("<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>")


class RepoChat:
    """One hand-driven session on a task: its own workspace, the episode's tools, judgement on demand."""

    def __init__(self, task: RepoTask, judge: RepoJudge, cfg: AgentConfig | None = None):
        self.task, self.judge = task, judge
        self.ws = judge.clone(task)
        self.box = ToolBox(task, self.ws, cfg or AgentConfig(), judge.hide_paths, judge.env_for(task))

    def handle(self, line: str) -> str | None:
        """The reply to one input line; None means the session is over."""
        cmd = line.strip()
        if not cmd:
            return ""
        if cmd in ("/quit", "/exit"):
            return None
        if cmd == "/issue":
            return self.task.problem
        if cmd == "/tools":
            return HELP
        if cmd == "/diff":
            base = self.ws.base
            return make_diff(lambda p: (base / p).read_text() if (base / p).is_file() else None,
                             self.ws.changes()) or "(no changes)"
        if cmd == "/judge":
            v = self.judge.judge(self.task, self.ws.changes())
            extra = f"; dropped: {', '.join(v.dropped)}" if v.dropped else ""
            return f"{v.status}: {v.tests_passed}/{v.tests_total} tests passed. {v.message}{extra}".strip()
        if cmd.startswith("/"):
            return f"unknown command {cmd.split()[0]} (/issue, /diff, /judge, /tools, /quit)"
        res = self.box.call(parse_line(cmd))
        return res.text + ("\n(submitted: /judge to see the verdict)" if res.submitted else "")

    def close(self) -> None:
        self.ws.remove()


def watch(result) -> str:
    """An episode's turns and verdict as text (for `codechat chat MODEL --repo-task ...`)."""
    lines = []
    for i, t in enumerate(result.transcript.turns):
        lines += [f"--- turn {i + 1} ({t.finish_reason}) ---", t.text.strip(), f"[{t.tool or 'no call'}] " +
                  (t.result.strip() if t.result else "")]
    v = result.verdict
    lines.append(f"=== {v.status} (reward {v.reward}); submitted={result.submitted} truncated={result.truncated or '-'}"
                 f" tool_calls={result.tool_calls} protected_attempts={result.protected_attempts}")
    return "\n".join(lines)
