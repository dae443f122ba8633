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

import ast
import difflib
import json
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


def _definitions(text: str) -> dict[str, str] | None:
    """Top-level function and class name -> its source (decorators on), or None when the text does not parse or
    a name is defined twice."""
    try:
        nodes = [n for n in ast.parse(text).body
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    except (SyntaxError, ValueError):
        return None
    lines = text.splitlines(keepends=True)
    out = {n.name: "".join(lines[min([n.lineno] + [d.lineno for d in n.decorator_list]) - 1:n.end_lineno])
           for n in nodes}
    return out if len(out) == len(nodes) else None


def function_arguments(base: str, fix: str, reference: str) -> list[dict[str, str]] | None:
    """The `name` and `new` of the `replace_function` calls that turn `base` into `fix`: one per top-level
    definition where `fix` or `reference` differs from `base` (so a wrong fix rewrites the function the right one
    would, even unchanged), `new` being fix's whole definition; None when that is not the whole difference (text
    outside the definitions changed, a definition added or removed, a file that does not parse)."""
    b, f, r = _definitions(base), _definitions(fix), _definitions(reference)
    if b is None or f is None or r is None or set(b) != set(f):
        return None
    names = [n for n in b if b[n] != f[n] or b[n] != r.get(n, b[n])]
    if not names:
        return None
    rebuilt = base
    for n in names:
        rebuilt = rebuilt.replace(b[n].rstrip("\n"), f[n].rstrip("\n"), 1)
    if rebuilt != fix:
        return None
    return [{"name": n, "new": f[n].rstrip("\n")} for n in names]


EDIT_FORMS = ("write", "edit", "function")
"""How the expert writes a fix (`sft.expert_edit`): `write_file` of the whole file, one `edit` of the changed
lines, or `replace_function` of each changed definition."""


MISTAKES = ("name", "missing")
"""The failed call a recovery transcript makes before its fix (`sft.expert_recover`): `name`, the fix call with
its `name` (replace_function) or `old` (edit) one character short, so nothing matches; `missing`, the fix call
without its last argument (what the tiny model's malformed calls most often are). Both fail with an `error:`
result; the next turn is the right call."""


def _mistake(tool: str, args: dict, kind: str) -> tuple[str, dict]:
    key = {"replace_function": "name", "edit": "old"}.get(tool)
    if kind == "name" and key and len(args[key]) > 1:
        return tool, {**args, key: args[key][:-1]}
    return tool, dict(list(args.items())[:-1])


def expert_calls(task: RepoTask, fix: dict[str, str], call_format: str = "json", edit: str = "write",
                 mistake: str = "") -> list[str]:
    """The turns of the expert episode with `fix` ({path: new text}), written in `call_format`: read the first
    file, run the tests, write each file, run the tests, submit. `edit` (EDIT_FORMS) chooses how each file whose
    base text is inline is written: `edit`, one `edit` call (the changed lines only, `edit_arguments`); `function`,
    one `replace_function` call per changed definition (`function_arguments`); either falls back to `write_file`
    where it cannot express the fix. `mistake` (one of MISTAKES, "" = none): a failed version of the first fix
    call comes right before it (`mistake_turn` is its index)."""
    if edit not in EDIT_FORMS:
        raise ValueError(f"expert edit form must be one of {', '.join(EDIT_FORMS)}; got {edit!r}")
    if mistake and mistake not in MISTAKES:
        raise ValueError(f"expert mistake must be one of {', '.join(MISTAKES)}; got {mistake!r}")
    call = get_call_format(call_format).format
    paths = sorted(fix)
    tests = [("run_tests", {})] if task.visible_tests else []

    def change(p: str) -> list[tuple[str, dict]]:
        ref = task.solution.get(p, fix[p])
        if edit == "edit" and p in task.files:
            args = edit_arguments(task.files[p], fix[p], ref)
            if args:
                return [("edit", {"path": p, **args})]
        if edit == "function" and p in task.files:
            calls = function_arguments(task.files[p], fix[p], ref)
            if calls:
                return [("replace_function", {"path": p, **a}) for a in calls]
        return [("write_file", {"path": p, "content": fix[p]})]
    changes = [c for p in paths for c in change(p)]
    if mistake:
        changes = [_mistake(*changes[0], mistake)] + changes
    turns = [("read_file", {"path": p}) for p in paths[:1]] + tests + changes + tests + [("submit", {})]
    return [call(name, args) for name, args in turns]


def mistake_turn(task: RepoTask, fix: dict[str, str]) -> int:
    """The index of the failed call among `expert_calls(task, fix, ..., mistake=...)`'s turns."""
    return int(bool(fix)) + bool(task.visible_tests)


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
                    seed: int, per_task: int = 1, edit: str = "write", recover: float = 0.0) -> list[EpisodeResult]:
    """`per_task` judged expert episodes per task with a reference fix (fixes: `expert_fixes`). A seeded share
    `recover` of the transcripts first makes a failed fix call (MISTAKES, drawn in turn) and then the right one;
    that failed call is masked out of the model tokens (`is_model` False: SFT learns the recovery, not the mistake).
    Each distinct (task, fix, mistake) is played once; one drawn twice repeats its episode (the same tokens,
    weighted twice)."""
    tasks = [t for t in tasks if t.solution]
    fixes = expert_fixes(tasks, wrong_share, seed, per_task)
    rng = random.Random(f"{seed}-recover")
    plays = {t.task_id: [(f, MISTAKES[i % len(MISTAKES)] if rng.random() < recover else "")
                         for i, f in enumerate(fixes[t.task_id])] for t in tasks}
    distinct = {t.task_id: list(dict.fromkeys((json.dumps(f, sort_keys=True), m) for f, m in plays[t.task_id]))
                for t in tasks}
    by_id = {t.task_id: t for t in tasks}
    calls = {(tid, j): expert_calls(by_id[tid], json.loads(f), cfg.call_format, edit, m)
             for tid, keys in distinct.items() for j, (f, m) in enumerate(keys)}
    budget = max((len(c) for c in calls.values()), default=1)
    by_id = {t.task_id: replace(t, limits=replace(t.limits, max_turns=max(t.limits.max_turns, budget),
                                                  max_tool_calls=max(t.limits.max_tool_calls, budget)))
             for t in tasks}
    cfg = replace(cfg, turn_tokens=max(cfg.turn_tokens, 2048))  # a write_file turn holds a whole module
    agent = ExpertAgent(policy, calls)
    played = {}
    for e in EpisodeRunner(agent, judge, cfg).run([(by_id[tid], j) for tid, j in calls], seed=seed):
        f, m = distinct[e.task_id][e.sample]
        played[e.task_id, e.sample] = _mask_mistake(e, mistake_turn(by_id[e.task_id], json.loads(f))) if m else e
    played = {k: e.cut_to_context(agent.model_context) for k, e in played.items()}
    return [played[t.task_id, distinct[t.task_id].index((json.dumps(f, sort_keys=True), m))]
            for t in tasks for f, m in plays[t.task_id]]


def _mask_mistake(e: EpisodeResult, turn: int) -> EpisodeResult:
    """The episode with its failed call's model tokens masked (trained on: never; attended to: yes)."""
    t = e.transcript
    u = t.turns[turn]
    if u.ok:
        raise ValueError(f"{e.task_id}: the expert's mistaken call (turn {turn}, {u.tool}) succeeded")
    mask = list(t.is_model)
    mask[u.model_start:u.model_end] = [False] * (u.model_end - u.model_start)
    return replace(e, transcript=replace(t, is_model=mask))
