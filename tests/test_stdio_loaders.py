"""Loaders of competitive-programming sets: the real files in ../shared/data/stdio/, fixtures of our own, and
the untrusted pickled field of LiveCodeBench (fuzzed: only plain values, else one-line errors)."""
import base64
import json
import pickle
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from codechat.tasks import TaskFormatError, load_tasks, load_tasks_with_format, save_tasks
from codechat.tasks.stdio import STDIO_INSTRUCTION
from codechat.tasks.pickled import decode_pickled_field, restricted_unpickle


def pickled(x) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(x))).decode()


def write(tmp_path, records, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return p


# --- the real files ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, fmt, n, kinds", [
    ("apps", "apps", 5, {"stdio": 3, "function": 2}),
    ("codecontests-sandboxfusion.jsonl", "sandboxfusion", 20, {"stdio": 20}),
    ("livecodebench-sandboxfusion.jsonl", "sandboxfusion", 3, {"stdio": 2, "function": 1}),
    ("codecontests-alphacodium-example.json", "codecontests", 1, {"stdio": 1}),
    ("deepcoder-test-livecodebench.json", "deepcoder", 279, {"stdio": 175, "function": 104}),
    ("deepcoder-test-codeforces.json", "deepcoder", 408, {"stdio": 408}),
    ("deepcoder-test-code_contests.json", "deepcoder", 165, {"stdio": 165}),
])
def test_real_files_load_with_the_detected_format(shared_data, name, fmt, n, kinds):
    tasks, got = load_tasks_with_format(shared_data / "stdio" / name)
    assert (got, len(tasks)) == (fmt, n)
    counts = {}
    for t in tasks:
        counts[t.kind] = counts.get(t.kind, 0) + 1
        if t.kind == "stdio":
            assert t.stdio.tests and STDIO_INSTRUCTION in t.prompt and not t.tests
        else:
            assert t.tests and t.entry_point and "standard input" in t.prompt
    assert counts == kinds


def test_codecontests_merges_public_private_generated(shared_data):
    (t,) = load_tasks(shared_data / "stdio" / "codecontests-alphacodium-example.json")
    rec = json.loads((shared_data / "stdio" / "codecontests-alphacodium-example.json").read_text())
    n = sum(len(rec[k]["input"]) for k in ("public_tests", "private_tests", "generated_tests"))
    assert len(t.stdio.tests) == n and t.stdio.tests[0].input == rec["public_tests"]["input"][0]


def test_livecodebench_pickled_tests_decode(shared_data):
    tasks = {t.task_id: t for t in load_tasks(shared_data / "stdio" / "livecodebench-sandboxfusion.jsonl")}
    assert len(tasks["atcoder/abc301_a"].stdio.tests) == 15
    seniors = tasks["leetcode/2727"]
    assert seniors.entry_point == "Solution" and len(seniors.tests) == 14
    assert "Solution().countSeniors(" in seniors.tests[0]


def test_apps_reference_solutions_pass_and_wrong_ones_fail(shared_data):
    from codechat.config import VerifierConfig
    from codechat.verifier.verify import Verifier

    tasks = load_tasks(shared_data / "stdio" / "apps")
    with Verifier(VerifierConfig(workers=2)) as v:
        verdicts = v.verify_many([(t, t.solution) for t in tasks])
        assert all(x.passed for x in verdicts), verdicts
        wrong = v.verify_many([(t, "print(0)" if t.kind == "stdio" else f"def {t.entry_point}(*a):\n    return 0")
                               for t in tasks])
        assert not any(x.passed for x in wrong)


