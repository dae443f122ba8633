"""Multi-turn repository episodes: many advance together, each in its own workspace, judged at the end.

    judge = RepoJudge()
    results = EpisodeRunner(ModelAgent(policy, sampling), judge, AgentConfig()).run([(task, 0), (task, 1)])
    results[0].transcript.tokens, .is_model, .logprobs      # what the trainer needs, token for token

One episode: prompt (the issue, the tools, the file list) -> model turn (ends with one `<tool_call>`) -> the tool
runs in the workspace -> its result is appended -> ... until `submit`, an EOS turn without a call, or a budget
(task limits: turns, tool calls, wall time unless `agent.wall_budget` is off, tokens) ends it as truncated, and
so does the model's context: a turn starts only when its whole token budget fits after the transcript
(`truncated="context"`, at a turn boundary: every model turn of a transcript lies inside the context). Then the
workspace's changes go to `RepoJudge.judge` (a clean copy, hidden tests): reward 1 iff it passes. Every
episode is judged, submitted or not.

Batching: up to `AgentConfig.max_live` episodes are live; every step decodes one model turn of each of them as
a single batch (`Agent.act`), then runs their tool calls on `tool_workers` threads; a finished episode frees
its slot at once for the next job, and its judgement runs on the pool while the others continue.
KV across turns (`agent.kv_reuse`, on by default): each turn's decode is keyed by the episode, so the sampler keeps
the episode's KV and the next turn prefills only the last model token and the tool result (policy/prefix.py).
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

from codechat import CodechatError
from codechat.config import AgentConfig
from codechat.rollout.agents import Action, Agent, TurnState
from codechat.rollout.call_formats import get_call_format
from codechat.rollout.tools import ToolBox, ToolResult
from codechat.sandbox.workspace import Workspace
from codechat.tasks.repo import RepoTask
from codechat.verifier.repo import RepoJudge, RepoVerdict


@dataclass
class Turn:
    model_start: int
    """Index in `Transcript.tokens` of this turn's first model token."""
    model_end: int
    """One past its last model token; environment tokens of the result are [model_end, env_end)."""
    env_end: int
    text: str
    """The model's text of the turn."""
    finish_reason: str
    """`stop` or `length` (the turn hit its token budget)."""
    tool: str = ""
    """Tool called ("" when the turn held no well-formed call)."""
    arguments: dict = field(default_factory=dict)
    ok: bool = False
    """The tool call succeeded."""
    result: str = ""
    """The tool result as appended (inside the response markers)."""
    version: int = 0
    """Policy version that sampled this turn (`EpisodeRunner.run(before_turn=...)`; 0 without one): with partial
    rollouts the turns of one episode may come from different versions."""


@dataclass
class Transcript:
    tokens: list[int] = field(default_factory=list)
    """Every token of the episode in order: prompt, model turns, tool results."""
    is_model: list[bool] = field(default_factory=list)
    """Per token: True = sampled by the model (trained on), False = prompt or environment (masked out)."""
    logprobs: list[float] = field(default_factory=list)
    """Per token: the sampler's log-prob for model tokens, 0.0 for the others."""
    prompt_len: int = 0
    """Tokens of the initial prompt."""
    turns: list[Turn] = field(default_factory=list)

    def append(self, ids: list[int], model: bool, logprobs: list[float] | None = None) -> None:
        self.tokens += ids
        self.is_model += [model] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)


