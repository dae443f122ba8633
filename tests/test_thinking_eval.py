"""Evaluation of thinking completions: pass@1 and length by mode and by difficulty bucket (hand-computed and
fuzzed), the reference file's errors, `codechat eval --thinking --reference`, the forced prefix's encoding, and
the refused async and repository combinations."""
import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from codechat import CodechatError
from codechat.cli import main
from codechat.config.io import ConfigError, load_config
from codechat.evaluation.thinking import bucket_metrics, bucket_of, load_reference, mode_metrics, reference_rates
from codechat.config import ThinkingConfig
from codechat.rollout.thinking import BalancedSampler
from codechat.tasks import load_tasks


def _rec(tid, passed, thought, n_tokens):
    return {"task_id": tid, "passed": passed, "n_tokens": n_tokens, "verdict": {"thought": thought}}


RECS = [_rec("a", True, True, 10), _rec("a", True, False, 2), _rec("b", False, True, 12), _rec("b", False, True, 8),
        _rec("c", True, False, 4), _rec("c", False, False, 6)]


def test_mode_metrics_by_hand():
    m = mode_metrics(RECS)
    assert m["thinking/nothink_frac"] == 0.5 and m["thinking/len"] == 42 / 6
    assert m["thinking/pass@1/think"] == 1 / 3 and m["thinking/len/think"] == 10
    assert m["thinking/pass@1/nothink"] == 2 / 3 and m["thinking/len/nothink"] == 4
    only_think = mode_metrics([r for r in RECS if r["verdict"]["thought"]])
    assert "thinking/pass@1/nothink" not in only_think and only_think["thinking/nothink_frac"] == 0
    assert mode_metrics([]) == {}
    assert "thinking/malformed_frac" not in m  # no tag given (or no completion text): not measured
    texts = ["<a>plan</a>x", " <a></a>x", "<ax></a>x", "x"]
    recs = [dict(r, completion=t) for r, t in zip(RECS, texts)] + RECS[4:]  # the last two carry no text
    assert mode_metrics(recs, "<a>")["thinking/malformed_frac"] == 2 / 4


def test_bucket_metrics_by_hand():
    rates = {"a": 1.0, "b": 0.0, "c": 0.5}  # easy, hard, medium; "d" unrated
    m = bucket_metrics(RECS + [_rec("d", True, False, 1)], rates)
    assert (m["difficulty/easy/pass@1"], m["difficulty/easy/nothink_frac"], m["difficulty/easy/len"]) == (1, .5, 6)
    assert (m["difficulty/hard/pass@1"], m["difficulty/hard/nothink_frac"], m["difficulty/hard/len"]) == (0, 0, 10)
    assert (m["difficulty/medium/pass@1"], m["difficulty/medium/nothink_frac"]) == (0.5, 1.0)
    assert m["difficulty/easy/tasks"] == m["difficulty/hard/tasks"] == m["difficulty/medium/tasks"] == 1
    assert m["difficulty/unrated_tasks"] == 1
    assert [bucket_of(x) for x in (0, 0.33, 1 / 3, 0.66, 2 / 3, 1)] == ["hard", "hard", "medium", "medium", "easy",
                                                                       "easy"]
    with pytest.raises(ValueError):
        bucket_of(-0.1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans(), st.booleans(), st.integers(0, 50)), max_size=40),
       st.dictionaries(st.integers(0, 5), st.tuples(st.integers(1, 8), st.integers(0, 8)), max_size=6))
def test_fuzz_buckets_partition_the_rated_samples(samples, ref):
    recs = [_rec(f"t{t}", p, th, n) for t, p, th, n in samples]
    per_task = {f"t{t}": {"n": n, "c": min(c, n)} for t, (n, c) in ref.items()}
    rates = reference_rates(per_task)
    m = bucket_metrics(recs, rates)
    rated = [r for r in recs if r["task_id"] in rates]
    assert sum(v for k, v in m.items() if k.endswith("/tasks")) == len({r["task_id"] for r in rated})
    total_pass = sum(m[f"difficulty/{b}/pass@1"] * sum(bucket_of(rates[r["task_id"]]) == b for r in rated)
                     for b in ("hard", "medium", "easy") if f"difficulty/{b}/pass@1" in m)
    assert math.isclose(total_pass, sum(r["passed"] for r in rated), abs_tol=1e-9)
    assert all(0 <= v <= 1 for k, v in m.items() if k.endswith(("pass@1", "nothink_frac")))