def test_livecodebench_functional_and_stdin_programs_are_judged(shared_data):
    from codechat.config import VerifierConfig
    from codechat.verifier.verify import Verifier

    tasks = {t.task_id: t for t in load_tasks(shared_data / "stdio" / "livecodebench-sandboxfusion.jsonl")}
    right = ("class Solution:\n    def countSeniors(self, details: List[str]) -> int:\n"
             "        return sum(int(d[11:13]) > 60 for d in details)")
    swap = ("for _ in range(int(input())):\n    s = input().strip()\n"
            "    print('YES' if sum(a != b for a, b in zip(s, 'abc')) in (0, 2) else 'NO')")
    with Verifier(VerifierConfig(workers=2)) as v:
        assert v.verify(tasks["leetcode/2727"], f"```python\n{right}\n```").passed
        assert not v.verify(tasks["leetcode/2727"], right.replace("> 60", ">= 60")).passed
        assert v.verify(tasks["codeforces/1873_A"], swap).passed
        assert not v.verify(tasks["codeforces/1873_A"], swap.replace("(0, 2)", "(0, 1)")).passed


# --- fixtures of our own ------------------------------------------------------------------------------------------
def test_apps_taco_jsonl_record(tmp_path):
    recs = [{"problem_id": 7, "question": "Add.", "solutions": json.dumps(["print(sum(map(int, input().split())))"]),
             "input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]}), "starter_code": ""},
            {"problem_id": 8, "question": "Square.", "solutions": "[]", "starter_code": "def sq(x):\n",
             "input_output": json.dumps({"fn_name": "sq", "inputs": [[2], [3]], "outputs": [[4], 9]})}]
    a, b = load_tasks(write(tmp_path, recs))
    assert (a.task_id, a.kind, a.solution, a.stdio.tests[0].output) == ("7", "stdio", recs[0]["solutions"][2:-2], "3\n")
    assert (b.kind, b.entry_point, len(b.tests)) == ("function", "sq", 2)
    assert b.tests[0] == "assert _codechat_same(_codechat_fn('sq')(*[2]), [4], True)"


def test_codecontests_record_with_solutions_and_time_limit(tmp_path):
    rec = {"name": "1_A", "description": "Echo.", "public_tests": {"input": ["a\n"], "output": ["a\n"]},
           "private_tests": {"input": ["b\n"], "output": ["b\n"]}, "generated_tests": {"input": [], "output": []},
           "solutions": {"language": [2, 3], "solution": ["#cpp", "print(input())"]},
           "time_limit": {"seconds": 2, "nanos": 500000000}}
    (t,) = load_tasks(write(tmp_path, [rec]))
    assert (t.task_id, len(t.stdio.tests), t.solution, t.timeout_s) == ("1_A", 2, "print(input())", 2.5)


def test_livecodebench_record_public_and_private(tmp_path):
    private = json.dumps([{"input": "2\n", "output": "4\n", "testtype": "stdin"}])
    rec = {"question_id": "abc1", "question_content": "Double it.", "platform": "atcoder", "starter_code": "",
           "public_test_cases": json.dumps([{"input": "1\n", "output": "2\n", "testtype": "stdin"}]),
           "private_test_cases": pickled(private), "metadata": "{}"}
    fn = {"question_id": "lc1", "question_content": "Add.", "platform": "leetcode",
          "starter_code": "class Solution:\n    def add(self, a: int, b: int) -> int:\n        ",
          "public_test_cases": json.dumps([{"input": "1\n2", "output": "3", "testtype": "functional"}]),
          "private_test_cases": pickled(json.dumps([{"input": "[1]\n[2]", "output": "[1, 2]",
                                                     "testtype": "functional"}])),
          "metadata": json.dumps({"func_name": "add"})}
    a, b = load_tasks(write(tmp_path, [rec, fn]))
    assert [(x.input, x.output) for x in a.stdio.tests] == [("1\n", "2\n"), ("2\n", "4\n")]
    assert b.tests == ["assert _codechat_same(Solution().add(*[1, 2]), 3, False)",
                       "assert _codechat_same(Solution().add(*[[1], [2]]), [1, 2], False)"]


def test_deepcoder_both_test_shapes(tmp_path):
    recs = [{"problem": "P", "tests": {"inputs": ["1\n"], "outputs": ["1\n"]}},
            {"problem": "Q", "tests": [{"input": "2\n", "output": "2\n"}]}]
    a, b = load_tasks(write(tmp_path, recs))
    assert a.stdio.tests[0].input == "1\n" and b.stdio.tests[0].output == "2\n" and a.task_id != b.task_id


def test_codechat_schema_round_trips_stdio_tasks(tmp_path):
    rec = {"task_id": "s", "prompt": "p", "kind": "stdio", "tests": [{"input": "1\n", "output": "1\n"}],
           "float_tol": 1e-6, "checker": "def check(i, o, e):\n    return True\n", "solution": "print(input())"}
    (t,) = load_tasks(write(tmp_path, [rec]))
    assert (t.kind, t.stdio.float_tol, t.solution) == ("stdio", 1e-6, "print(input())")
    save_tasks([t], tmp_path / "out.jsonl")
    (u,) = load_tasks(tmp_path / "out.jsonl")
    assert u.stdio == t.stdio and u.solution == t.solution


@pytest.mark.parametrize("rec, msg", [
    ({"problem_id": 1, "question": "q", "input_output": "{not json"}, "field 'input_output' is not valid JSON"),
    ({"problem_id": 1, "question": "q", "input_output": json.dumps({"inputs": ["1"], "outputs": []})},
     "1 test inputs but 0 outputs"),
    ({"problem_id": 1, "question": "q", "input_output": json.dumps({"inputs": [1], "outputs": ["1"]})},
     "a test input must be a string"),
    ({"description": "d", "public_tests": [1, 2]}, "field 'public_tests' must be an object"),
    ({"question_content": "q", "public_test_cases": "[]", "private_test_cases": "!!notbase64"},
     "cannot decode the compressed test field"),
    ({"problem": "p", "tests": [{"input": "1", "output": "1", "testtype": "weird"}]}, "unknown test type"),
    ({"task_id": "x", "prompt": "p", "kind": "stdio", "tests": ["assert 1"]}, "must be a list of {input, output}"),
    ({"task_id": "x", "prompt": "p", "kind": "stdio", "tests": [], "checker": "def check(:"}, "does not parse"),
    ({"task_id": "x", "prompt": "p", "kind": "weird", "tests": []}, "field 'kind' must be"),
])
def test_bad_records_fail_with_one_line_naming_the_file(tmp_path, rec, msg):
    with pytest.raises(TaskFormatError) as e:
        load_tasks(write(tmp_path, [rec]))
    text = str(e.value)
    assert msg in text and "t.jsonl:1" in text and "\n" not in text


def test_apps_folder_errors(tmp_path):
    (tmp_path / "p1").mkdir()
    with pytest.raises(TaskFormatError, match="no question.txt"):
        load_tasks(tmp_path)


# --- the untrusted pickled field ------------------------------------------------------------------------------------
class Boom:
    def __reduce__(self):
        return (open, ("/tmp/codechat-pickle-pwned", "w"))


def test_restricted_unpickler_refuses_code(tmp_path):
    import os

    with pytest.raises(TaskFormatError, match="refusing to load"):
        decode_pickled_field(pickled([Boom()]), "f.jsonl:3")
    assert not os.path.exists("/tmp/codechat-pickle-pwned")
    with pytest.raises(TaskFormatError, match="f.jsonl:3"):
        decode_pickled_field(pickled({1, 2}.__class__), "f.jsonl:3")  # a class itself is not plain


def test_zlib_bomb_is_refused(monkeypatch):
    import codechat.tasks.pickled as sl

    monkeypatch.setattr(sl, "MAX_DECODED", 1 << 16)
    bomb = base64.b64encode(zlib.compress(pickle.dumps("x" * (1 << 20)))).decode()
    with pytest.raises(TaskFormatError, match="more than"):
        sl.decode_pickled_field(bomb, "w")


plain = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
                     lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4)
                     | st.tuples(c, c), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(plain)
