"""Warm test runs and judgement dedup: the same verdicts as a fresh interpreter per run on honest, failing and
tampering patches; nothing of one warm run reaches the next; identical final workspaces judged once."""
import os
import re
import sys
import threading
import time
from types import SimpleNamespace

import _pytest.config as pytest_config
import pytest

from codechat.config import AgentConfig
from codechat.rollout.agents import ScriptedAgent
from codechat.rollout.episode import EpisodeRunner
from codechat.rollout.tools import format_call
from codechat.sandbox import repo_runner, warm_runner
from codechat.tasks.repo import RepoLimits, RepoTask
from codechat.train.episodes import run_judge
from codechat.verifier.repo import RepoJudge
from codechat.verifier.repo_dedup import DedupJudge
from codechat.verifier.repo_warm import WarmRunner
from repo_helpers import BUGGY, FIXED, TASK
from sandbox_helpers import alive_with_uid

PATCHES = {
    "honest": {"lib/bounds.py": FIXED},
    "no change": {},
    "breaks a passing test": {"lib/bounds.py": FIXED.replace("    return x\n", "    return x + 1\n")},
    "conftest plugin": {"lib/bounds.py": BUGGY, "conftest.py": "def pytest_runtest_call(item):\n    pass\n"},
    "runner replaced at run time": {"lib/bounds.py": BUGGY + "\nimport importlib\nr = importlib.import_module('_' + "
                                    "'pytest.python')\nr.Function.runtest = lambda self: None\n"},
    "early exit": {"lib/bounds.py": FIXED + "\nimport os as _o\ngetattr(_o, '_' + 'exit')(0)\n"},
    "forged record": {"lib/bounds.py": BUGGY + "\nimport os\nfor fd in range(3, 20):\n    try:\n        os.write(fd, "
                      "b'{\"nonce\": \"x\", \"tests\": {}}\\n')\n    except OSError:\n        pass\n"},
    "static hazard": {"lib/bounds.py": FIXED + "\nimport sys\nsys.settrace(None)\n"},
}
VARYING = ("duration_s", "output_tail")  # wall time, and pytest's "in 0.05s" summary


def same(a, b) -> dict:
    da, db = a.to_dict(), b.to_dict()
    return {k: (da[k], db[k]) for k in da if k not in VARYING and da[k] != db[k]}


@pytest.fixture(scope="module")
def judges():
    with RepoJudge() as cold, RepoJudge(warm=True) as warm:
        yield cold, warm


@pytest.mark.parametrize("name", sorted(PATCHES))
def test_warm_verdicts_equal_cold_ones(judges, name):
    cold, warm = judges
    runs = warm.warm.runs
    a, b = cold.judge(TASK, PATCHES[name]), warm.judge(TASK, PATCHES[name])
    assert not same(a, b), same(a, b)
    assert (a.status == "passed") == (name == "honest")
    if a.status not in ("rejected",) or "during the run" in a.message:
        assert warm.warm.runs > runs  # the warm judgement did fork from the warm process


PLANT = ("import json, os, sys\n\ndef test_nothing_planted_then_plant():\n"
         "    assert not hasattr(json, 'planted') and 'planted_mod' not in sys.modules\n"
         "    assert not os.path.exists('/tmp/planted') and 'PLANTED' not in os.environ\n"
         "    import lib.plant\n    assert json.planted and os.path.exists('/tmp/planted')\n")
PLANTER = ("import json, os, sys\njson.planted = True\nsys.modules['planted_mod'] = json\nos.environ['PLANTED'] = '1'\n"
           "open('/tmp/planted', 'w').write('x')\n"
           "for d in [os.path.dirname(json.__file__), os.path.dirname(os.path.dirname(__file__))]:\n"
           "    try:\n        open(os.path.join(d, 'planted.py'), 'w').write('x = 1')\n    except OSError:\n        pass\n")


def test_nothing_of_a_warm_run_reaches_the_next(judges):
    _, warm = judges
    task = RepoTask("plant", "", {"lib/__init__.py": "", "lib/bounds.py": BUGGY},
                    hidden_tests={"tests/test_plant.py": PLANT})
    runs = warm.warm.runs
    for _ in range(3):  # a module global, sys.modules, the environment, /tmp, the tree and the stdlib dir
        v = warm.judge(task, {"lib/plant.py": PLANTER})
        assert v.passed, v.message + v.output_tail
    assert warm.warm.runs >= runs + 3