def test_reference_file_errors_name_the_file(tmp_path):
    with pytest.raises(CodechatError, match="not a readable eval summary.json"):
        load_reference(tmp_path / "missing")
    (tmp_path / "summary.json").write_text(json.dumps({"metrics": {}}))
    with pytest.raises(CodechatError, match="has no per_task"):
        load_reference(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"per_task": {"x": {"n": 0, "c": 0, "greedy": True}}}))
    with pytest.raises(CodechatError, match="no task with sampled results"):
        load_reference(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"per_task": {"x": {"n": 4, "c": 1}, "y": {"n": "4"}}}))
    assert load_reference(tmp_path / "summary.json") == {"x": 0.25}


def test_eval_cli_reports_by_mode_and_by_difficulty(tmp_path):
    tasks = load_tasks("builtin:toy")[:3]
    good = "def f(x):\n    return x + 1\n"
    rows = [(tasks[0], "<think>plan</think>\n" + good), (tasks[0], "<think></think>\n" + good),
            (tasks[1], "<think>plan</think>\ndef f(x):\n    return x\n"), (tasks[1], "<think>p</think>\n" + good),
            (tasks[2], "<think></think>\n" + good), (tasks[2], "<think>plan</think>\n" + good)]
    comps = tmp_path / "c.jsonl"
    comps.write_text("".join(json.dumps({"task_id": t.task_id, "completion": c}) + "\n" for t, c in rows))
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "summary.json").write_text(json.dumps({"per_task": {tasks[0].task_id: {"n": 4, "c": 4},
                                                               tasks[1].task_id: {"n": 4, "c": 0}}}))
    out = tmp_path / "o"
    assert main(["eval", "--completions", str(comps), "--tasks", "builtin:toy", "--workers", "1", "--thinking",
                 "--reference", str(ref), "--out", str(out)]) == 0
    m = json.loads((out / "summary.json").read_text())["metrics"]
    assert m["pass@1"] == 5 / 6 and m["thinking/nothink_frac"] == 2 / 6
    assert m["thinking/pass@1/nothink"] == 1.0 and m["thinking/pass@1/think"] == 3 / 4
    assert m["difficulty/easy/pass@1"] == 1.0 and m["difficulty/hard/pass@1"] == 0.5
    assert m["difficulty/unrated_tasks"] == 1
    off = tmp_path / "off"  # without --thinking: no mode metrics, and the provenance says so
    assert main(["eval", "--completions", str(comps), "--tasks", "builtin:toy", "--workers", "1",
                 "--out", str(off)]) == 0
    s = json.loads((off / "summary.json").read_text())
    assert not any(k.startswith("thinking/") for k in s["metrics"]) and not s["provenance"]["thinking"]["enabled"]


def test_forced_sampling_is_refused_with_async_rollouts():
    with pytest.raises(ConfigError, match="rl.async_steps"):
        load_config(None, ["verifier.thinking.enabled=true", "verifier.thinking.forced_nothink_frac=0.5",
                           "rl.async_steps=1"])
    load_config(None, ["verifier.thinking.enabled=true", "rl.async_steps=1"])  # free sampling: fine


def test_forced_sampling_is_refused_on_repository_episodes():
    with pytest.raises(ConfigError, match="repository episodes .*builtin:repo-train"):
        load_config(None, ["verifier.thinking.enabled=true", "verifier.thinking.forced_nothink_frac=0.5",
                           "data.train=builtin:repo-train"])
    load_config(None, ["verifier.thinking.enabled=true", "data.train=builtin:repo-train"])  # free sampling: fine


class MergingTok:
    """Characters, except that `></` is one token (as a BPE may merge it in `<think></think>`)."""

    def __call__(self, text, add_special_tokens=False):
        ids, i = [], 0
        while i < len(text):
            if text.startswith("></", i):
                ids.append(999)
                i += 3
            else:
                ids.append(ord(text[i]))
                i += 1
        return {"input_ids": ids}


def test_forced_no_think_prefix_is_encoded_as_sft_text_encodes_it():
    s = BalancedSampler(None, MergingTok(), ThinkingConfig(enabled=True, forced_nothink_frac=0.5))
    assert s.think_ids == [ord(c) for c in "<think>"]
    assert s.nothink_ids == MergingTok()("<think></think>\ndef")["input_ids"][:13] and 999 in s.nothink_ids
