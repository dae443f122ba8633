"""pass@k: the estimator equals brute-force enumeration over all k-subsets; edge cases; summaries; compare."""
import itertools
import json
import math

import pytest

from codechat.evaluation.evaluate import pass_at_k, summarize


def brute(n, c, k):
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 8))
def test_estimator_equals_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute(n, c, k), abs=1e-12)


def test_edge_cases():
    assert pass_at_k(5, 0, 1) == 0.0 and pass_at_k(5, 0, 5) == 0.0
    assert pass_at_k(5, 5, 1) == 1.0 and pass_at_k(5, 5, 5) == 1.0
    assert pass_at_k(5, 1, 5) == 1.0  # n = k: any pass counts
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(200, 1, 100) == pytest.approx(0.5, abs=1e-12)  # 1 - C(199,100)/C(200,100) = 1 - 100/200
    exact = 1 - math.comb(190, 100) / math.comb(200, 100)  # large n: no huge binomials, still exact
    assert pass_at_k(200, 10, 100) == pytest.approx(exact, rel=1e-12)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_summarize_counts_and_greedy():
    recs = [{"task_id": "a", "passed": p, "status": "passed" if p else "failed"} for p in (1, 0, 0, 0)]
    recs += [{"task_id": "b", "passed": 0, "status": "error"} for _ in range(4)]
    rep = summarize(recs, [1, 2, 5], greedy={"a": True, "b": False})
    assert rep.metrics["pass@1"] == pytest.approx(0.125)
    assert rep.metrics["pass@2"] == pytest.approx((1 - 3 / 6) / 2)
    assert "pass@5" not in rep.metrics  # k > n is not reported
    assert rep.metrics["greedy_pass@1"] == 0.5
    assert rep.metrics["status/error"] == 0.5
    assert rep.per_task["a"] == {"n": 4, "c": 1, "greedy": True}


def test_compare_lists_gained_and_lost(tmp_path):
    from codechat.commands.eval import compare

    for name, per_task, p1 in [("a", {"x": {"n": 1, "c": 1}, "y": {"n": 1, "c": 0}}, 0.5),
                               ("b", {"x": {"n": 1, "c": 0}, "y": {"n": 1, "c": 1}}, 0.5)]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"metrics": {"pass@1": p1}, "per_task": per_task}))
    out = compare(str(tmp_path / "a"), str(tmp_path / "b"))
    assert "gained (1): y" in out and "lost (1): x" in out


def _refs_file(tmp_path, tasks):
    p = tmp_path / "refs.jsonl"
    p.write_text("".join(json.dumps({"task_id": t.task_id, "completion": t.solution}) + "\n" for t in tasks))
    return p


def test_mbpp_references_through_completions_pass(tmp_path, shared_data):
    from codechat.config import VerifierConfig
    from codechat.evaluation.evaluate import evaluate_completions
    from codechat.tasks import load_tasks
    from codechat.verifier.verify import Verifier

    tasks = [t for t in load_tasks(shared_data / "mbpp" / "mbpp.jsonl") if t.task_id != "123"][:80]  # 123 is slow
    with Verifier(VerifierConfig(workers=2, timeout_s=20)) as v:
        rep = evaluate_completions(v, tasks, str(_refs_file(tmp_path, tasks)), [1])
    assert rep.metrics["pass@1"] == 1.0


def test_mbppplus_base_and_plus_from_reference_outputs(tmp_path, shared_data, monkeypatch):
    from codechat.config import VerifierConfig
    from codechat.evaluation.evaluate import evaluate_completions
    from codechat.tasks import load_tasks
    from codechat.verifier.verify import Verifier

    monkeypatch.setenv("CODECHAT_CACHE", str(tmp_path / "cache"))
    tasks = load_tasks(shared_data / "mbpp" / "MbppPlus-v0.2.0.jsonl.gz")[:25]
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text("".join(json.dumps({"task_id": t.task_id, "completion": "def f(*a, **k):\n    return None\n"})
                             + "\n" for t in tasks))
    with Verifier(VerifierConfig(workers=2, timeout_s=20)) as v:
        rep = evaluate_completions(v, tasks, str(_refs_file(tmp_path, tasks)), [1])
        bad = evaluate_completions(v, tasks, str(wrong), [1])
    assert rep.metrics["base_pass@1"] == 1.0 and rep.metrics["plus_pass@1"] == 1.0
    assert bad.metrics["base_pass@1"] == 0.0
    assert list((tmp_path / "cache" / "evalplus").glob("*.json"))  # expected outputs cached on disk


def test_eval_cli_completions_reports_bad_lines(tmp_path, capsys):
    from codechat.cli import main

    p = tmp_path / "c.jsonl"
    p.write_text('{"task_id": "toy/0", "completion": "def f(x):\\n    return x + 1\\n"}\nnot json\n'
                 '{"task_id": "nope", "completion": "x"}\n')
    assert main(["eval", "--completions", str(p), "--tasks", "builtin:toy", "--k", "1", "--out",
                 str(tmp_path / "out")]) == 0
    cap = capsys.readouterr()
    assert ":2: skipped malformed line" in cap.err and "unknown task_id 'nope'" in cap.err
    assert "| pass@1 | 1 |" in cap.out and (tmp_path / "out" / "summary.md").is_file()
