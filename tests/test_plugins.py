"""Custom rewards and task loaders from a Python file or module: loaded with the config, registered, copied into
RUN/plugins/ and found there by --resume; bad specs fail with one line naming them."""
import json

import pytest

from codechat import CodechatError
from codechat.config.io import load_config
from codechat.train import train

REWARD = '''
def brevity(task, completion, verdict, ctx):
    return -len(completion) / 100.0
'''
LOADER = '''
from codechat.tasks import Task

def load(spec):
    n = int(spec.split("-")[1])
    return [Task(f"add{i}", f"def add{i}(x):\\n    # return x + {i}\\n", [f"assert add{i}(1) == {1 + i}"],
                 entry_point=f"add{i}") for i in range(n)]
'''


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_rewards.py").write_text(REWARD)
    (tmp_path / "my_loader.py").write_text(LOADER)
    return tmp_path


def base(run):
    return ["data.train=adds-3", "data.loader=my_loader.py:load", "sampling.max_new_tokens=6", "log.plot=false",
            "log.progress=false", "verifier.workers=1", "stages=[grpo]", "rl.prompts_per_step=2", "rl.group_size=2",
            "checkpoint.every=1", 'rewards={pass-all: 1.0, "my_rewards.py:brevity": 0.5}', f"run_dir={run}"]


def test_plugin_reward_and_loader_train_and_resume(files):
    run = files / "r"
    train(load_config(None, base(run) + ["rl.steps=2"]))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(r["reward/my_rewards.py:brevity/mean"] < 0 for r in rows)  # the plugin was scored and logged
    assert {r["task_id"] for r in map(json.loads, (run / "rollouts.jsonl").read_text().splitlines())} \
        <= {"add0", "add1", "add2"}
    assert (run / "plugins" / "my_rewards.py").read_text() == REWARD
    assert (run / "plugins" / "my_loader.py").read_text() == LOADER
    # the originals go away: --resume runs the recorded copies (a new process would re-import them from there)
    (files / "my_rewards.py").unlink()
    (files / "my_loader.py").unlink()
    from codechat import plugins
    plugins._LOADED.clear()
    from codechat.rollout.rewards import REWARDS
    REWARDS._fns.pop("my_rewards.py:brevity")
    train(resume=run, overrides=["rl.steps=3"])
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert "plugins/my_rewards.py" in plugins.plugin_files(["my_rewards.py:brevity"])[0].as_posix()


@pytest.mark.parametrize("spec,needle", [
    ("rewards={\"nope.py:f\": 1}", "nope.py:f: no such file"),
    ("rewards={\"my_rewards.py:missing\": 1}", "has no function 'missing'"),
    ("rewards={\"no_such_module_xyz:f\": 1}", "cannot import no_such_module_xyz"),
    ("rewards={\"bad.py:f\": 1}", "cannot load bad.py: SyntaxError"),
    ("rewards={\"wrong.py:f\": 1}", "a reward takes ('task', 'completion', 'verdict', 'ctx')"),
    ("data.loader=my_loader.py:nothing", "has no function 'nothing'"),
])
def test_bad_plugins_fail_with_one_line(files, spec, needle):
    (files / "bad.py").write_text("def f(:\n")
    (files / "wrong.py").write_text("def f(x):\n    return 0\n")
    with pytest.raises(CodechatError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, [spec])


def test_a_loader_must_return_tasks(files):
    from codechat.plugins import load_with
    (files / "l2.py").write_text("def load(spec):\n    return [{'task_id': 'x'}]\n")
    with pytest.raises(CodechatError, match="must return a list of codechat.tasks.Task"):
        load_with("l2.py:load", "anything")
