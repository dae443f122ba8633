"""The protocol trusts nothing: one attack per test, each also a record of tests/attacks/attacks.jsonl
(replayed by `codechat verify --regress`), plus the checks each class needs beyond "not passed": the host
untouched, the batch alive, the verdict bounded. Attacks that need the judge alone run it in this process."""
import json
import os
import pickle
import socket
import struct
import sys
import threading
from pathlib import Path

import pytest

from codechat.cli import main
from codechat.config import VerifierConfig
from codechat.sandbox import audit_hook, frames, judge, modes, wire
from codechat.tasks import Task
from codechat.verifier.verify import Verifier

ATTACKS = {a["id"]: a for a in map(json.loads, (Path(__file__).parent / "attacks" / "attacks.jsonl")
                                   .read_text().splitlines()) if a}


@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=2, timeout_s=2.0, memory_mb=512)) as v:
        yield v


def _task(t: dict) -> Task:
    return Task(t["task_id"], t.get("prompt", ""), t["tests"], t.get("entry_point"), t.get("setup", ""))


def attack(v: Verifier, name: str):
    a = ATTACKS[name]
    verdict = v.verify(_task(a["task"]), a["completion"])
    assert not verdict.passed, f"{name}: {verdict}"
    return verdict


def run_judge(job: dict, replies: list[bytes], max_bytes: int = 1 << 20) -> dict:
    """Run the judge here, on a job, with `replies` as everything the candidate side ever sends."""
    job = {"mode": "tests", "prelude": "", "setup": "", "entry_point": "f", "tests": [], "inputs": [],
           "expected": [], "atol": 0.0, **job}
    j, c = socket.socketpair()
    r, w = os.pipe()
    try:
        frames.send(w, pickle.dumps(job))
        data = b"".join(replies)
        sender = threading.Thread(target=_send_all, args=(c, data), daemon=True)
        if len(data) < 65536:  # fits in the socket's buffer: no thread needed
            _send_all(c, data)
        else:
            sender.start()
        rec = wire.loads(modes.judge(j.fileno(), r, max_bytes))
        j.shutdown(socket.SHUT_RDWR)
        if sender.is_alive():
            sender.join()
        return rec
    finally:
        for s in (j, c):
            s.close()
        os.close(r)
        os.close(w)


def _send_all(c: socket.socket, data: bytes) -> None:
    try:
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
    except OSError:  # the judge stopped reading (over-long frame): it closed its end
        pass


def frame(msg) -> bytes:
    data = json.dumps(msg).encode()
    return struct.pack(">I", len(data)) + data


# --- the judge trusts the program's hello --------------------------------------------------------------------
def test_hello_offering_builtins_cannot_replace_the_tests_builtins(verifier):
    v = attack(verifier, "forged_hello_dunder_builtins")
    assert v.status == "error"  # the tests' sorted() is the builtin: sorted(None) raises


def test_hello_naming_a_module_never_makes_the_judge_import_it(verifier):
    attack(verifier, "forged_hello_module_import")


def test_judge_ignores_module_entries_and_dunders_in_process():
    before = set(sys.modules)
    hello = ["loaded", [["tab", "module", "tabnanny"], ["__builtins__", "object", "x"],
                        ["np", "module", "this"], ["f", "value", 1]]]
    rec = run_judge({"tests": ["assert tab is not None"]}, [frame(hello)])
    assert rec["status"] == "error" and rec["error_type"] == "NameError", rec
    assert not {"tabnanny", "this"} & (set(sys.modules) - before)


@pytest.mark.parametrize("hello", [
    ["loaded", "names"], ["loaded", [["f", "wizard", "x"]]], ["loaded", [["f", "object", 7]]], ["hi"], [],
    ["loaded", [["f", "object"]]], ["loaded", [[f"n{i}", "value", 0] for i in range(wire.MAX_NAMES + 1)]],
    {"$d": []}, "loaded",
])
def test_hello_outside_the_grammar_is_that_programs_error(hello):
    rec = run_judge({"tests": ["assert f(1) == 2"]}, [frame(hello)])
    assert rec["status"] == "error", rec


def test_over_long_frame_is_that_programs_error():
    rec = run_judge({"tests": ["assert f(1) == 2"]}, [struct.pack(">I", 1 << 30) + b"x" * 100], max_bytes=1 << 16)
    assert rec["status"] == "error" and rec["error_type"] == "EarlyExit", rec


def test_forged_replies_on_the_judge_socket_are_errors(verifier):
    attack(verifier, "forged_reply_frames")


# --- task-authored code is trusted -----------------------------------------------------------------------------
def test_program_cannot_replace_a_helper_the_task_defines(verifier):
    attack(verifier, "redefine_task_helper")
    honest = verifier.verify(_task(ATTACKS["redefine_task_helper"]["task"]), "    return s[:-1][::-1]\n")
    assert honest.passed, honest