CONFIG = ("import os, pathlib, _pytest.config\n\ndef test_the_runs_own_configuration(request):\n"
          "    params = request.config.invocation_params\n"
          "    assert params.dir == pathlib.Path.cwd() and params.args[-1].endswith('test_config.py')\n"
          "    assert 'slowish: from this tree' in request.config.getini('markers')\n"
          "    assert _pytest.config.get_config.__qualname__ == 'get_config'  # pytest's own, not the runner's\n"
          "    assert request.config.pluginmanager.get_plugin('conftest_marker') is None\n"
          "    assert request.config.pluginmanager.is_blocked('cacheprovider')\n")


def test_each_warm_run_reads_its_own_tree_into_the_prebuilt_configuration(judges):
    cold, warm = judges
    for marker in ("from this tree", "from another tree"):  # the second tree's ini is read anew, not kept
        task = RepoTask(f"config-{len(marker)}", "", {"lib/__init__.py": "", "pytest.ini": f"[pytest]\nmarkers =\n    slowish: {marker}\n"},
                        hidden_tests={"tests/test_config.py": CONFIG})
        runs = warm.warm.runs
        a, b = cold.judge(task, {}), warm.judge(task, {})
        assert warm.warm.runs == runs + 1 and not same(a, b), same(a, b)
        assert a.passed == (marker == "from this tree"), a.message + a.output_tail


def test_the_prebuilt_configuration_answers_one_matching_call_only():
    real = pytest_config.get_config
    prebuilt = warm_runner._prebuild(repo_runner.ARGS)
    assert prebuilt is not None and prebuilt[0].pluginmanager.is_blocked("cacheprovider")
    try:
        warm_runner._use_prebuilt(prebuilt, repo_runner.ARGS)
        got = pytest_config.get_config([*repo_runner.ARGS, "--rootdir", "/r", "t.py"], ["judge"], **prebuilt[1])
        assert got is prebuilt[0] and got.invocation_params.args[-1] == "t.py"
        assert got.invocation_params.plugins == ["judge"] and pytest_config.get_config is real
        warm_runner._use_prebuilt(prebuilt, repo_runner.ARGS)
        other = pytest_config.get_config(["-x", "t.py"], None, **prebuilt[1])  # not the runner's arguments: built anew
        assert other is not prebuilt[0] and pytest_config.get_config is real
    finally:
        pytest_config.get_config = real


DAEMON = ("import os, time\n\ndef test_leave_a_daemon():\n    if os.fork() == 0:\n        os.setsid()\n"
          "        if os.fork() == 0:\n            os.closerange(0, 1024)\n            time.sleep(60)\n        os._exit(0)\n"
          "    os.wait()\n"
          "    assert False, f'uid={os.getuid()}'\n")
