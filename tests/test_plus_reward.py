"""MBPP+ plus inputs in the verdict (verifier/plus.py, verifier.plus_inputs, on by default): on the real MBPP+
file the references pass with their plus inputs; an answer that passes the shown asserts but is wrong (trial
division by 2..5 only: is_not_prime(49) is False) passes the asserts and fails plus. The training reward (make_verifier),
`codechat verify` and `serve` use it; a server's inline records run no reference."""
import json

import pytest

from codechat.cli import main
from codechat.config import VerifierConfig
from codechat.serve.app import Service
from codechat.serve.config import ServeConfig
from codechat.tasks import load_tasks
from codechat.verifier.factory import make_verifier
from codechat.verifier.plus import PlusVerifier
from codechat.verifier.verify import Verifier

WRONG = "def is_not_prime(n):\n    return n == 1 or any(n % i == 0 for i in range(2, min(n, 6)))\n"


@pytest.fixture
def mbpp_plus(shared_data):
    return shared_data / "mbpp" / "MbppPlus-v0.2.0.jsonl.gz"


def test_references_pass_with_plus_and_a_wrong_answer_fails_plus(mbpp_plus, tmp_path, monkeypatch):
    monkeypatch.setenv("CODECHAT_CACHE", str(tmp_path / "cache"))
    tasks = load_tasks(mbpp_plus)[:8]
    prime = next(t for t in tasks if t.entry_point == "is_not_prime")
    with make_verifier(VerifierConfig(workers=2)) as v:
        assert isinstance(v, PlusVerifier)  # the training reward's verifier: plus inputs on by default
        refs = v.verify_many([(t, t.solution) for t in tasks])
        assert all(r.passed for r in refs), [(t.task_id, r.status, r.message) for t, r in zip(tasks, refs)]
        assert all(r.tests_total > len(t.tests) for t, r in zip(tasks, refs))  # judged on every input
        (wrong,) = v.verify_many([(prime, WRONG)])
        assert not wrong.passed
    with Verifier(VerifierConfig(workers=1, plus_inputs=False)) as asserts:
        assert asserts.verify(prime, WRONG).passed  # the shown asserts alone take it
    with make_verifier(VerifierConfig(workers=1, plus_inputs=False)) as v:
        assert not isinstance(v, PlusVerifier) and v.verify(prime, WRONG).passed


def test_verify_cli_uses_plus_unless_told_not_to(mbpp_plus, tmp_path, monkeypatch):
    monkeypatch.setenv("CODECHAT_CACHE", str(tmp_path / "cache"))
    comps = tmp_path / "c.jsonl"
    comps.write_text(json.dumps({"task_id": "Mbpp/3", "completion": WRONG}) + "\n")
    for flag, want in (([], False), (["--no-plus"], True)):
        out = tmp_path / f"v{len(flag)}.jsonl"
        main(["verify", "--tasks", str(mbpp_plus), "--completions", str(comps), "--out", str(out), "--quiet",
              "--workers", "1", *flag])
        assert json.loads(out.read_text().splitlines()[0])["passed"] is want


def test_serve_runs_references_only_for_the_tasks_it_loaded(mbpp_plus, tmp_path, monkeypatch):
    monkeypatch.setenv("CODECHAT_CACHE", str(tmp_path / "cache"))
    svc = Service(ServeConfig(tasks=str(mbpp_plus), verifier=VerifierConfig(workers=1)))
    try:
        loaded = svc.loaded["Mbpp/3"]
        inline = load_tasks(mbpp_plus)[1]  # the same record sent inline: a request's own, not the server's
        verdicts, _ = svc.verify_batch([(loaded, WRONG)])
        assert not verdicts[0].passed
        svc.dedup.cache_size = 0
        verdicts, _ = svc.verify_batch([(inline, WRONG + "\n")])
        assert verdicts[0].passed  # judged by its asserts: no reference run for a request's record
    finally:
        svc.verifier.close()