def test_plain_values_round_trip(x):
    assert restricted_unpickle(pickle.dumps(x)) == x


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_fail_with_a_format_error(data):
    for text in (base64.b64encode(zlib.compress(data)).decode(), base64.b64encode(data).decode()):
        try:
            decode_pickled_field(text, "f:1")
        except TaskFormatError as e:
            assert str(e).startswith("f:1: ")


# --- fuzz: any record shaped like one of the formats loads or fails with one line ------------------------------
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                           max_leaves=12)
FIELDS = {"apps": ["question", "input_output", "solutions", "starter_code", "problem_id"],
          "codecontests": ["description", "public_tests", "private_tests", "generated_tests", "solutions",
                           "time_limit", "name"],
          "livecodebench": ["question_content", "public_test_cases", "private_test_cases", "starter_code",
                            "metadata", "question_id"],
          "sandboxfusion": ["content", "test", "labels", "id"],
          "deepcoder": ["problem", "tests", "starter_code"]}


@st.composite
def records(draw):
    fmt = draw(st.sampled_from(sorted(FIELDS)))
    rec = {}
    for k in FIELDS[fmt]:
        kind = draw(st.sampled_from(["value", "json", "io", "absent"]))
        if kind == "value":
            rec[k] = draw(json_values)
        elif kind == "json":
            rec[k] = json.dumps(draw(json_values))
        elif kind == "io":
            rec[k] = draw(st.sampled_from([
                {"input": ["1\n"], "output": ["1\n"]}, json.dumps({"inputs": ["1"], "outputs": ["1"]}),
                json.dumps({"fn_name": "f", "inputs": [[1]], "outputs": [1]}),
                [{"input": "1", "output": "1", "testtype": "functional"}], pickled("[]"), pickled([1]),
                {"language": 5, "solution": ["x"]}, {"seconds": "abc"}, {"seconds": 2, "nanos": 5},
                [{"input": "1", "output": "1", "testtype": ["x"]}], [{"input": {"stdin": 1}, "output": {}}],
                json.dumps({"func_name": 3}), json.dumps({"fn_name": "f", "inputs": ["[1]\n2"], "outputs": ["3"]})]))
    return fmt, rec


