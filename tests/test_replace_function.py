"""`replace_function(path, name, new)`: a whole definition replaced by name, so a model writes only the new code
(no `old` text copied from a file it never saw); and the expert transcripts that use it (`sft.expert_edit=function`)."""
import ast
import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from codechat.config import AgentConfig
from codechat.rollout.call_formats import get_call_format
from codechat.rollout.expert import expert_calls, function_arguments, mistake_turn
from codechat.rollout.tools import ToolBox, definition_lines, format_call, parse_tool_call
from codechat.tasks.repo import RepoTask
from codechat.tasks.repo_loaders import load_repo_tasks
from codechat.verifier.repo import RepoJudge

SRC = ("import os\n\n\n@staticmethod\n@other(1)\ndef f(x):\n    return x\n\n\nclass C:\n    def m(self):\n"
       "        return 1\n\n    async def n(self):\n        return 2\n\n\ndef g():\n    pass")
TASK = RepoTask("rf", "fix f", {"pkg/a.py": SRC, "tests/test_a.py": "def test_a():\n    pass\n",
                                "pkg/bad.py": "def f(:\n"}, visible_tests=["tests/test_a.py"])


@pytest.fixture(scope="module")
def judge():
    with RepoJudge() as j:
        yield j


@pytest.fixture()
def box(judge):
    ws = judge.clone(TASK)
    yield ToolBox(TASK, ws, AgentConfig())
    ws.remove()


def call(box, **args):
    return box.call(parse_tool_call(format_call("replace_function", **args)))


def test_definition_lines_cover_decorators_methods_and_the_last_line():
    assert definition_lines(SRC, "f") == (4, 7)
    assert definition_lines(SRC, "C") == (10, 15)
    assert definition_lines(SRC, "C.m") == (11, 12) and definition_lines(SRC, "C.n") == (14, 15)
    assert definition_lines(SRC, "g") == (18, 19)


@pytest.mark.parametrize("name,err", [("h", "0 definitions of 'h'"), ("C.z", "0 definitions of 'C.z'"),
                                      ("f.x", "'f' is not a class"), ("a.b.c", "name must be"),
                                      ("", "name must be"), ("f(x)", "name must be")])
def test_definition_lines_say_why_not(name, err):
    assert err in definition_lines(SRC, name)
    assert "2 definitions of 'f'" in definition_lines("def f(): pass\ndef f(): pass\n", "f")
    assert "cannot parse it (SyntaxError" in definition_lines("def f(:\n", "f")


def test_replace_function_rewrites_only_that_definition(box):
    res = call(box, path="pkg/a.py", name="f", new="def f(x):\n    return x + 1")
    assert res.ok and res.text == "ok replaced f (pkg/a.py lines 4-7)"
    want = SRC.replace("@staticmethod\n@other(1)\ndef f(x):\n    return x\n", "def f(x):\n    return x + 1\n")
    assert box.ws.read("pkg/a.py") == want
    assert call(box, path="pkg/a.py", name="C.m", new="    def m(self):\n        return 3\n").ok
    assert "        return 3\n\n    async def n" in box.ws.read("pkg/a.py")
    assert call(box, path="pkg/a.py", name="g", new="def g():\n    return 0").ok  # last line, no newline after
    assert box.ws.read("pkg/a.py").endswith("def g():\n    return 0")


@pytest.mark.parametrize("args,err", [
    (dict(path="tests/test_a.py", name="test_a", new="def test_a(): pass"), "error: tests/test_a.py is protected"),
    (dict(path="pkg/a.py", name="nope", new="x"), "error: pkg/a.py: 0 definitions of 'nope'"),
    (dict(path="pkg/bad.py", name="f", new="def f(): pass"), "error: pkg/bad.py: cannot parse it"),
    (dict(path="pkg/none.py", name="f", new="x"), "error: pkg/none.py: no such file"),
    (dict(path="../x.py", name="f", new="x"), "error:")])
def test_replace_function_refusals_are_one_line_errors(box, args, err):
    res = call(box, **args)
    assert not res.ok and res.text.startswith(err) and "\n" not in res.text
    assert res.protected_attempt == args["path"].startswith("tests/")
    assert box.ws.changes() == {}


@pytest.mark.parametrize("fmt", ["json", "compact"])
def test_replace_function_round_trips_through_both_call_formats(fmt):
    f = get_call_format(fmt)
    args = {"path": "pkg/a.py", "name": "C.m", "new": 'def m(self):\n    return "@name"  # {"x": 1}\n'}
    got = f.parse("thinking\n" + f.format("replace_function", args))
    assert got.name == "replace_function" and got.arguments == args and not got.error
    assert "missing argument 'new'" in f.parse(f.format("replace_function", {"path": "a", "name": "f"})).error


_name = st.sampled_from(["f", "g", "C", "C.m", "C.n", "x", "f.g", "", "1", "C.m.n"])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["pkg/a.py", "pkg/bad.py", "tests/test_a.py", "nope.py", "pkg"]), name=_name,
       new=st.text(max_size=60), noise=st.text(max_size=20))
def test_fuzz_replace_function_never_crashes_nor_touches_other_files(box, path, name, new, noise):
    text = noise + "<tool_call>" + json.dumps({"name": "replace_function",
                                               "arguments": {"path": path, "name": name, "new": new}}) + "</tool_call>"
    before = {p: box.ws.read(p) for p in ("pkg/a.py", "pkg/bad.py", "tests/test_a.py")}
    res = box.call(parse_tool_call(text))
    assert res.text.startswith(("ok", "error:"))
    changed = {p for p in before if box.ws.read(p) != before[p]}
    assert changed <= ({path} if res.ok else set()) and "tests/test_a.py" not in changed
    if res.ok:
        box.ws.write(path, before[path])


