"""Expert transcripts for SFT on repository tasks: real episodes played from the reference fixes.

    episodes = expert_episodes(policy, judge, tasks, AgentConfig(), wrong_share=0.2, seed=0)
    episodes[0].transcript.tokens, .is_model      # SFT trains on the model tokens only

The expert's habit: read the file to fix -> run the tests -> write the fix -> run the tests -> submit. The
episodes run through `EpisodeRunner`, so every tool result is the real one (the test output of the workspace)
and every episode is judged. Turns are encoded with the policy's tokenizer in the model agent's format (the
same prompt and result tokens as the model sees). A seeded `wrong_share` of the tasks gets a plausible but
wrong fix instead (`metadata["wrong_fix"]`: the same function with another bug; the built-in family has one),
as the function demo's SFT data has buggy references: imitation learns the habit and some wrong fixes, and RL
has something left to teach. Tasks without a reference fix are skipped. A transcript longer than the model's
context is cut at its last turn boundary inside it (truncated="context": SFT never trains past the context).
Several transcripts per task (`per_task`, `sft.expert_per_task`) mix the reference with the task's wrong fixes
(`metadata["wrong_fixes"]`), so imitation gives a policy that sometimes fixes the bug and sometimes not on every
task, not one memorised transcript per task: GRPO's groups then have episodes to compare.
"""
from __future__ import annotations

import difflib
import random
from dataclasses import replace

from codechat.config import AgentConfig, SamplingConfig
from codechat.rollout.agents import Action, ModelAgent, TurnState
from codechat.rollout.episode import EpisodeResult, EpisodeRunner
from codechat.rollout.call_formats import get_call_format
from codechat.tasks.repo import RepoTask
from codechat.verifier.repo import RepoJudge


def edit_arguments(base: str, fix: str, reference: str) -> dict[str, str] | None:
    """The `old` and `new` of one edit that turns `base` into `fix`: the lines where `fix` or `reference` differ
    from `base` (so a wrong fix edits where the right one would, even one that changes nothing), grown by a line
    of context at a time until `old` occurs exactly once in `base` (overlapping occurrences counted); None when
    neither differs or no span of `base` is unique."""
    b, f = base.splitlines(keepends=True), fix.splitlines(keepends=True)
    spans = [(i1, i2) for other in (f, reference.splitlines(keepends=True))
             for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, b, other, autojunk=False).get_opcodes()
             if tag != "equal"]
    if not spans:
        return None
    lo, hi = min(i for i, _ in spans), max(i for _, i in spans)
    while True:  # outside [lo, hi) `fix` equals `base`: its lines there are the same prefix and suffix
        old, new = "".join(b[lo:hi]), "".join(f[lo:len(f) - (len(b) - hi)])
        if old.endswith("\n") and new.endswith("\n"):  # the call reads better without the shared last newline
            old, new = old[:-1], new[:-1]
        at = len("".join(b[:lo]))
        if old and base.find(old) == at and base.find(old, at + 1) < 0:  # once, overlaps counted, and here
            return {"old": old, "new": new}
        if lo == 0 and hi == len(b):
            return None
        lo, hi = max(0, lo - 1), min(len(b), hi + 1)


def expert_calls(task: RepoTask, fix: dict[str, str], call_format: str = "json", edit: bool = False) -> list[str]:
    """The turns of the expert episode with `fix` ({path: new text}), written in `call_format`: read the first
    file, run the tests, write each file (or, with `edit`, one `edit` call per file whose base text is inline and
    `edit_arguments` finds a span: the changed lines only), run the tests, submit."""
    call = get_call_format(call_format).format
    paths = sorted(fix)
    tests = [call("run_tests", {})] if task.visible_tests else []

    def change(p: str) -> str:
        args = edit_arguments(task.files[p], fix[p], task.solution.get(p, fix[p])) \
            if edit and p in task.files else None
        return call("edit", {"path": p, **args}) if args else call("write_file", {"path": p, "content": fix[p]})
    return [call("read_file", {"path": p}) for p in paths[:1]] + tests + [change(p) for p in paths] + tests + \
        [call("submit", {})]