CYCLE = ("import gc\nimport sys\n\nclass Node:\n    freed = []\n    def __del__(self):\n"
         "        Node.freed.append(1)\n\n"
         "def test_the_runs_own_cycles_are_collected():\n    n = Node()\n    n.me = n\n    del n\n"
         "    assert gc.collect() > 0 and Node.freed\n\n"
         "def test_objects_made_before_the_run_are_listed():\n    import lib\n"
         "    assert any(r is sys.modules for r in gc.get_referrers(lib))\n"
         "    assert any(o is sys.modules for o in gc.get_objects())\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="runs get a uid of their own only as root")
def test_a_warm_runs_processes_are_all_killed_afterwards(judges):
    _, warm = judges
    task = RepoTask("daemon", "", {"lib/__init__.py": ""}, hidden_tests={"tests/test_d.py": DAEMON})
    v = warm.judge(task, {})
    uid = int(re.search(r"uid=(\d+)", v.output_tail)[1])
    assert uid >= 1_000_000 and v.status == "failed"
    for _ in range(50):  # killed processes can linger a moment as zombies until their new parent reaps them
        if not alive_with_uid(uid):
            break
        time.sleep(0.1)
    assert not alive_with_uid(uid)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs get a uid of their own only as root")
def test_without_its_reaper_the_warm_process_kills_a_runs_processes_itself():
    task = RepoTask("daemon", "", {"lib/__init__.py": ""}, hidden_tests={"tests/test_d.py": DAEMON})
    with RepoJudge(warm=True) as warm:
        warm.judge(task, {})  # starts the warm process
        (proc,) = warm.warm._procs.values()
        pid = proc.popen.pid
        (reaper,) = open(f"/proc/{pid}/task/{pid}/children").read().split()  # between runs: the reaper only
        os.kill(int(reaper), 9)
        v = warm.judge(task, {})
        uid = int(re.search(r"uid=(\d+)", v.output_tail)[1])
        for _ in range(50):
            if not alive_with_uid(uid):
                break
            time.sleep(0.1)
        assert not alive_with_uid(uid) and warm.warm.runs == 2


def test_a_warm_run_past_its_deadline_is_killed_and_timed_out(judges):
    _, warm = judges
    spin = "def test_spin():\n    while True:\n        pass\n"
    task = RepoTask("spin", "", {"lib/__init__.py": ""}, hidden_tests={"tests/test_s.py": spin},
                    limits=RepoLimits(test_timeout_s=2))
    t0 = time.monotonic()
    v = warm.judge(task, {})
    assert v.status == "timeout" and time.monotonic() - t0 < 15


def test_a_warm_run_collects_its_own_garbage(judges):
    cold, warm = judges  # the warm process's objects are frozen out of collections, the run's are not, and
    # listing objects or referrers thaws them (as a cold run sees them)
    task = RepoTask("cycle", "", {"lib/__init__.py": ""}, hidden_tests={"tests/test_c.py": CYCLE})
    a, b = cold.judge(task, {}), warm.judge(task, {})
    assert b.passed and b.tests_passed == 2, b.output_tail
    assert not same(a, b)


def test_a_tree_shadowing_a_warm_module_runs_cold(judges):
    cold, warm = judges
    task = RepoTask("shadow", "", {"lib/__init__.py": "", "lib/bounds.py": BUGGY, "ctypes/__init__.py": "TREE = 1\n"},
                    hidden_tests={"tests/test_x.py": "import ctypes\n\ndef test_x():\n    assert ctypes.TREE == 1\n"})
    n = warm.warm.cold
    a, b = cold.judge(task, {}), warm.judge(task, {})
    assert b.passed and not same(a, b) and warm.warm.cold == n + 1


def test_an_interpreter_without_a_warm_process_runs_cold(tmp_path):
    w = WarmRunner()
    assert w.run("/nonexistent/python", b"", tmp_path, [], 5, None, 1000) is None
    assert "/nonexistent/python" in w.broken and w.cold == 1
    w.close()


def test_a_warm_process_that_died_sends_runs_cold(tmp_path):
    with RepoJudge(warm=True) as judge:
        assert judge.judge(TASK, PATCHES["honest"]).passed
        (proc,) = judge.warm._procs.values()
        proc.popen.kill()
        proc.popen.wait()
        v = judge.judge(TASK, PATCHES["honest"])
        assert v.passed and sys.executable in judge.warm.broken and judge.warm.cold >= 1


def test_identical_workspaces_are_judged_once(judges):
    cold, _ = judges
    inner = RepoJudge()
    calls = []
    real = inner.judge
    inner.judge = lambda t, c: calls.append(1) or real(t, c)
    dedup = DedupJudge(inner)
    try:
        out = [None] * 4
        threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, dedup.judge(TASK, dict(PATCHES["honest"]))))
                   for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        other = dedup.judge(TASK, PATCHES["no change"])
        assert len(calls) == 2 and dedup.calls == 5 and dedup.hits == 3
        assert all(v.passed and not same(v, out[0]) for v in out) and out[0] is not out[1]
        assert not same(other, cold.judge(TASK, PATCHES["no change"]))
        dedup.judge(TASK, {"lib/bounds.py": FIXED + "\n"})  # a different file: judged again
        assert len(calls) == 3
    finally:
        dedup.close()


def test_run_judge_follows_the_agent_settings():
    for warm, dedup in [(True, True), (False, False)]:
        ctx = SimpleNamespace(judge=None, on_close=[], cfg=SimpleNamespace(
            agent=AgentConfig(warm_tests=warm, dedup_judgements=dedup)))
        j = run_judge(ctx)
        assert isinstance(j, DedupJudge) == dedup and (j.warm is not None) == warm
        for f in ctx.on_close:
            f()


def test_judgement_wait_and_run_times_are_measured(judges):
    _, warm = judges
    done = ScriptedAgent(lambda t, turn, last: format_call("submit"))
    runner = EpisodeRunner(done, warm, AgentConfig(tool_workers=1))
    runner.run([(TASK, i) for i in range(3)])  # three episodes end together; one thread judges them in turn
    assert runner.judge_s > 0 and runner.judge_wait_s > 0


def test_run_tests_tool_uses_the_warm_runner(judges):
    _, warm = judges
    runs = warm.warm.runs
    agent = ScriptedAgent(lambda t, turn, last: format_call("run_tests") if turn == 0 else format_call("submit"))
    (r,) = EpisodeRunner(agent, warm, AgentConfig()).run([(TASK, 0)])
    assert r.transcript.turns[0].result.startswith("ok 1 passed") and warm.warm.runs >= runs + 2
    assert sys.executable in warm.warm._procs
