"""Repository episodes: the tools on a workspace, budgets, and transcripts that hold exactly what was sampled."""
import pytest

from codechat.config import AgentConfig, SamplingConfig
from codechat.rollout.agents import ModelAgent, ScriptedAgent
from codechat.rollout.episode import EpisodeRunner
from codechat.rollout.tools import ToolBox, format_call, parse_tool_call, tool_schemas
from codechat.tasks.repo import RepoLimits
from codechat.tasks.repo_family import generate_repo_tasks
from codechat.verifier.repo import RepoJudge
from policy_helpers import tiny_policy

TASK = next(t for t in generate_repo_tasks("heldout", 8, seed=0) if t.metadata["unit"] == "is_leap")
(PATH, FIXED), = TASK.solution.items()


@pytest.fixture(scope="module")
def judge():
    with RepoJudge() as j:
        yield j


@pytest.fixture()
def box(judge):
    ws = judge.clone(TASK)
    yield ToolBox(TASK, ws, AgentConfig())
    ws.remove()


def call(box, name, **args):
    return box.call(parse_tool_call(format_call(name, **args)))


def test_tools_on_a_workspace(box):
    assert PATH in call(box, "list_files").text
    r = call(box, "read_file", path=PATH, start=1, end=2)
    assert r.ok and r.text.splitlines()[1] == "   1 def is_leap(year):" and len(r.text.splitlines()) == 3
    assert f"{PATH}:3:" in call(box, "search", pattern=r"year % 100").text
    assert call(box, "search", pattern="((").ok  # an invalid regex is searched as text
    assert not call(box, "edit", path=PATH, old="return", new="x").ok  # occurs several times
    r = call(box, "edit", path=PATH, old="if year % 100 == 0:\n        return True", new="if year % 100 == 0:\n        return 7")
    assert r.ok and "return 7" in box.ws.read(PATH) and "return 7" not in (box.ws.base / PATH).read_text()
    assert call(box, "write_file", path="notes/new.py", content="x = 1\n").ok and box.ws.exists("notes/new.py")
    r = call(box, "run", code="from corelib.dates import is_leap; print(is_leap(1900))")
    assert r.ok and r.text.splitlines()[-1] == "7" and "exit 0" in r.text
    quick = ToolBox(TASK, box.ws, AgentConfig(run_timeout_s=1))
    r = call(quick, "run", code="import time; time.sleep(30)")
    assert "timeout" in r.text and r.duration_s < 10
    assert not call(box, "read_file", path="../../etc/passwd").ok


def test_run_tests_only_visible(box):
    r = call(box, "run_tests")
    assert r.ok and r.ran_tests and r.text.startswith("ok ") and "passed" in r.text
    r = call(box, "run_tests", paths=["tests/test_dates_hidden.py"])
    assert not r.ok and "not a visible test" in r.text


def test_protected_edits_refused_and_counted(box):
    for name, args in [("write_file", {"path": "tests/test_dates.py", "content": ""}),
                       ("edit", {"path": "tests/test_dates.py", "old": "assert", "new": "pass #"}),
                       ("write_file", {"path": "conftest.py", "content": "x = 1\n"})]:
        r = call(box, name, **args)
        assert not r.ok and r.protected_attempt
    assert box.ws.changes() == {}


@pytest.mark.parametrize("path", ["conftest.py/.", "./conftest.py", "tests//test_dates.py", "corelib/./conftest.py",
                                  "sitecustomize.py", "corelib/evil.pth", "json.py", "corelib/__pycache__/x.pyc"])
def test_protected_by_the_normalised_path_as_the_judge_drops(box, path):
    r = call(box, "write_file", path=path, content="import os\n")
    assert not r.ok and r.protected_attempt, r.text
    assert box.ws.changes() == {}


def test_output_cap(judge):
    ws = judge.clone(TASK)
    try:
        small = ToolBox(TASK, ws, AgentConfig(tool_output_chars=120))
        r = call(small, "run", code="print('y' * 5000)")
        assert len(r.text) < 200 and "characters cut" in r.text
    finally:
        ws.remove()