@dataclass
class EpisodeResult:
    task_id: str
    sample: int
    """Index of this episode among the task's samples."""
    transcript: Transcript
    verdict: RepoVerdict
    """Final judgement of the workspace's changes."""
    submitted: bool
    """The agent called submit."""
    truncated: str
    """"" or the budget that ended it: `turns`, `tool_calls`, `wall`, `tokens`, `context`."""
    tool_calls: int
    bad_calls: int
    """Turns without a well-formed call, and calls whose tool failed."""
    protected_attempts: int
    """Calls that tried to change a protected path (refused)."""
    tests_runs: int
    """run_tests calls."""
    tested_before_submit: bool
    """The last run_tests came after the last edit, before the end."""
    changes: dict
    """{path: text or None}: the workspace's changes as judged."""
    duration_s: float
    """From the episode's start to its judgement."""

    @property
    def reward(self) -> float:
        return self.verdict.reward

    def cut_to_context(self, context: int | None) -> EpisodeResult:
        """This episode with its transcript cut at the last turn boundary inside `context` tokens (marked
        truncated="context"); itself when it fits. The verdict stays the judgement of the whole episode."""
        t = self.transcript
        if context is None or len(t.tokens) <= context:
            return self
        turns = [u for u in t.turns if u.model_end <= context]
        end = t.prompt_len if not turns else turns[-1].env_end if turns[-1].env_end <= context else turns[-1].model_end
        if turns and turns[-1].env_end > end:
            turns[-1] = replace(turns[-1], env_end=end)
        cut = Transcript(t.tokens[:end], t.is_model[:end], t.logprobs[:end], t.prompt_len, turns)
        return replace(self, transcript=cut, truncated="context")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["reward"] = self.reward
        return d


_KEYS = itertools.count()
"""Episode ids, unique in the process: a stored KV never outlives its episode's key."""


class _Live:
    """One episode in progress."""

    def __init__(self, task: RepoTask, sample: int, ws: Workspace, box: ToolBox, prompt: list[int]):
        self.task, self.sample, self.ws, self.box = task, sample, ws, box
        self.key = next(_KEYS)
        self.t = Transcript()
        self.t.append(prompt, False)
        self.t.prompt_len = len(prompt)
        self.start = time.monotonic()
        self.tool_calls = self.bad_calls = self.protected = self.tests_runs = 0
        self.edited_since_test = False
        self.tested_ever = False
        self.submitted, self.truncated, self.done = False, "", False
        self.last_result = ""

    def budget(self, turn_tokens: int) -> int:
        """Most tokens the next turn may sample (the task's token budget caps it)."""
        return min(turn_tokens, self.task.limits.max_tokens - len(self.t.tokens))

    def over_budget(self, turn_tokens: int, context: int | None, wall: bool = True) -> str:
        lim = self.task.limits
        if len(self.t.turns) >= lim.max_turns:
            return "turns"
        if self.tool_calls >= lim.max_tool_calls:
            return "tool_calls"
        if wall and time.monotonic() - self.start > lim.wall_s:
            return "wall"
        if len(self.t.tokens) >= lim.max_tokens:
            return "tokens"
        if context is not None and len(self.t.tokens) + self.budget(turn_tokens) > context:
            return "context"
        return ""


