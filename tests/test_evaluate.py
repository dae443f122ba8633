"""pass@k: the estimator equals brute-force enumeration over all k-subsets; edge cases; summaries; compare."""
import itertools
import json

import pytest

from codechat.evaluate import pass_at_k, summarize


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
    assert 0.0 <= pass_at_k(200, 1, 100) <= 1.0  # large n stays finite (no huge binomials)
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
