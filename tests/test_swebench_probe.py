"""The built environment's pytest tried on a one-test file: one that a build date older than the interpreter gave
and that cannot run there (requests 2.10's pytest 2.9.2 on Python 3.9) is installed again as of the interpreter's
release, the spec's pin kept; one that runs, or an undated build's, is left as it is."""
import pytest

pytest.importorskip("swebench", reason="the optional swebench package (pip install codechat[swebench])")


def _fake_pytest(venv, works: bool):
    """A venv whose `python -m pytest` passes the probe's test once `fixed` exists in the venv (or always)."""
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(
        "#!/bin/bash\n"
        + ("" if works else f'[ -e {venv}/fixed ] || {{ echo "INTERNALERROR> assert False"; exit 3; }}\n')
        + 'echo "PASSED test_codechat_probe.py::test_probe"\n')
    (venv / "bin" / "python").chmod(0o755)


def test_a_pytest_older_than_the_interpreter_that_cannot_run_is_installed_again_as_of_its_release(tmp_path):
    from codechat.verifier.swebench_probe import check_runner
    _fake_pytest(tmp_path, works=False)
    ran = []

    def step(cmd, as_of):
        ran.append((cmd, as_of))
        (tmp_path / "fixed").touch()
    runner = {"args": ["-rA"], "environ": {}}
    # requests 2.10: `packages: pytest` on Python 3.9, records of June 2016 (pytest 2.9.2 stops on 3.9)
    spec = {"python": "3.9", "packages": "pytest", "test_cmd": "pytest -rA"}
    out = check_runner("psf/requests", spec, runner, tmp_path, "2016-06-24T13:31:31Z", step, log=lambda *_: None)
    assert ran == [("python -m pip install -q --upgrade pytest", "2020-11-05")]
    assert out == {"runs": True, "reinstalled": {"cmd": ran[0][0], "as_of": "2020-11-05"}}
    # the spec's pin is kept; an undated build, or one dated after the interpreter, is left as it is
    (tmp_path / "fixed").unlink()
    ran.clear()
    check_runner("o/r", {**spec, "packages": "numpy pytest==5.4.3"}, runner, tmp_path, "2020-01-01", step,
                 log=lambda *_: None)
    assert ran == [("python -m pip install -q --upgrade pytest==5.4.3", "2020-11-05")]
    (tmp_path / "fixed").unlink()
    ran.clear()
    for as_of in (None, "2021-03-01"):
        out = check_runner("o/r", spec, runner, tmp_path, as_of, step, log=lambda *_: None)
        assert ran == [] and not out["runs"] and "INTERNALERROR" in out["tail"]


def test_a_pytest_that_runs_is_left_as_it_is(tmp_path):
    from codechat.verifier.swebench_probe import check_runner
    _fake_pytest(tmp_path, works=True)
    out = check_runner("psf/requests", {"python": "3.9", "packages": "pytest"}, {"args": ["-rA"], "environ": {}},
                       tmp_path, "2016-06-24", lambda cmd, date: pytest.fail(cmd), log=lambda *_: None)
    assert out == {"runs": True}


def test_the_probe_runs_a_real_pytest_and_reads_its_log_with_the_official_parser():
    import sys
    from pathlib import Path
    from codechat.verifier.swebench_probe import runner_runs
    ok, tail = runner_runs("psf/requests", Path(sys.prefix), ["-rA"], {})
    assert ok, tail
    ok, tail = runner_runs("psf/requests", Path(sys.prefix), ["-rA", "--no-such-option"], {})
    assert not ok and "--no-such-option" in tail


def _fake_collect(venv, src):
    """A venv whose pytest collects pytest 7's names of duplicate parameters until `fixed` exists, then pytest 8's."""
    (venv / "bin").mkdir(parents=True)
    (src / "tests").mkdir(parents=True)
    (src / "tests" / "test_rc.py").write_text("")
    (venv / "bin" / "python").write_text(
        "#!/bin/bash\n"
        f'if [ -e {venv}/fixed ]; then s=_; else s=; fi\n'
        'echo "tests/test_rc.py::test_weight[100-100${s}0]"\necho "tests/test_rc.py::test_weight[100-100${s}1]"\n'
        'echo "tests/test_rc.py::test_weight[bold-bold]"\n')
    (venv / "bin" / "python").chmod(0o755)


def test_records_that_name_duplicate_parameters_the_pytest_8_way_get_pytest_8(tmp_path):
    from codechat.verifier.swebench_probe import name_runner, pytest7_name
    assert pytest7_name("a.py::t[100-100_0]") == "a.py::t[100-1000]"
    assert pytest7_name("a.py::t[case_0]") is None and pytest7_name("a.py::t[bold-bold]") is None
    venv, src = tmp_path / "venv", tmp_path / "src"
    _fake_collect(venv, src)
    ran = []

    def step(cmd):
        ran.append(cmd)
        (venv / "fixed").touch()
        return True
    # matplotlib 3.5's 23299: its PASS_TO_PASS holds test_validate_fontweight[100-100_0] and [100-100_1]
    rec = {"FAIL_TO_PASS": '["tests/test_rc.py::test_new"]',
           "PASS_TO_PASS": '["tests/test_rc.py::test_weight[100-100_0]", "tests/test_rc.py::test_weight[100-100_1]"]'}
    spec = {"python": "3.11", "pip_packages": ["pytest"]}
    out = name_runner([rec], spec, venv, src, {}, step, log=lambda *_: None)
    assert ran == ["python -m pip install -q 'pytest>=8.0,<8.1'"]
    assert out == {"ids": 2, "collected": 2, "pytest7_names": 2, "installed": "pytest>=8.0,<8.1"}
    # collected as the records name them: nothing to do; a spec's pin is kept; records without such ids: {}
    ran.clear()
    assert name_runner([rec], spec, venv, src, {}, step, log=lambda *_: None) == {"ids": 2, "collected": 2}
    (venv / "fixed").unlink()
    out = name_runner([rec], {**spec, "pip_packages": ["pytest==7.2.0"]}, venv, src, {}, step, log=lambda *_: None)
    assert ran == [] and out == {"ids": 2, "collected": 0, "pytest7_names": 2}
    assert name_runner([{"FAIL_TO_PASS": ["tests/test_rc.py::test_weight[bold-bold]"]}], spec, venv, src, {}, step,
                       log=lambda *_: None) == {}