def test_program_made_np_cannot_stand_in_for_numpy(verifier):
    attack(verifier, "fake_numpy_alias")
    honest = verifier.verify(_task(ATTACKS["fake_numpy_alias"]["task"]),
                             "import numpy as np\ndef f(x):\n    return np.array([x / 2])\n")
    assert honest.passed, honest


def test_setup_names_win_over_the_programs():
    t = Task("s", "", ["assert f(LIMIT) == 10"], "f", setup="LIMIT = 5")
    with Verifier(VerifierConfig(workers=1, timeout_s=2.0)) as v:
        assert not v.verify(t, "LIMIT = 3\ndef f(x):\n    return 10 if x == 3 else 0\n").passed
        assert v.verify(t, "def f(x):\n    return 2 * x\n").passed


# --- evalplus oracles --------------------------------------------------------------------------------------------
def test_empty_list_is_not_close_to_a_float(verifier):
    t = Task("half", "", [], "f")
    wrong = verifier.verify_io(t, "def f(x):\n    return []\n", [[5.0], [1.0]], [2.5, 0.5], atol=1e-6)
    assert not wrong.passed, wrong
    short = verifier.verify_io(t, "def f(x):\n    return [x / 2]\n", [[5.0]], [[2.5, 2.5]], atol=1e-6)
    assert not short.passed, short
    honest = verifier.verify_io(t, "def f(x):\n    return x / 2 + 1e-9\n", [[5.0], [1.0]], [2.5, 0.5], atol=1e-6)
    assert honest.passed, honest


def test_outputs_match_has_no_broadcasting():
    assert not modes.outputs_match([], 2.5, 1e-6)
    assert not modes.outputs_match([2.5], 2.5, 1e-6)
    assert not modes.outputs_match([], [2.5], 1e-6)
    assert not modes.outputs_match("2.5", 2.5, 1e-6) and not modes.outputs_match(None, [2.5], 1e-6)
    assert modes.outputs_match(2.5000001, 2.5, 1e-6) and modes.outputs_match([1, 2.0], [1.0, 2.0], 0)


# --- mutation of arguments -------------------------------------------------------------------------------------
def test_mutating_solution_fails_a_must_not_mutate_test(verifier):
    attack(verifier, "mutates_its_argument")
    assert verifier.verify(_task(ATTACKS["mutates_its_argument"]["task"]),
                           "def total(xs):\n    return sum(xs)\n").passed


# --- batch killers -------------------------------------------------------------------------------------------------
def test_realtime_signal_death_does_not_break_the_batch(verifier):
    a = ATTACKS["realtime_signal_death"]
    t = _task(a["task"])
    good = "def add(a, b):\n    return a + b\n"
    verdicts = verifier.verify_many([(t, good), (t, a["completion"]), (t, good)])
    assert [verdicts[0].status, verdicts[2].status] == ["passed", "passed"], verdicts
    # as pid 1 of its own PID namespace the program ignores a signal it sends itself (no handler): it then fails
    # its test; without that namespace it dies of the signal, and the batch still carries on
    assert verdicts[1].status in ("error", "failed") and not verdicts[1].passed, verdicts
    if verdicts[1].status == "error":
        assert "signal" in verdicts[1].message


def test_any_exception_while_merging_is_that_jobs_error():
    from codechat.sandbox.pool import merge
    r = merge({"duration_s": "x", "blocked": None})
    assert r.status == "error" and r.error_type == "SandboxError"


# --- bounded everything ----------------------------------------------------------------------------------------
def test_huge_exception_type_and_message_are_cut(verifier):
    v = attack(verifier, "huge_exception_type_name")
    assert len(v.error_type) <= 200 and len(v.message) <= 2048
    assert len(json.dumps(v.to_dict())) < 8192


def test_event_flood_leaves_only_known_kinds(verifier):
    v = attack(verifier, "event_flood")
    assert set(v.blocked) <= audit_hook.EVENT_KINDS and len(v.blocked) <= len(audit_hook.EVENT_KINDS)


def test_judge_exception_cache_is_bounded():
    for i in range(5000):
        judge.candidate_exception(f"Err{i}" * 10, "m")
    assert len(judge._EXC_CACHE) <= judge._EXC_CACHE_MAX
    e = judge.candidate_exception("X" * 10**6, "y" * 10**6)
    assert len(type(e).__name__) <= wire.MAX_TYPE and len(str(e)) <= wire.MAX_MSG


def test_regress_replays_the_new_attacks(capsys):
    rc = main(["verify", "--regress", str(Path(__file__).parent / "attacks" / "attacks.jsonl"), "--timeout", "2",
               "--quiet", "--workers", "2"])
    assert rc == 0, capsys.readouterr().out


def test_unhashable_kind_in_a_hello_is_that_programs_error():
    """Found by the fuzz test: a list where the kind goes made the judge raise instead of judging."""
    rec = run_judge({"tests": ["assert f(1) == 2"]}, [frame(["loaded", [["f", [], "f"]]])])
    assert rec["status"] == "error" and rec["error_type"] == "ProtocolError", rec