@pytest.mark.parametrize("spec", ["builtin:repo-mini", "builtin:repo-train", "builtin:repo-heldout"])
def test_function_arguments_make_exactly_the_fix_on_every_builtin_task(spec):
    """Every right and wrong fix of the built-in family is one replace_function of the task's function, and
    applying it with the tool's own line span gives exactly the fix."""
    for t in load_repo_tasks(spec):
        for fix in [t.solution] + t.metadata["wrong_fixes"]:
            (path, text), = fix.items()
            calls = function_arguments(t.files[path], text, t.solution[path])
            assert [c["name"] for c in calls] == [t.metadata["unit"]]
            lines = t.files[path].splitlines(keepends=True)
            start, end = definition_lines(t.files[path], calls[0]["name"])
            assert "".join(lines[:start - 1]) + calls[0]["new"] + "\n" + "".join(lines[end:]) == text


def test_function_arguments_refuse_what_they_cannot_express():
    base = "X = 1\n\n\ndef f():\n    return X\n"
    assert function_arguments(base, base.replace("X = 1", "X = 2"), base) is None  # outside any definition
    assert function_arguments(base, base + "\n\ndef g():\n    pass\n", base) is None  # a definition added
    assert function_arguments(base, "def f(:\n", base) is None
    assert function_arguments(base, base, base) is None  # nothing differs anywhere


def test_expert_calls_in_the_function_form():
    task = load_repo_tasks("builtin:repo-heldout")[0]
    calls = expert_calls(task, task.solution, "compact", "function")
    assert [c.split("\n", 1)[0] for c in calls] == ["<tool_call>read_file", "<tool_call>run_tests",
                                                    "<tool_call>replace_function", "<tool_call>run_tests",
                                                    "<tool_call>submit"]
    args = get_call_format("compact").parse(calls[2]).arguments
    assert args["name"] == task.metadata["unit"] and ast.parse(args["new"])
    with pytest.raises(ValueError, match="expert edit form must be one of write, edit, function"):
        expert_calls(task, task.solution, "compact", "lines")


@pytest.mark.slow
def test_function_form_expert_episodes_resolve(judge):
    """(slow: a few sandboxed episodes, ~10 s) the played function-form transcripts: the reference passes, every
    call succeeds, and the judged change is the fix."""
    from codechat.policy import load_policy
    from codechat.config import ModelConfig
    from codechat.rollout.expert import expert_episodes
    task = load_repo_tasks("builtin:repo-heldout")[1]
    policy = load_policy(ModelConfig(path="tiny", device="cpu"))
    got = expert_episodes(policy, judge, [task], AgentConfig(call_format="compact"), 0.5, seed=0, per_task=2,
                          edit="function")
    assert [e.verdict.passed for e in got] == [False, True]
    assert got[1].changes == task.solution and got[0].changes in task.metadata["wrong_fixes"] + [{}]  # {}: bug left in
    assert [u.tool for u in got[1].transcript.turns] == ["read_file", "run_tests", "replace_function", "run_tests",
                                                         "submit"]
    assert all(u.ok for u in got[1].transcript.turns)


@pytest.mark.parametrize("edit,tool", [("function", "replace_function"), ("edit", "edit")])
@pytest.mark.parametrize("mistake", ["name", "missing"])
def test_a_recovery_transcript_makes_the_mistake_then_the_fix(edit, tool, mistake):
    task = load_repo_tasks("builtin:repo-train")[0]
    fmt = get_call_format("compact")
    right = expert_calls(task, task.solution, "compact", edit)
    calls = expert_calls(task, task.solution, "compact", edit, mistake)
    k = mistake_turn(task, task.solution)
    assert calls[:k] + calls[k + 1:] == right  # the mistake is the one extra turn, right before the fix
    bad, fix = fmt.parse(calls[k]), fmt.parse(calls[k + 1])
    assert fix.name == tool and not fix.error
    if mistake == "missing":
        assert bad.error.endswith(f"missing argument {list(fix.arguments)[-1]!r}")
    else:
        key = "name" if tool == "replace_function" else "old"
        assert bad.arguments == {**fix.arguments, key: fix.arguments[key][:-1]}
    with pytest.raises(ValueError, match="expert mistake must be one of name, missing"):
        expert_calls(task, task.solution, "compact", edit, "typo")


@pytest.mark.slow
def test_recovery_episodes_mask_the_failed_call(judge):
    """(slow: two sandboxed episodes, ~10 s) recover=1: every transcript has a failed call with an `error:`
    result, masked out of the model tokens, then the fix; the reference still passes."""
    from codechat.config import ModelConfig
    from codechat.policy import load_policy
    from codechat.rollout.expert import expert_episodes
    task = load_repo_tasks("builtin:repo-train")[0]
    policy = load_policy(ModelConfig(path="tiny", device="cpu"))
    got = expert_episodes(policy, judge, [task], AgentConfig(call_format="compact"), 0.5, seed=0, per_task=2,
                          edit="function", recover=1.0)
    assert [e.verdict.passed for e in got] == [False, True]
    k = mistake_turn(task, task.solution)
    for e in got:
        t = e.transcript
        bad, nxt = t.turns[k], t.turns[k + 1]
        assert not bad.ok and bad.result.startswith("error:") and nxt.ok and nxt.tool == "replace_function"
        assert not any(t.is_model[bad.model_start:bad.model_end])
        assert all(t.is_model[u.model_start:u.model_end][0] for u in t.turns if u is not bad)
