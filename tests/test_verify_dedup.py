"""Verify once per distinct program (codechat/verifier/dedup.py): batch duplicates run once, the bounded cache
across batches, a reused verdict is the verdict of that very input, statistics, and a real sandbox round."""
import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from codechat import CodechatError
from codechat.config import VerifierConfig
from codechat.tasks import Task
from codechat.tasks.stdio import IOTest, StdioSpec
from codechat.verifier.dedup import DedupVerifier, pair_key
from codechat.verifier.verdict import Verdict
from codechat.verifier.verify import Verifier

ADD = Task("add", "Write add.", ["assert add(1, 2) == 3", "assert add(0, 0) == 0"], "add")
GOOD, WRONG = "def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a * b\n"


class Counting:
    """A fake verifier: the verdict is a pure function of (task, completion); records every pair it runs."""

    def __init__(self, status_of=None):
        self.calls: list[tuple[Task, str]] = []
        self.status_of = status_of or (lambda t, c: "passed" if c == GOOD else "failed")
        self.closed = False

    def verify_many(self, pairs):
        pairs = list(pairs)
        self.calls.extend(pairs)
        out = []
        for t, c in pairs:
            s = self.status_of(t, c)
            out.append(Verdict(s, s == "passed", float(s == "passed"), tests_total=len(t.tests),
                               message=f"{t.task_id}:{c}", duration_s=0.5))
        return out

    def close(self):
        self.closed = True


def test_batch_duplicates_run_once_in_order():
    inner = Counting()
    v = DedupVerifier(inner)
    pairs = [(ADD, GOOD), (ADD, WRONG), (ADD, GOOD), (ADD, GOOD), (ADD, WRONG)]
    out = v.verify_many(pairs)
    assert [p[1] for p in inner.calls] == [GOOD, WRONG]
    assert out == Counting().verify_many(pairs)  # the same verdicts as running every pair
    assert v.last.n == 5 and v.last.ran == 2 and v.last.dedup_frac == pytest.approx(0.6)
    assert v.last.saved_s == pytest.approx(1.5) and v.last.cache_hits == 0
    assert v.last.metrics()["verify/dedup_frac"] == pytest.approx(0.6)


def test_same_text_on_another_task_is_another_program():
    other = dataclasses.replace(ADD, tests=["assert add(2, 2) == 4"])
    renamed = dataclasses.replace(ADD, task_id="add2")
    inner = Counting()
    DedupVerifier(inner).verify_many([(ADD, GOOD), (other, GOOD), (renamed, GOOD), (ADD, GOOD)])
    assert len(inner.calls) == 3


def test_every_task_field_is_in_the_key():
    base = Task("t", "p", ["assert 1"], "f", "s", 3.0, {"a": 1})
    variants = [dataclasses.replace(base, **{f.name: v}) for f, v in zip(
        dataclasses.fields(Task), ["u", "q", ["assert 2"], "g", "x", 4.0, {"a": 2}, "answer",
                                   StdioSpec([IOTest("1\n", "1\n")])])]
    assert len(variants) == len(dataclasses.fields(Task))  # a new Task field must be added here and to the key
    keys = {pair_key(base, "c")} | {pair_key(t, "c") for t in variants} | {pair_key(base, "d")}
    assert len(keys) == len(variants) + 2


def test_every_stdio_field_is_in_the_key():
    spec = StdioSpec([IOTest("1\n", "1\n"), IOTest("2\n", "2\n")], 0.0, "")
    base = Task("s", "p", [], stdio=spec)
    variants = [dataclasses.replace(spec, tests=[IOTest("1\n", "1\n")]),
                dataclasses.replace(spec, tests=[IOTest("1\n", "1\n"), IOTest("2\n", "3\n")]),
                dataclasses.replace(spec, tests=[IOTest("1\n", "1\n"), IOTest("3\n", "2\n")]),
                dataclasses.replace(spec, float_tol=1e-6), dataclasses.replace(spec, checker="def check(i, o, e): 1"),
                dataclasses.replace(spec, ignore_case=True)]
    assert len(dataclasses.fields(StdioSpec)) == 4  # a new StdioSpec field must be varied here
    keys = {pair_key(base, "c")} | {pair_key(dataclasses.replace(base, stdio=v), "c") for v in variants}
    assert len(keys) == len(variants) + 1
    assert pair_key(base, "c") == pair_key(Task("s", "p", [], stdio=dataclasses.replace(spec)), "c")  # equal input


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["a", "b", "ab", ""])), max_size=20),
       st.integers(0, 3))
def test_fuzz_equals_running_every_pair(spec, cache_size):
    tasks = [Task(f"t{i}", "p", [f"assert {i}"]) for i in range(3)]
    status = lambda t, c: "passed" if (len(c) + int(t.task_id[1])) % 2 else "failed"  # noqa: E731
    v = DedupVerifier(Counting(status), cache_size=cache_size)
    for _ in range(2):  # a second batch goes through the cache
        pairs = [(tasks[i], c) for i, c in spec]
        assert v.verify_many(pairs) == Counting(status).verify_many(pairs)
        assert v.last.ran <= len({(i, c) for i, c in spec})
    assert len(v.inner.calls) <= 2 * len({(i, c) for i, c in spec})


def test_bounded_cache_across_batches_is_lru():
    inner = Counting()
    v = DedupVerifier(inner, cache_size=2)
    a, b, c = (ADD, GOOD), (ADD, WRONG), (ADD, "def add(a, b):\n    return 3\n")
    v.verify_many([a, b])
    v.verify_many([a])  # hit; a is now the most recent
    assert v.last.cache_hits == 1 and v.last.ran == 0 and len(inner.calls) == 2
    v.verify_many([c])  # evicts b, the least recently used
    v.verify_many([a, b])
    assert [p[1] for p in inner.calls] == [GOOD, WRONG, c[1], WRONG]
    assert v.total.n == 6 and v.total.ran == 4


