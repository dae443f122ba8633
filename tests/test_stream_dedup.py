"""Verify while decoding through a DedupVerifier (verifier/dedup.py `DedupStream`, rollout/stream.py): copies of a
row share its verdict instead of running again, the cache is used, and the batch's DedupStats equal those of one
verify_many call over the same pairs; collect(stream=True) logs them (verify/dedup_frac, ...)."""
import dataclasses
import threading

import pytest
import torch
from hypothesis import given, settings, strategies as st

from codechat.config import SamplingConfig
from codechat.policy import SampleBatch
from codechat.rollout.collect import collect, rollout_metrics
from codechat.rollout.stream import VerifyStream
from codechat.tasks import Task
from codechat.verifier.dedup import DedupVerifier
from codechat.verifier.verdict import Verdict

ADD = Task("add", "def add(a, b):\n", ["assert add(1, 2) == 3"], entry_point="add")
MUL = Task("mul", "def mul(a, b):\n", ["assert mul(2, 3) == 6"], entry_point="mul")
GOOD, WRONG, SLOW = "return a + b", "return a * b", "while True: pass"


class Counting:
    """A thread-safe fake verifier: the verdict is a pure function of (task, completion); records what it runs."""

    workers = 3

    def __init__(self):
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def verify_many(self, pairs):
        out = []
        for t, c in pairs:
            with self._lock:
                self.calls.append((t.task_id, c))
            s = "timeout" if c == SLOW else "passed" if (t.task_id, c) in (("add", GOOD), ("mul", WRONG)) else "failed"
            out.append(Verdict(s, s == "passed", float(s == "passed"), message=f"{t.task_id}:{c}",
                               duration_s=0.25 + 0.5 * (c == SLOW)))
        return out

    def close(self):
        pass


def streamed(v: DedupVerifier, pairs):
    """The pairs through a VerifyStream, submitted in a scrambled order (as rows finish decoding)."""
    order = sorted(range(len(pairs)), key=lambda i: (i * 7) % max(len(pairs), 1))
    with VerifyStream(v, [t for t, _ in pairs]) as vs:
        for i in order:
            vs.submit(i, pairs[i][1])
        verdicts, _ = vs.result()
    return verdicts, vs.dedup_stats


def test_copies_run_once_and_stats_equal_verify_many():
    pairs = [(ADD, GOOD), (ADD, WRONG), (ADD, GOOD), (MUL, GOOD), (ADD, GOOD), (ADD, WRONG)]
    inner = Counting()
    verdicts, stats = streamed(DedupVerifier(inner), pairs)
    twin = DedupVerifier(Counting())
    assert verdicts == twin.verify_many(pairs)
    assert sorted(inner.calls) == sorted([("add", GOOD), ("add", WRONG), ("mul", GOOD)])  # 3 distinct pairs, once each
    assert stats == twin.last and stats.n == 6 and stats.ran == 3 and stats.saved_s == pytest.approx(0.75)


def test_the_cache_answers_a_later_batch_and_the_verifier_records_it():
    pairs = [(ADD, GOOD), (ADD, SLOW), (ADD, GOOD), (MUL, WRONG)]
    inner = Counting()
    v = DedupVerifier(inner, cache_size=8)
    streamed(v, pairs)
    verdicts, stats = streamed(v, pairs)
    assert [c for c in inner.calls].count(("add", SLOW)) == 2  # a timeout is never cached: it ran again
    assert stats.ran == 1 and stats.cache_hits == 3 and v.last == stats and v.total.n == 8
    assert [x.status for x in verdicts] == ["passed", "timeout", "passed", "passed"]


def test_dedup_off_runs_every_row():
    pairs = [(ADD, GOOD)] * 4
    inner = Counting()
    verdicts, stats = streamed(DedupVerifier(inner, dedup=False), pairs)
    assert len(inner.calls) == 4 and stats.n == stats.ran == 4 and stats.dedup_frac == 0.0
    assert len(set(map(repr, verdicts))) == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from([ADD, MUL]), st.sampled_from([GOOD, WRONG, SLOW, ""])),
                         max_size=12), min_size=1, max_size=3),
       st.integers(0, 3), st.booleans())
def test_fuzz_stream_equals_verify_many(batches, cache_size, dedup):
    """Any batches, cache size and dedup flag: the stream gives verify_many's verdicts and stats, batch by batch."""
    stream_v = DedupVerifier(Counting(), cache_size=cache_size, dedup=dedup)
    twin = DedupVerifier(Counting(), cache_size=cache_size, dedup=dedup)
    for pairs in batches:
        verdicts, stats = streamed(stream_v, pairs)
        assert verdicts == twin.verify_many(pairs)
        assert dataclasses.astuple(stats)[:3] == dataclasses.astuple(twin.last)[:3]
        assert stats.saved_s == pytest.approx(twin.last.saved_s)
    assert sorted(stream_v.inner.calls) == sorted(twin.inner.calls)  # the same runs, whatever the order


def test_collect_stream_logs_verify_dedup_metrics():
    class Pol:
        def encode_prompt(self, text):
            return [1, 2]

    class Samp:
        def sample(self, prompts, n, cfg, on_finish=None):
            texts = [GOOD, GOOD, WRONG, GOOD]
            N = len(prompts) * n
            for row in reversed(range(N)):
                if on_finish is not None:
                    on_finish(row, texts[row])
            return SampleBatch(torch.arange(len(prompts)).repeat_interleave(n), torch.ones(N, 3, dtype=torch.long),
                               torch.ones(N, 3), torch.zeros(N, 3), ["stop"] * N, texts[:N], torch.full((N,), 3))

    inner = Counting()
    r = collect(Pol(), Samp(), DedupVerifier(inner), [ADD], 4, SamplingConfig(), stream=True)
    m = rollout_metrics(r)
    plain = rollout_metrics(collect(Pol(), Samp(), DedupVerifier(Counting()), [ADD], 4, SamplingConfig()))
    assert len(inner.calls) == 2 and m["verify/dedup_frac"] == pytest.approx(0.5) == plain["verify/dedup_frac"]
    assert m["verify/saved_s"] == pytest.approx(plain["verify/saved_s"]) and "verify_overlap_frac" in m