@pytest.mark.parametrize("text, err", [("no call", "no tool call"), ("<tool_call>{bad", "not valid JSON"),
                                       ('<tool_call>{"name": "rm"}</tool_call>', "unknown tool"),
                                       ('<tool_call>{"name": "read_file", "arguments": {}}</tool_call>', "missing"),
                                       ('<tool_call>{"name": "read_file", "arguments": {"path": 3}}</tool_call>',
                                        "must be a string")])
def test_malformed_calls(text, err):
    assert err in parse_tool_call(text).error


def test_schemas_cover_every_tool():
    names = [s["function"]["name"] for s in tool_schemas()]
    assert names == ["list_files", "read_file", "search", "write_file", "edit", "replace_function", "run_tests", "run",
                     "submit"]


def scripted(task, turn, last):
    (path, fixed), = task.solution.items()
    return [format_call("run_tests"), format_call("write_file", path=path, content=fixed),
            format_call("write_file", path="tests/test_dates.py", content=""), format_call("run_tests"),
            format_call("submit")][turn]


def test_scripted_episode_resolves_and_records_habits(judge):
    (r,) = EpisodeRunner(ScriptedAgent(scripted), judge, AgentConfig()).run([(TASK, 0)])
    assert r.verdict.passed and r.submitted and not r.truncated and r.tool_calls == 5
    assert r.protected_attempts == 1 and r.tests_runs == 2 and r.tested_before_submit
    assert list(r.changes) == [PATH]


def test_budgets_truncate_stragglers(judge):
    import copy
    t = copy.deepcopy(TASK)
    t.limits = RepoLimits(max_turns=2)
    (r,) = EpisodeRunner(ScriptedAgent(scripted), judge, AgentConfig()).run([(t, 0)])
    assert r.truncated == "turns" and not r.submitted and len(r.transcript.turns) == 2
    assert r.verdict.passed  # the fix was written in turn 2: every episode is judged


def test_wall_budget_ends_episodes_only_when_on(judge):
    import copy
    t = copy.deepcopy(TASK)
    t.limits = RepoLimits(wall_s=0.0)  # spent before the first turn
    (r,) = EpisodeRunner(ScriptedAgent(scripted), judge, AgentConfig()).run([(t, 0)])
    assert r.truncated == "wall" and not r.transcript.turns
    (r,) = EpisodeRunner(ScriptedAgent(scripted), judge, AgentConfig(wall_budget=False)).run([(t, 0)])
    assert not r.truncated and r.submitted and r.verdict.passed  # the other budgets still hold: none reached


class SpySampler:
    """Delegates to the real sampler and remembers every batch it returned."""

    def __init__(self, inner):
        self.inner, self.batches = inner, []

    def release_kv(self):
        self.inner.release_kv()

    def sample(self, prompts, n, cfg, keys=None, max_new=None):
        b = self.inner.sample(prompts, n, cfg, keys=keys, max_new=max_new)
        self.batches.append(([list(p) for p in prompts], b))
        return b


def test_transcript_is_exactly_what_was_sampled_and_appended(judge, tmp_path_factory):
    from codechat.policy.sampler import Sampler
    policy = tiny_policy(tmp_path_factory)
    spy = SpySampler(Sampler(policy))
    agent = ModelAgent(policy, SamplingConfig(temperature=1.0, max_new_tokens=16), sampler=spy)
    tasks = generate_repo_tasks("train", 3, seed=1)
    for t in tasks:
        t.limits = RepoLimits(max_turns=3, max_tokens=100_000)
    cfg = AgentConfig(turn_tokens=12, max_live=2)
    runner = EpisodeRunner(agent, judge, cfg)
    results = runner.run([(tasks[0], 0), (tasks[1], 0), (tasks[2], 0)], seed=5)
    assert max(runner.step_sizes) == 2  # two live episodes decoded per batch, the third waits for a slot
    sampled = {}  # context (as a tuple) -> (tokens, logprobs) the sampler returned for it
    for prompts, b in spy.batches:
        for i, p in enumerate(prompts):
            n = min(int(b.n_tokens[i]), 12)
            sampled[tuple(p)] = (b.tokens[i, :n].tolist(), b.logprobs[i, :n].tolist())
    for r in results:
        tr = r.transcript
        assert len(tr.tokens) == len(tr.is_model) == len(tr.logprobs)
        task = next(t for t in tasks if t.task_id == r.task_id)
        ws = judge.clone(task)
        assert tr.tokens[:tr.prompt_len] == agent.prompt(task, ws.listing())
        ws.remove()
        assert not any(tr.is_model[:tr.prompt_len])
        for turn in tr.turns:
            toks, lps = sampled[tuple(tr.tokens[:turn.model_start])]
            assert tr.tokens[turn.model_start:turn.model_end] == toks and len(toks) <= cfg.turn_tokens
            assert tr.logprobs[turn.model_start:turn.model_end] == lps
            assert all(tr.is_model[turn.model_start:turn.model_end])
            env = tr.tokens[turn.model_end:turn.env_end]
            assert not any(tr.is_model[turn.model_end:turn.env_end])
            assert all(lp == 0.0 for lp in tr.logprobs[turn.model_end:turn.env_end])
            if turn.env_end > turn.model_end:
                assert env == agent.result_ids(turn.result, bool(toks) and toks[-1] in agent.eos)
        assert sum(tr.is_model) == sum(t.model_end - t.model_start for t in tr.turns)
        assert not r.verdict.passed  # an untrained model fixes nothing


