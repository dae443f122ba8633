"""Test environments of repository tasks (spec, build, check, the judge using one) and SWE-bench trees."""
import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from codechat.cli import main
from codechat.tasks.repo import RepoTask
from codechat.tasks.repo_loaders import from_swebench
from codechat.verifier.repo import RepoJudge
from codechat.verifier.repo_env import EnvError, TestEnv, build_env, check_env, load_envs, load_specs, \
    resolve_python

SRC_TASK = RepoTask("srcpkg", "", {"src/pkg/__init__.py": "def one():\n    return 2\n"},
                    hidden_tests={"tests/test_one.py": "from pkg import one\n\ndef test_one():\n    assert one() == 1\n"},
                    metadata={"repo": "me/pkg", "version": "1.0"})
FIX = {"src/pkg/__init__.py": "def one():\n    return 1\n"}


def test_spec_errors_name_the_entry(tmp_path):
    spec = tmp_path / "envs.json"
    spec.write_text(json.dumps([{"repo": "a/b", "version": "1", "pythn": "python3"}]))
    with pytest.raises(EnvError, match=r"envs.json\[0\]: unknown field\(s\) pythn"):
        load_specs(spec)
    spec.write_text(json.dumps({"repo": "a/b"}))
    with pytest.raises(EnvError, match="a JSON list"):
        load_specs(spec)


def test_build_with_a_missing_interpreter_is_one_line(tmp_path, capsys):
    spec = tmp_path / "envs.json"
    spec.write_text(json.dumps([{"repo": "a/b", "version": "1", "python": "python2.1"}]))
    assert main(["repo", "env", "build", str(spec), "--out", str(tmp_path / "out")]) == 1
    assert "a/b@1: interpreter 'python2.1' not found" in capsys.readouterr().err


def test_built_env_without_pytest_fails_its_check(tmp_path):
    env = build_env(TestEnv("a/b", "1", python=sys.executable), tmp_path, log=lambda *_: None)
    assert Path(env.interpreter).exists() and "a/b@1" in load_envs(tmp_path)
    with pytest.raises(EnvError, match="import pytest failed"):
        check_env(env)


def test_src_layout_runs_with_the_environment_pythonpath():
    env = TestEnv("me/pkg", "1.0", pythonpath=["src"], dir=sys.prefix)  # this venv holds pytest
    assert "pytest" in check_env(env)
    with RepoJudge(envs={env.key: env}) as judge:
        good, empty = judge.judge(SRC_TASK, FIX), judge.judge(SRC_TASK, {})
    assert good.passed and good.env == "me/pkg@1.0", good.message + good.output_tail
    assert empty.status == "failed"
    with RepoJudge() as judge:  # no environment: src/ is not on the path, the import fails in collection
        v = judge.judge(SRC_TASK, FIX)
    assert not v.passed and v.env == "codechat"


def test_task_without_an_environment_is_env_error():
    with RepoJudge(envs={}) as judge:
        v = judge.judge(SRC_TASK, FIX)
    assert v.status == "env_error" and "no environment for me/pkg@1.0" in v.message
    assert v.verdict().status == "infra_error"


def test_swebench_tree_without_git_gets_the_gold_as_reference(shared_data, tmp_path):
    recs = {r["instance_id"]: r for r in json.loads((shared_data / "repo" / "swe-bench-lite-test.json").read_text())}
    with tarfile.open(shared_data / "repo" / "swebench" / "pallets__flask-4992.tar.gz") as tf:
        tf.extractall(tmp_path / "pallets__flask-4992", filter="data")
    task = from_swebench(recs["pallets__flask-4992"], "x", str(tmp_path))
    assert task.commit is None and task.repo_dir.endswith("flask") and task.metadata["version"] == "2.3"
    assert set(task.solution) == {"src/flask/config.py"} and "mode" in task.solution["src/flask/config.py"]


