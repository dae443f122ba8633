"""Reward-hack resistance: every known attack in tests/attacks/attacks.jsonl is one test and must not pass.

Each record is a task plus a hostile completion (early exits, always-equal objects, patched builtins,
excepthook/atexit/signal/thread tricks, fake output, forged channel messages, frame/gc/inspect reading,
zero-assertion tests, probes that pass only if a protection is missing, ...). The same file is what
`codechat verify --regress` replays; its test is at the bottom.
"""
import json
from pathlib import Path

import pytest

from codechat.cli import main
from codechat.config import VerifierConfig
from codechat.tasks import Task
from codechat.verifier.verify import Verifier

ATTACKS_FILE = Path(__file__).parent / "attacks" / "attacks.jsonl"
ATTACKS = [json.loads(line) for line in ATTACKS_FILE.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=2, timeout_s=1.5, memory_mb=512)) as v:
        yield v


def _task(t: dict) -> Task:
    return Task(t["task_id"], t.get("prompt", ""), t["tests"], t.get("entry_point"), t.get("setup", ""))


@pytest.mark.parametrize("attack", ATTACKS, ids=[a["id"] for a in ATTACKS])
def test_attack_does_not_pass(verifier, attack):
    verdict = verifier.verify(_task(attack["task"]), attack["completion"])
    assert not verdict.passed, f"{attack['id']}: {attack['description']} -> {verdict}"
    assert verdict.reward == 0.0


def test_honest_versions_of_the_attacked_tasks_do_pass(verifier):
    # the attack tasks themselves are passable, so "not passed" above means "caught", not "impossible"
    honest = {"add": "def add(a, b):\n    return a + b\n", "pairs": "def pairs(n):\n    return [(i, i + 1) for i in range(n)]\n",
              "common": "def common(a, b):\n    return [x for x in a if x in b]\n",
              "area": "import math\ndef area(r):\n    return math.pi * r * r\n", "he_add": "    return a + b\n"}
    tasks = {a["task"]["task_id"]: _task(a["task"]) for a in ATTACKS}
    for tid, code in honest.items():
        assert verifier.verify(tasks[tid], code).passed, tid


def test_regress_cli_holds_on_our_attack_suite(capsys):
    rc = main(["verify", "--regress", str(ATTACKS_FILE), "--timeout", "1.5", "--quiet", "--workers", "2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"{len(ATTACKS)}/{len(ATTACKS)} attacks held" in out