class ExpertAgent(ModelAgent):
    """Plays each episode's expert calls; prompt and result tokens are the model agent's (same tokenizer, format)."""

    def __init__(self, policy, calls: dict[tuple[str, int], list[str]]):
        super().__init__(policy, SamplingConfig())
        self.calls = calls
        """(task_id, sample) -> the turns' texts."""
        self.model_context = self.context
        """The policy's context: the transcripts are cut to it afterwards (`EpisodeResult.cut_to_context`)."""
        self.context = None  # a scripted turn is as long as it is: the episode runs whole, then is cut

    def act(self, states: list[TurnState], seed: int) -> list[Action]:
        out = []
        for s in states:
            turns = self.calls[s.task.task_id, s.sample]
            text = turns[min(s.turn, len(turns) - 1)]
            full = list(self.tok(text, add_special_tokens=False)["input_ids"])
            ids = full[:s.budget]
            out.append(Action(ids, [0.0] * len(ids), text, "stop" if len(ids) == len(full) else "length"))
        return out


def pick_wrong(tasks: list[RepoTask], share: float, seed: int) -> set[str]:
    """Task ids that get the wrong fix: round(share * tasks), seeded, among the tasks that have one (fewer when
    too few have one)."""
    can = [t.task_id for t in tasks if t.metadata.get("wrong_fix")]
    return set(random.Random(seed).sample(can, min(len(can), round(share * len(tasks)))))


def expert_fixes(tasks: list[RepoTask], share: float, seed: int, per_task: int = 1) -> dict[str, list[dict]]:
    """task_id -> the fixes ({path: text}) of its `per_task` transcripts. One per task: the reference, or
    `metadata["wrong_fix"]` for the seeded share of tasks of `pick_wrong`. More: round(share * per_task) of each
    task's transcripts take its `metadata["wrong_fixes"]` in turn from a seeded start, the rest the reference,
    so the imitated policy is a mixture on every task (tasks without wrong fixes get only the reference)."""
    if per_task == 1:
        wrong = pick_wrong(tasks, share, seed)
        return {t.task_id: [t.metadata["wrong_fix"] if t.task_id in wrong else t.solution] for t in tasks}
    rng, out = random.Random(seed), {}
    for t in tasks:
        pool = t.metadata.get("wrong_fixes") or []
        n_wrong = round(share * per_task) if pool else 0
        start = rng.randrange(len(pool)) if pool else 0
        out[t.task_id] = [pool[(start + j) % len(pool)] for j in range(n_wrong)] + \
            [t.solution] * (per_task - n_wrong)
    return out


def expert_episodes(policy, judge: RepoJudge, tasks: list[RepoTask], cfg: AgentConfig, wrong_share: float,
                    seed: int, per_task: int = 1, edit: bool = False) -> list[EpisodeResult]:
    """`per_task` judged expert episodes per task with a reference fix (fixes: `expert_fixes`). Each distinct
    (task, fix) is played once; a fix drawn twice repeats its episode (the same tokens, weighted twice)."""
    tasks = [t for t in tasks if t.solution]
    fixes = expert_fixes(tasks, wrong_share, seed, per_task)
    distinct = {t.task_id: [] for t in tasks}
    for t in tasks:
        for f in fixes[t.task_id]:
            if f not in distinct[t.task_id]:
                distinct[t.task_id].append(f)
    calls = {(t.task_id, j): expert_calls(t, f, cfg.call_format, edit)
             for t in tasks for j, f in enumerate(distinct[t.task_id])}
    budget = max((len(c) for c in calls.values()), default=1)
    by_id = {t.task_id: replace(t, limits=replace(t.limits, max_turns=max(t.limits.max_turns, budget)))
             for t in tasks}
    cfg = replace(cfg, turn_tokens=max(cfg.turn_tokens, 2048))  # a write_file turn holds a whole module
    agent = ExpertAgent(policy, calls)
    played = {(e.task_id, e.sample): e.cut_to_context(agent.model_context)
              for e in EpisodeRunner(agent, judge, cfg).run([(by_id[tid], j) for tid, j in calls], seed=seed)}
    return [played[t.task_id, distinct[t.task_id].index(f)] for t in tasks for f in fixes[t.task_id]]