def test_offline_tests_are_left_out_of_pass_to_pass_and_make_a_requirement_unjudgeable():
    task = RepoTask("net", "", {"src/pkg/__init__.py": "def one():\n    return 2\n"},
                    hidden_tests={"tests/test_one.py": "from pkg import one\n\ndef test_one():\n    assert one() == 1\n"
                                  "\n\ndef test_net():\n    raise OSError('no network')\n"},
                    fail_to_pass=["tests/test_one.py::test_one"], pass_to_pass=["tests/test_one.py::test_net"],
                    metadata={"repo": "me/pkg", "version": "1.0"})
    env = TestEnv("me/pkg", "1.0", pythonpath=["src"], dir=sys.prefix,
                  offline_skip={"tests/test_one.py::test_net": "calls example.org"})
    with RepoJudge(envs={env.key: env}) as judge:
        v = judge.judge(task, FIX)
        assert v.passed and any("calls example.org" in w for w in v.warnings), v.message
        # a requirement is never shrunk to the tests that can run: 1 of 2 required tests offline is unjudgeable
        task.fail_to_pass, task.pass_to_pass = ["tests/test_one.py::test_one", "tests/test_one.py::test_net"], []
        v = judge.judge(task, FIX)
        assert v.status == "env_error" and "1 of 2 FAIL_TO_PASS tests are marked offline_skip" in v.message, v.message
        assert v.verdict().status == "infra_error" and any("calls example.org" in w for w in v.warnings)
        task.fail_to_pass = ["tests/test_one.py::test_net"]
        v = judge.judge(task, FIX)
    assert v.status == "env_error" and "1 of 1 FAIL_TO_PASS" in v.message


def _other_python() -> str | None:
    """A pyenv/PATH interpreter of another minor version than this one that can import this venv's pytest."""
    here = "%d.%d" % sys.version_info[:2]
    for v in ("3.12", "3.13", "3.10"):
        if v == here:
            continue
        try:
            return resolve_python(v)
        except EnvError:
            continue
    return None


def test_environment_on_another_interpreter_runs_in_the_sandbox(tmp_path):
    other = _other_python()
    if other is None:
        pytest.skip("no second Python interpreter on this machine")
    d = tmp_path / "env"
    subprocess.run([other, "-m", "venv", "--without-pip", str(d)], check=True, capture_output=True)
    site = subprocess.run([str(d / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    pytest_dir = str(Path(pytest.__file__).resolve().parents[1])  # pure-Python pytest, pluggy, iniconfig
    Path(site, "judge_pytest.pth").write_text(pytest_dir + "\n")
    probe = subprocess.run([str(d / "bin" / "python"), "-I", "-c", "import pytest"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"{other} cannot import this venv's pytest")
    version = subprocess.run([str(d / "bin" / "python"), "-c", "import sys; print(sys.version_info[:2])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    task = RepoTask("other", "", SRC_TASK.files, hidden_tests={"tests/test_one.py": SRC_TASK.hidden_tests[
        "tests/test_one.py"] + f"\n\ndef test_version():\n    import sys\n    assert str(sys.version_info[:2]) == {version!r}\n"},
        metadata=SRC_TASK.metadata)
    env = TestEnv("me/pkg", "1.0", pythonpath=["src"], dir=str(d))
    assert any(h != str(d) and other.startswith(h) for h in env.host_dirs())  # the base install is shown too
    with RepoJudge(envs={env.key: env}) as judge:
        good, empty = judge.judge(task, FIX), judge.judge(task, {})
    assert good.passed and good.tests_passed == 2, good.message + good.output_tail
    assert empty.status == "failed"


def test_bench_skips_an_instance_any_of_whose_fail_to_pass_needs_the_network_with_the_reason():
    spec = importlib.util.spec_from_file_location("swebench_gold", Path(__file__).parents[1] / "bench" /
                                                  "swebench_gold.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    env = TestEnv("psf/requests", "2.7", offline_skip={"t.py::a": "calls httpbin.org", "t.py::b": "calls httpbin.org"})
    rec = {"repo": "psf/requests", "version": "2.7", "FAIL_TO_PASS": json.dumps(["t.py::a", "t.py::b"])}
    assert "calls httpbin.org" in bench.skip_reason(rec, {env.key: env})
    assert "1 of 2" in bench.skip_reason({**rec, "FAIL_TO_PASS": json.dumps(["t.py::a", "t.py::c"])}, {env.key: env})
    assert bench.skip_reason({**rec, "FAIL_TO_PASS": json.dumps(["t.py::c"])}, {env.key: env}) is None
