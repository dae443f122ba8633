"""Verify while decoding: the sampler reports each row once with the batch's final text, finished rows first;
the stream gives verify_many's verdicts in row order and starts verifying before sampling ends; errors surface."""
import json
import time

import pytest
import torch

from codechat.config import SamplingConfig, VerifierConfig
from codechat.config.io import load_config
from codechat.policy import Sampler
from codechat.rollout.collect import collect, rollout_metrics
from codechat.rollout.stream import VerifyStream
from codechat.tasks.builtin import load_builtin
from codechat.train import train
from codechat.verifier import Verifier
from policy_helpers import tiny_policy


@pytest.fixture(scope="module")
def pol(tmp_path_factory):
    return tiny_policy(tmp_path_factory)


@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=2, timeout_s=5)) as v:
        yield v


@pytest.fixture(scope="module")
def tasks():
    return load_builtin("builtin:toy")[:4]


def test_sampler_reports_every_row_once_with_its_final_text(pol):
    prompts = [pol.encode_prompt(t) for t in ["def add(a, b):\n", "x = 1\n"]]
    cfg = SamplingConfig(max_new_tokens=24, seed=3, stop=["\n"])  # newline stops: rows end at different steps
    calls = []
    b = Sampler(pol).sample(prompts, 4, cfg, on_finish=lambda r, t: calls.append((r, t)))
    assert sorted(r for r, _ in calls) == list(range(8))
    assert all(t == b.texts[r] for r, t in calls)
    lens = [int(b.n_tokens[r]) for r, _ in calls]
    assert lens == sorted(lens) and len(set(lens)) > 1  # reported as they finished, not at the end
    plain = Sampler(pol).sample(prompts, 4, cfg)  # the callback changes nothing in the batch
    assert torch.equal(plain.tokens, b.tokens) and plain.texts == b.texts


class ScriptedEngine:
    """Finishes rows in a scrambled order; after the first, waits until the stream has its verdict."""

    def __init__(self, texts, order, stream_of):
        self.texts, self.order, self.stream_of = texts, order, stream_of
        self.verified_during_decode = False

    def sample(self, prompts, n, cfg, on_finish=None):
        for k, row in enumerate(self.order):
            on_finish(row, self.texts[row])
            if k == 0:
                deadline = time.monotonic() + 30
                while not self.stream_of().ready(row) and time.monotonic() < deadline:
                    time.sleep(0.01)
                self.verified_during_decode = self.stream_of().ready(row)
        return None


def test_stream_matches_verify_many_in_row_order(verifier, tasks):
    per_row = [t for t in tasks for _ in range(3)]
    texts = []
    for i, t in enumerate(per_row):  # right, wrong, no code, in turn
        texts.append([t.solution, "def f(:\n", "no code here"][i % 3] if t.solution else "x")
    want = verifier.verify_many(list(zip(per_row, texts)))
    holder = {}
    order = [5, 0, 11, 3, 1, 7, 2, 10, 4, 9, 6, 8]
    engine = ScriptedEngine(texts, order, lambda: holder["vs"])
    with VerifyStream(verifier, per_row) as vs:
        holder["vs"] = vs
        engine.sample(None, 3, None, on_finish=vs.submit)
        got, timing = vs.result()
    assert [(v.status, v.passed, v.tests_passed) for v in got] == [(v.status, v.passed, v.tests_passed) for v in want]
    assert any(v.passed for v in got) and not all(v.passed for v in got)
    assert engine.verified_during_decode and timing.overlap_frac >= 1 / 12


def test_collect_stream_gives_the_same_rollouts(pol, verifier, tasks):
    cfg = SamplingConfig(max_new_tokens=24, seed=5, stop=["\n\n"])
    plain = collect(pol, Sampler(pol), verifier, tasks, 2, cfg, seed=11)
    streamed = collect(pol, Sampler(pol), verifier, tasks, 2, cfg, seed=11, stream=True)
    assert streamed.batch.texts == plain.batch.texts
    assert [v.status for v in streamed.verdicts] == [v.status for v in plain.verdicts]
    assert torch.equal(streamed.rewards, plain.rewards)
    m = rollout_metrics(streamed)
    assert 0 <= m["verify_overlap_frac"] <= 1 and "verify_overlap_frac" not in rollout_metrics(plain)


def test_errors_surface_and_rows_are_checked(tasks):
    class Broken:
        workers = 2

        def verify(self, task, text):
            raise RuntimeError("sandbox down")

    vs = VerifyStream(Broken(), tasks[:2])
    vs.submit(0, "x")
    vs.submit(1, "y")
    with pytest.raises(ValueError, match="already submitted"):
        vs.submit(0, "x")
    with pytest.raises(ValueError, match="out of range"):
        vs.submit(2, "x")
    with pytest.raises(RuntimeError, match="sandbox down"):
        vs.result()
    vs.close()


def test_a_row_never_finished_is_an_error(verifier, tasks):
    with VerifyStream(verifier, tasks[:2]) as vs:
        vs.submit(1, "no code")
        with pytest.raises(RuntimeError, match=r"rows \[0\]"):
            vs.result()


def test_training_with_verify_while_decoding_logs_the_same_rollouts(tmp_path):
    base = ["data.train=builtin:toy", "sampling.max_new_tokens=12", "log.progress=false", "log.plot=false",
            "verifier.workers=2", "rl.prompts_per_step=2", "rl.group_size=4", "checkpoint.every=0",
            "log.audit=false", "stages=[grpo]", "rl.steps=2"]
    runs = {}
    for flag in ("false", "true"):
        run = tmp_path / flag
        train(load_config(None, base + [f"run_dir={run}", f"rollout.verify_while_decoding={flag}"]))
        rolls = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
        mets = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        runs[flag] = ([(r["completion"], r["reward"], r["status"]) for r in rolls],
                      [m for m in mets if "pass_rate" in m])
    assert runs["true"][0] == runs["false"][0] and len(runs["true"][0]) == 16
    assert all("verify_overlap_frac" in m for m in runs["true"][1]) and runs["true"][1]
    assert not any("verify_overlap_frac" in m for m in runs["false"][1])
    dedup = {f: [m["verify/dedup_frac"] for m in runs[f][1]] for f in runs}  # logged on both paths, the same
    assert dedup["true"] == dedup["false"] and len(dedup["true"]) == 2
