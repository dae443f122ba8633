"""Tool-call formats (rollout/call_formats.py): every valid call round-trips, any text parses without raising,
and `agent.call_format` reaches the prompt, the expert transcripts and the episode's parser."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codechat import CodechatError
from codechat.config import AgentConfig
from codechat.rollout.agents import ScriptedAgent, prompt_text
from codechat.rollout.call_formats import CALL_FORMATS, compact_format, compact_parse, get_call_format
from codechat.rollout.episode import EpisodeRunner
from codechat.rollout.expert import expert_calls
from codechat.rollout.tools import CALL_CLOSE, TOOLS
from codechat.tasks.repo_family import generate_repo_tasks
from codechat.verifier.repo import RepoJudge

TASK = generate_repo_tasks("train", 1, seed=0)[0]


def test_compact_calls_read_as_documented():
    text = "I will fix it.\n<tool_call>edit\n@path\npkg/a.py\n@old\n    lo < x\n@new\n    lo <= x\n</tool_call>"
    c = compact_parse(text)
    assert (c.name, c.error) == ("edit", "")
    assert c.arguments == {"path": "pkg/a.py", "old": "    lo < x", "new": "    lo <= x"}
    assert compact_parse("<tool_call>read_file\n@path\na.py\n@start\n 3\n</tool_call>").arguments == \
        {"path": "a.py", "start": 3}
    assert compact_parse("<tool_call>run_tests\n@paths\ntests/a.py\ntests/b.py\n</tool_call>").arguments == \
        {"paths": ["tests/a.py", "tests/b.py"]}
    assert compact_parse("<tool_call>submit\n</tool_call>").arguments == {}
    code = "@property\ndef f(self):\n    return '\"\\\\n'\n"  # decorators, quotes, backslashes: verbatim
    assert compact_parse(compact_format("write_file", {"path": "a.py", "content": code})).arguments["content"] == code


@pytest.mark.parametrize("text, err", [
    ("no call here", "no tool call"),
    ("<tool_call>delete\n@path\na\n</tool_call>", "unknown tool"),
    ("<tool_call>read_file\na.py\n</tool_call>", "text before the first argument"),
    ("<tool_call>read_file\n@path\na\n@path\nb\n</tool_call>", "given twice"),
    ("<tool_call>read_file\n@start\nx\n</tool_call>", "must be an integer"),
    ("<tool_call>read_file\n@start\n" + "9" * 5000 + "\n</tool_call>", "must be an integer"),
    ("<tool_call>write_file\n@path\na.py\n</tool_call>", "missing argument 'content'"),
    ("<tool_call>submit\nnow\n</tool_call>", "takes no arguments"),
])
def test_compact_errors_say_what_is_wrong(text, err):
    c = compact_parse(text)
    assert err in c.error


def test_unrepresentable_values_are_refused_by_the_printer():
    for args in ({"path": "a", "content": f"x {CALL_CLOSE}"}, {"path": "a", "content": "x\n@path\ny"}):
        with pytest.raises(ValueError):
            compact_format("write_file", args)
    with pytest.raises(ValueError):
        compact_format("run_tests", {"paths": ["a\nb"]})
    with pytest.raises(CodechatError, match="valid: json, compact"):
        get_call_format("xml")


_value = st.text(st.characters(codec="utf-8"), max_size=60) | \
    st.sampled_from(["", "\n", "\n\n", " @path", "@", "\r\n", "a</tool_call>b", "x\n@content\n"])


@st.composite
def valid_calls(draw):
    name = draw(st.sampled_from(sorted(TOOLS)))
    args = {}
    for p, (kind, required, _) in TOOLS[name].items():
        if not required and not draw(st.booleans()):
            continue
        if kind == "integer":
            args[p] = draw(st.integers(-10 ** 17, 10 ** 17))
        elif kind == "array":
            args[p] = draw(st.lists(st.text(min_size=1, max_size=8).filter(lambda s: "\n" not in s), max_size=3))
        else:
            args[p] = draw(_value)
    return name, args


@settings(max_examples=400, deadline=None)
@given(valid_calls(), st.text(st.characters(codec="utf-8", exclude_characters="<"), max_size=30))
def test_fuzz_every_valid_call_round_trips(call, prefix):
    name, args = call
    for fmt in CALL_FORMATS.values():
        try:
            text = fmt.format(name, args)
        except ValueError:  # unrepresentable in this format (documented): must really hold a marker
            assert fmt.name == "compact" and any(CALL_CLOSE in v or any(line == f"@{p}" for p in TOOLS[name]
                                                                       for line in v.split("\n"))
                                                 for v in args.values() if isinstance(v, str))
            continue
        got = fmt.parse(prefix + text)
        assert (got.name, got.arguments, got.error) == (name, args, ""), (fmt.name, text)


_noise = st.lists(st.sampled_from(list("ab@\n <>/_:{}\"0-9") + ["<tool_call>", "</tool_call>", "@path", "@content",
                                                                "read_file", "write_file", "run_tests", "@start"]),
                  max_size=40).map("".join)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=200), _noise))
def test_fuzz_any_text_parses_without_raising(text):
    for fmt in CALL_FORMATS.values():
        c = fmt.parse(text)
        assert isinstance(c.name, str) and isinstance(c.arguments, dict)
        assert bool(c.error) or c.name in TOOLS


def test_call_format_reaches_prompt_expert_and_parser():
    compact = get_call_format("compact")
    assert compact.format("read_file", {"path": "a.py"}) in prompt_text(TASK, ["a.py"], "compact")
    assert '"name"' in prompt_text(TASK, ["a.py"], "json") and '"name"' not in prompt_text(TASK, ["a.py"], "compact")
    calls = expert_calls(TASK, TASK.solution, "compact")
    assert [compact.parse(c).name for c in calls] == ["read_file", "run_tests", "write_file", "run_tests", "submit"]
    assert compact.parse(calls[2]).arguments["content"] == next(iter(TASK.solution.values()))
    with pytest.raises(CodechatError, match="call_format"):
        EpisodeRunner(ScriptedAgent(lambda t, i, r: ""), None, AgentConfig(call_format="yaml"))


def test_a_compact_expert_episode_resolves_and_a_json_one_fails_to_parse_under_compact():
    calls = expert_calls(TASK, TASK.solution, "compact")
    with RepoJudge() as judge:
        ok = EpisodeRunner(ScriptedAgent(lambda t, i, r: calls[min(i, 4)]), judge,
                           AgentConfig(call_format="compact")).run([(TASK, 0)])[0]
        json_calls = expert_calls(TASK, TASK.solution, "json")
        bad = EpisodeRunner(ScriptedAgent(lambda t, i, r: json_calls[min(i, 4)]), judge,
                            AgentConfig(call_format="compact")).run([(TASK, 0)])[0]
    assert ok.reward == 1.0 and ok.submitted and ok.bad_calls == 0 and ok.tested_before_submit
    assert bad.reward == 0.0 and not bad.submitted and bad.bad_calls == len(bad.transcript.turns)