def test_no_cache_by_default_and_load_dependent_verdicts_are_never_cached():
    inner = Counting(lambda t, c: "timeout" if c == "loop" else "passed")
    v = DedupVerifier(inner)
    v.verify_many([(ADD, GOOD)])
    v.verify_many([(ADD, GOOD)])
    assert len(inner.calls) == 2  # cache_size 0: batches are independent
    v = DedupVerifier(inner, cache_size=10)
    v.verify_many([(ADD, "loop"), (ADD, "loop")])
    v.verify_many([(ADD, "loop")])
    assert [c for _, c in inner.calls[2:]] == ["loop", "loop"]  # once per batch, not cached


def test_infra_error_verdicts_are_never_cached():
    inner = Counting(lambda t, c: "infra_error" if c == "lost" else "passed")
    v = DedupVerifier(inner, cache_size=10)
    assert [x.status for x in v.verify_many([(ADD, "lost"), (ADD, "lost"), (ADD, GOOD)])] == ["infra_error"] * 2 + \
        ["passed"]
    v.verify_many([(ADD, "lost"), (ADD, GOOD)])
    assert [c for _, c in inner.calls] == ["lost", GOOD, "lost"]  # the lost worker's pair runs again; GOOD cached


def test_dedup_off_runs_every_pair_and_bad_cache_size():
    inner = Counting()
    v = DedupVerifier(inner, dedup=False)
    v.verify_many([(ADD, GOOD)] * 3)
    assert len(inner.calls) == 3 and v.last.dedup_frac == 0.0
    with pytest.raises(CodechatError, match="cache_size"):
        DedupVerifier(inner, cache_size=-1)
    with DedupVerifier(inner):
        pass
    assert inner.closed


def test_a_short_verifier_answer_is_an_error():
    class Short(Counting):
        def verify_many(self, pairs):
            return super().verify_many(pairs)[:-1]

    with pytest.raises(CodechatError, match="returned 1 verdicts for 2 pairs"):
        DedupVerifier(Short()).verify_many([(ADD, GOOD), (ADD, WRONG)])


def test_real_sandbox_verdicts_equal_undeduplicated_ones():
    pairs = [(ADD, GOOD), (ADD, WRONG), (ADD, GOOD), (ADD, "def add(a, b:\n"), (ADD, WRONG), (ADD, "")]
    with Verifier(VerifierConfig(workers=2, timeout_s=3)) as inner:
        plain = inner.verify_many(pairs)
        v = DedupVerifier(inner, cache_size=8)
        first, second = v.verify_many(pairs), v.verify_many(pairs)
    strip = lambda vs: [dataclasses.replace(x, duration_s=0.0) for x in vs]  # noqa: E731
    assert strip(first) == strip(plain) and second == first
    assert [x.status for x in first] == ["passed", "failed", "passed", "syntax_error", "failed", "no_code"]
    assert v.total.n == 12 and v.total.ran == 4  # 4 distinct pairs, once


def test_collect_logs_verify_dedup_metrics():
    import torch

    from codechat.config import SamplingConfig
    from codechat.policy import SampleBatch
    from codechat.rollout.collect import collect, rollout_metrics

    class Pol:
        def encode_prompt(self, text):
            return [1, 2]

    class Samp:
        def sample(self, prompts, n, cfg):
            texts = [GOOD, GOOD, WRONG, GOOD]
            N = len(prompts) * n
            return SampleBatch(torch.arange(len(prompts)).repeat_interleave(n), torch.ones(N, 3, dtype=torch.long),
                               torch.ones(N, 3), torch.zeros(N, 3), ["stop"] * N, texts[:N], torch.full((N,), 3))

    inner = Counting()
    r = collect(Pol(), Samp(), DedupVerifier(inner), [ADD], 4, SamplingConfig())
    m = rollout_metrics(r)
    assert len(inner.calls) == 2 and m["verify/dedup_frac"] == pytest.approx(0.5)
    assert m["pass_rate"] == pytest.approx(0.75)
    plain = rollout_metrics(collect(Pol(), Samp(), Counting(), [ADD], 4, SamplingConfig()))
    assert "verify/dedup_frac" not in plain


def test_real_sandbox_stdio_and_answer_tasks_equal_undeduplicated_ones():
    echo = Task("echo", "Echo.", [], stdio=StdioSpec([IOTest("1\n", "1\n"), IOTest("2\n", "2\n")]))
    math = Task("m", "1+1?", [], kind="answer", metadata={"answer": "2"})
    ok, bad = "```python\nprint(input())\n```", "```python\nprint(1)\n```"
    pairs = [(echo, ok), (echo, bad), (echo, ok), (math, "\\boxed{2}"), (math, "\\boxed{3}"), (math, "\\boxed{2}")]
    with Verifier(VerifierConfig(workers=2, timeout_s=3)) as inner:
        plain = inner.verify_many(pairs)
        v = DedupVerifier(inner, cache_size=8)
        first = v.verify_many(pairs)
    strip = lambda vs: [dataclasses.replace(x, duration_s=0.0, cpu_s=0.0) for x in vs]  # noqa: E731
    assert strip(first) == strip(plain)
    assert [x.passed for x in first] == [True, False, True, True, False, True]
    assert v.last.ran == 4