def test_tool_workers_bound_the_threads_running_tools(judge, monkeypatch):
    import threading
    import time
    from codechat.rollout import tools
    seen = set()
    real = tools.ToolBox.call

    def spy(self, c):
        seen.add(threading.get_ident())
        time.sleep(0.1)  # a busy worker, so the pool has to use another thread for the next call
        return real(self, c)
    monkeypatch.setattr(tools.ToolBox, "call", spy)
    jobs = [(TASK, i) for i in range(4)]
    one = ScriptedAgent(lambda t, turn, last: format_call("list_files") if turn == 0 else format_call("submit"))
    EpisodeRunner(one, judge, AgentConfig(tool_workers=1)).run(jobs)
    assert len(seen) == 1
    seen.clear()
    EpisodeRunner(one, judge, AgentConfig(tool_workers=4)).run(jobs)
    assert 1 < len(seen) <= 4


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_args = st.dictionaries(st.sampled_from(["path", "start", "end", "pattern", "content", "old", "new", "paths", "x"]),
                        st.one_of(st.text(max_size=12), st.integers(-5, 50), st.none(), st.lists(st.text(max_size=5),
                                                                                                 max_size=2)),
                        max_size=4)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["list_files", "read_file", "search", "write_file", "edit", "submit", "nope"]), _args,
       st.text(max_size=40))
def test_fuzz_tool_calls_never_crash_nor_escape(box, name, args, noise):
    import json
    text = noise + "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"
    res = box.call(parse_tool_call(text))
    assert res.text.startswith(("ok", "error:"))
    assert parse_tool_call(noise).name == "" or "<tool_call>" in noise
    for p in box.ws.changes():
        assert not p.startswith(("/", "..")) and not TASK.is_protected(p)


def test_task_data_dir_is_hidden_from_run(shared_data):
    from codechat.tasks.repo_loaders import load_repo_tasks
    qb = shared_data / "repo" / "quixbugs"
    task = load_repo_tasks(str(qb))[0]
    with RepoJudge(hide_paths=(str(qb.parent),)) as j:
        ws = j.clone(task)
        try:
            box = ToolBox(task, ws, AgentConfig(), j.hide_paths)
            secret = qb / "correct_python_programs" / task.task_id.split("/")[1]
            r = call(box, "run", code=f"print(open({str(secret) + '.py'!r}).read())")
            assert "FileNotFoundError" in r.text and "def " not in r.text
        finally:
            ws.remove()


def test_a_turn_near_the_context_does_not_cut_the_other_episodes_turns(tmp_path_factory):
    from codechat.rollout.agents import TurnState
    policy = tiny_policy(tmp_path_factory)
    policy.eos_token_ids = ()  # only budgets end turns
    agent = ModelAgent(policy, SamplingConfig(temperature=1.0, max_new_tokens=16))
    short = agent.prompt(TASK, [PATH])
    long = (short * 100)[:agent.context - 2]  # its turn may add 2 tokens, then the context is full
    states = [TurnState(TASK, 0, short, 12, ""), TurnState(TASK, 3, long, 2, ""), TurnState(TASK, 0, short, 5, "")]
    actions = agent.act(states, seed=1)
    assert [len(a.tokens) for a in actions] == [12, 2, 5]
    assert [a.finish_reason for a in actions] == ["length"] * 3