class EpisodeRunner:
    def __init__(self, agent: Agent, judge: RepoJudge, cfg: AgentConfig):
        if cfg.max_live < 1 or cfg.tool_workers < 1 or cfg.turn_tokens < 1 or cfg.tool_output_chars < 100 \
                or cfg.run_timeout_s <= 0:
            raise CodechatError(f"agent: need max_live, tool_workers, turn_tokens >= 1, tool_output_chars >= 100 "
                                f"and run_timeout_s > 0 (got {cfg})")
        self.agent, self.judge, self.cfg = agent, judge, cfg
        self.parse = get_call_format(cfg.call_format).parse
        """The parser of `agent.call_format` (an unknown name fails here, listing the valid ones)."""
        self._lock = threading.Lock()
        self.step_sizes: list[int] = []
        """Live episodes per decode step of the last run (how full each batch was)."""
        self.act_s = 0.0
        """Seconds the last run spent in `Agent.act` (the batched decodes, for a model)."""
        self.tools_s = 0.0
        """Wall seconds the last run spent running the turns' tool calls (all live episodes' calls at once)."""
        self.judge_s = 0.0
        """Seconds of final judgements in the last run, summed over episodes (they overlap the other phases)."""
        self.judge_wait_s = 0.0
        """Seconds ended episodes waited for a tool thread before their judgement started, summed."""

    def run(self, jobs: list[tuple[RepoTask, int]], seed: int = 0,
            before_turn: Callable[[], int] | None = None) -> list[EpisodeResult]:
        """Run one episode per (task, sample index); results in the order of `jobs`. before_turn: called before
        every batched decode (it may load newer weights into the acting model); returns the policy version that
        decodes, recorded on each turn (`Turn.version`)."""
        pending = deque(enumerate(jobs))
        live: list[tuple[int, _Live]] = []
        judged: dict[int, Future] = {}
        self.step_sizes, self.act_s, self.tools_s, self.judge_s, self.judge_wait_s = [], 0.0, 0.0, 0.0, 0.0
        try:
            with ThreadPoolExecutor(self.cfg.tool_workers) as pool:
                step = 0
                while pending or live:
                    while pending and len(live) < self.cfg.max_live:
                        i, (task, sample) = pending.popleft()
                        live.append((i, self._start(task, sample)))
                    for i, e in live:
                        e.truncated = e.over_budget(self.cfg.turn_tokens, self.agent.context, self.cfg.wall_budget)
                        e.done = bool(e.truncated)
                    acting = [(i, e) for i, e in live if not e.done]
                    if acting:
                        self.step_sizes.append(len(acting))
                        states = [TurnState(e.task, len(e.t.turns), e.t.tokens, e.budget(self.cfg.turn_tokens),
                                            e.last_result, e.key if self.cfg.kv_reuse else None, e.sample)
                                  for _, e in acting]
                        version = before_turn() if before_turn is not None else 0
                        t0 = time.monotonic()
                        actions = self.agent.act(states, seed=seed * 1_000_003 + step)
                        t1 = time.monotonic()
                        self.act_s += t1 - t0
                        calls = [pool.submit(self._turn, e, a, version) for (_, e), a in zip(acting, actions)]
                        for c in calls:
                            c.result()
                        self.tools_s += time.monotonic() - t1
                    step += 1
                    for i, e in [x for x in live if x[1].done]:
                        judged[i] = pool.submit(self._finish, e, time.monotonic())
                    live = [x for x in live if not x[1].done]
                return [judged[i].result() for i in range(len(jobs))]
        finally:
            self.agent.end_run()  # a model agent's sampler drops the ended episodes' KV

    def _start(self, task: RepoTask, sample: int) -> _Live:
        ws = self.judge.clone(task)
        box = ToolBox(task, ws, self.cfg, self.judge.hide_paths, getattr(self.judge, "env_for", lambda t: None)(task),
                      getattr(self.judge, "warm", None))
        return _Live(task, sample, ws, box, self.agent.prompt(task, ws.listing(), self.cfg.call_format))

    def _turn(self, e: _Live, a: Action, version: int = 0) -> None:
        start = len(e.t.tokens)
        e.t.append(a.tokens, True, a.logprobs)
        call = self.parse(a.text)
        turn = Turn(start, len(e.t.tokens), len(e.t.tokens), a.text, a.finish_reason, call.name, call.arguments,
                    version=version)
        e.t.turns.append(turn)
        if call.error and a.eos:  # the model ended its turn without a call: the episode is over
            e.done = True
            return
        e.tool_calls += 1
        res: ToolResult = e.box.call(call)
        turn.ok, turn.result = res.ok, res.text
        e.bad_calls += not res.ok
        e.protected += res.protected_attempt
        if res.ran_tests:
            e.tests_runs += 1
            e.tested_ever, e.edited_since_test = True, False
        elif res.ok and call.name in ("write_file", "edit"):
            e.edited_since_test = True
        if res.submitted:
            e.submitted = e.done = True
            return
        e.t.append(self.agent.result_ids(res.text, a.eos), False)
        turn.env_end = len(e.t.tokens)
        e.last_result = res.text

    def _finish(self, e: _Live, queued: float | None = None) -> EpisodeResult:
        t0 = time.monotonic()
        try:
            changes = e.ws.changes()
            verdict = self.judge.judge(e.task, changes)
        finally:
            self.judge.discard(e.ws)
            with self._lock:
                self.judge_s += time.monotonic() - t0
                self.judge_wait_s += t0 - queued if queued is not None else 0.0
        return EpisodeResult(e.task.task_id, e.sample, e.t, verdict, e.submitted, e.truncated, e.tool_calls,
                             e.bad_calls, e.protected, e.tests_runs, e.tested_ever and not e.edited_since_test,
                             changes, time.monotonic() - e.start)