@settings(max_examples=400, deadline=None)
@given(records())
def test_fuzzed_records_load_or_fail_with_one_line(tmp_path_factory, fr):
    fmt, rec = fr
    path = tmp_path_factory.mktemp("fuzz") / "f.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    try:
        tasks = load_tasks(path, fmt)
    except TaskFormatError as e:
        assert "\n" not in str(e) and str(path) in str(e)
        return
    (t,) = tasks
    assert (t.stdio is not None and not t.tests) or (t.stdio is None and t.entry_point)


BFS = '''class Solution:
    def shortestDistanceAfterQueries(self, n: int, queries: List[List[int]]) -> List[int]:
        adj = [[i + 1] for i in range(n - 1)] + [[]]
        out = []
        for u, v in queries:
            adj[u].append(v)
            dist, todo = [0] + [-1] * (n - 1), deque([0])
            while todo:
                x = todo.popleft()
                for y in adj[x]:
                    if dist[y] < 0:
                        dist[y] = dist[x] + 1
                        todo.append(y)
            out.append(dist[n - 1])
        return out
'''


def test_deepcoder_functional_task_is_judged(shared_data):
    from codechat.config import VerifierConfig
    from codechat.verifier.verify import Verifier

    tasks = load_tasks(shared_data / "stdio" / "deepcoder-test-livecodebench.json")
    t = next(t for t in tasks if t.tests and "shortestDistanceAfterQueries" in t.tests[0])
    with Verifier(VerifierConfig(workers=1)) as v:  # `deque`, `List`: from the harness prelude
        assert v.verify(t, f"```python\n{BFS}```").passed
        assert not v.verify(t, f"```python\n{BFS.replace('dist[n - 1]', 'dist[n - 2]')}```").passed
