"""SWE-bench environments from the official specs: the test command's runner, the official log parser, and the
trust rules for a repository's own runner (one attack per test). The mechanism runs on a small django-style
tree (a `tests/runtests.py` driving unittest) with codechat's interpreter; real repositories run in the slow test
at the end when their environments are built."""
import json
import os
import sys
from pathlib import Path

import pytest

from codechat.tasks.repo import RepoTask
from codechat.verifier.repo import RepoJudge
from codechat.verifier.repo_env import EnvError, TestEnv, load_envs, parse_env
from codechat.verifier.swebench_spec import RUNNER_FILES, find_mirror, parse_test_cmd

swebench = pytest.importorskip("swebench", reason="the optional swebench package (pip install codechat[swebench])")

RUNTESTS = """import os, sys, unittest
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
labels = [a for a in sys.argv[1:] if not a.startswith("-")]
result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(unittest.defaultTestLoader.loadTestsFromNames(labels))
sys.exit(not result.wasSuccessful())
"""
TEST_PATCH = """diff --git a/tests/app/tests.py b/tests/app/tests.py
new file mode 100644
--- /dev/null
+++ b/tests/app/tests.py
@@ -0,0 +1,10 @@
+import unittest
+from calc import one
+
+
+class T(unittest.TestCase):
+    def test_one(self):
+        self.assertEqual(one(), 1)
+
+    def test_kept(self):
+        self.assertTrue(True)
"""
F2P, P2P = "test_one (app.tests.T.test_one)", "test_kept (app.tests.T.test_kept)"
FIX = {"calc.py": "def one():\n    return 1\n"}


def _task() -> RepoTask:
    return RepoTask("django__fixture-1", "one() must return 1",
                    {"calc.py": "def one():\n    return 2\n", "tests/runtests.py": RUNTESTS,
                     "tests/app/__init__.py": "", "tests/test_sqlite.py": "SECRET_KEY = 'x'\n"},
                    test_patch=TEST_PATCH, fail_to_pass=[F2P], pass_to_pass=[P2P],
                    metadata={"repo": "django/django", "version": "9.9"})


def _env() -> TestEnv:
    return TestEnv("django/django", "9.9", runner="swebench", test_cmd="./tests/runtests.py --verbose",
                   protected=RUNNER_FILES["unittest"], dir=sys.prefix)


def _judge(change):
    env = _env()
    with RepoJudge(envs={env.key: env}) as judge:
        return judge.judge(_task(), change)


def test_spec_test_commands_map_to_runners():
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS as specs
    assert parse_test_cmd(specs["django/django"]["3.0"]["test_cmd"])["script"] == "tests/runtests.py"
    sym = parse_test_cmd(specs["sympy/sympy"]["1.1"]["test_cmd"])
    assert sym["kind"] == "sympy" and sym["script"] == "bin/test" and "PYTHONWARNINGS" in sym["environ"]
    assert parse_test_cmd(specs["pytest-dev/pytest"]["4.4"]["test_cmd"]) == \
        {"kind": "pytest", "script": "", "args": ["-rA"], "environ": {}}
    with pytest.raises(EnvError, match="no runner for 'make'"):
        parse_test_cmd("make check")


def test_env_fields_are_checked():
    with pytest.raises(EnvError, match="runner 'docker' unknown"):
        parse_env({"repo": "a/b", "version": "1", "runner": "docker"}, "x")
    with pytest.raises(EnvError, match="'environ' must map"):
        parse_env({"repo": "a/b", "version": "1", "environ": {"A": 1}}, "x")


def test_missing_mirror_names_where_it_looked(tmp_path):
    with pytest.raises(EnvError, match=r"sympy/sympy: no git mirror under .*sympy__sympy, sympy\+sympy/repo"):
        find_mirror("sympy/sympy", tmp_path)


def test_gold_resolves_and_empty_does_not_with_the_official_parser():
    good, empty = _judge(FIX), _judge({})
    assert good.passed, good.message + good.output_tail
    assert good.fail_to_pass["passed"] == [F2P] and good.pass_to_pass["passed"] == [P2P]
    assert empty.status == "failed" and empty.failed_tests == [F2P]


def test_attack_patch_editing_runtests_is_dropped():
    v = _judge({**FIX, "tests/runtests.py": "print('test_one (app.tests.T.test_one) ... ok')\n"})
    assert "tests/runtests.py: the test runner's own file" in v.dropped and v.passed


def test_attack_settings_module_edit_is_dropped():
    v = _judge({"tests/test_sqlite.py": "import unittest\nunittest.TestResult.addFailure = "
                "unittest.TestResult.addSuccess\n"})
    assert "tests/test_sqlite.py: the test runner's own file" in v.dropped and not v.passed


def test_attack_forged_log_line_passes_nothing():
    # printed while the test runs, the line is read by the official parser as the test's own: PASSED there
    v = _judge({"calc.py": "def one():\n    print('\\ntest_one (app.tests.T.test_one) ... ok')\n    return 2\n"})
    assert not v.passed and F2P in v.failed_tests
    assert "not reported passed by the runner" in v.output_tail


def test_attack_result_class_patched_at_import_is_rejected():
    v = _judge({"calc.py": "import unittest.result\nunittest.result.TestResult.addFailure = "
                "lambda self, test, err: self.addSuccess(test)\n\ndef one():\n    return 2\n"})
    assert v.status == "rejected" and "addFailure" in v.message


def test_attack_conftest_in_a_subpackage_is_dropped():
    v = _judge({**FIX, "tests/app/conftest.py": "raise SystemExit(0)\n"})
    assert "tests/app/conftest.py: protected" in v.dropped and v.passed


def test_attack_early_exit_is_an_error_not_a_pass():
    v = _judge({"calc.py": "import sys\nprint('test_one (app.tests.T.test_one) ... ok')\nsys.exit(0)\n"})
    assert not v.passed


def test_a_change_importing_a_missing_module_fails_and_a_base_needing_one_is_env_error():
    v = _judge({"calc.py": "import absent_module_x\n\ndef one():\n    return 1\n"})
    assert v.status == "failed", v.message
    env, task = _env(), _task()
    task.files["calc.py"] = "import absent_module_x\n\ndef one():\n    return 2\n"
    with RepoJudge(envs={env.key: env}) as judge:
        v = judge.judge(task, {"calc.py": "import absent_module_x\n\ndef one():\n    return 1\n"})
    assert v.status == "env_error" and "absent_module_x" in v.message


def test_sympy_and_django_runner_files_are_kept_pristine():
    env = TestEnv("sympy/sympy", "1.1", runner="swebench", protected=RUNNER_FILES["sympy"], dir=sys.prefix)
    task = RepoTask("s", "", {"bin/test": "x", "sympy/utilities/runtests.py": "x", "sympy/core.py": "x"},
                    metadata={"repo": "sympy/sympy", "version": "1.1"})
    with RepoJudge(envs={env.key: env}) as judge:
        kept, dropped = judge.filter_changes(task, {"bin/test": "y", "sympy/utilities/runtests.py": "y",
                                                    "sympy/testing/runtests.py": "y", "sympy/core.py": "y"})
    assert list(kept) == ["sympy/core.py"] and len(dropped) == 3


ENVS = os.environ.get("CODECHAT_SWEBENCH_ENVS", "/tmp/codechat-swebench-envs")
MIRRORS = os.environ.get("CODECHAT_MIRRORS", "/work/.mirror")


@pytest.mark.slow
@pytest.mark.parametrize("instance", ["sympy__sympy-14774", "pytest-dev__pytest-5227", "django__django-14017",
                                      "astropy__astropy-6938", "astropy__astropy-14182", "pallets__flask-4992",
                                      "psf__requests-3362"])
def test_real_instance_gold_resolves_empty_does_not(shared_data, instance):
    from codechat.tasks.repo_loaders import from_swebench
    recs = {r["instance_id"]: r for r in json.loads((shared_data / "repo" / "swe-bench-lite-test.json").read_text())}
    rec = recs[instance]
    envs = load_envs(ENVS) if Path(ENVS).is_dir() else {}
    if f"{rec['repo']}@{rec['version']}" not in envs:
        pytest.skip(f"no environment for {rec['repo']}@{rec['version']} under {ENVS} (codechat repo env build)")
    try:
        task = from_swebench(rec, instance, MIRRORS)
    except Exception as e:  # noqa: BLE001 - no mirror here
        pytest.skip(f"no mirror of {rec['repo']} under {MIRRORS}: {e}")
    with RepoJudge(envs=envs) as judge:
        gold, empty = judge.judge(task, rec["patch"]), judge.judge(task, "")
    assert gold.passed, gold.message + gold.output_tail
    assert empty.status == "failed"


def _git(cwd, *args):
    import subprocess
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True,
                   capture_output=True)


def _mirror(tmp_path):
    """A bare mirror owner+name/repo of a two-commit repository whose setup.py changes between the commits."""
    work = tmp_path / "work"
    (work / "tests").mkdir(parents=True)
    (work / "setup.py").write_text("# v1\n")
    (work / "calc.py").write_text("def one():\n    return 2\n")
    (work / "tests" / "test_calc.py").write_text("from calc import one\n\ndef test_two():\n    assert one() == 2\n")
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "one")
    (work / "setup.py").write_text("# v2\n")
    _git(work, "commit", "-qam", "two")
    (tmp_path / "m" / "me+calc").mkdir(parents=True)
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(tmp_path / "m" / "me+calc" / "repo"))
    head = lambda rev: __import__("subprocess").run(["git", "rev-parse", rev], cwd=work, capture_output=True,
                                                    text=True).stdout.strip()
    return tmp_path / "m", head("HEAD~1"), head("HEAD")


def test_build_from_a_spec_records_steps_overlay_and_installs_at_changed_bases(tmp_path, monkeypatch):
    from codechat.verifier import swebench_env
    mirrors, old, new = _mirror(tmp_path)
    spec = {"python": f"{sys.version_info[0]}.{sys.version_info[1]}", "test_cmd": "pytest -rA",
            "install": "git rev-parse HEAD >> installed_at.txt"}
    monkeypatch.setattr(swebench_env, "spec_for", lambda repo, version: dict(spec))
    recs = [{"instance_id": "me__calc-1", "repo": "me/calc", "version": "1", "base_commit": old,
             "environment_setup_commit": new}]
    env = swebench_env.build_swebench_env("me/calc", "1", recs, mirrors, tmp_path / "envs", log=lambda *_: None)
    manifest = json.loads((Path(env.dir) / "manifest.json").read_text())
    assert manifest["commit"] == new and manifest["overlay"] == ["installed_at.txt"]
    # the base commit's setup.py differs: install ran there first, then at the environment commit, last, each in a
    # clean tree (an earlier commit's build outputs do not reach a later commit's overlay)
    steps = [s["cmd"] for s in manifest["steps"]]
    assert steps == [f"git clean -q -f -d -x && git checkout -q -f {old}", spec["install"],
                     f"git clean -q -f -d -x && git checkout -q -f {new}", spec["install"]]
    assert (Path(env.dir) / "overlay" / "installed_at.txt").read_text().split() == [new]
    loaded = load_envs(tmp_path / "envs")["me/calc@1"]
    assert loaded.runner == "swebench" and loaded.test_cmd == "pytest -rA" and loaded.pythonpath == ["."]
    # a base's trees get what its own install made (scikit-learn 0.22's generated shims and compiled modules
    # differ between its base commits and the environment commit); other commits get the environment commit's
    from codechat.verifier.repo_env import lay_overlay
    assert loaded.overlays == {old: f"overlays/{old[:12]}"}
    for commit, want in ((old, [old]), (new, [new]), (None, [new])):
        tree = tmp_path / f"tree-{commit}"
        tree.mkdir()
        assert lay_overlay(loaded.for_commit(commit), tree) == ["installed_at.txt"]
        assert (tree / "installed_at.txt").read_text().split() == want


def test_swebench_record_from_a_bare_mirror_has_visible_tests(tmp_path):
    from codechat.tasks.repo_loaders import from_swebench
    mirrors, old, _ = _mirror(tmp_path)
    test_patch = ("diff --git a/tests/test_calc.py b/tests/test_calc.py\n--- a/tests/test_calc.py\n"
                  "+++ b/tests/test_calc.py\n@@ -3,2 +3,2 @@\n def test_two():\n-    assert one() == 2\n"
                  "+    assert one() == 1\n")
    rec = {"instance_id": "me__calc-1", "repo": "me/calc", "version": "1", "base_commit": old,
           "problem_statement": "one", "test_patch": test_patch, "FAIL_TO_PASS": ["tests/test_calc.py::test_two"]}
    task = from_swebench(rec, "x", str(mirrors))
    assert task.commit == old and task.visible_tests == ["tests/test_calc.py"]


def _wheel(dir_: Path, version: str) -> None:
    """A one-module wheel `dep` whose `dep.VERSION` is `version`."""
    import zipfile
    info = f"dep-{version}.dist-info"
    with zipfile.ZipFile(dir_ / f"dep-{version}-py3-none-any.whl", "w") as z:
        z.writestr("dep.py", f"VERSION = {version!r}\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: dep\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")


def test_a_base_whose_install_resolves_other_versions_runs_in_its_layer(tmp_path, monkeypatch):
    # the harness installs again at each instance's base commit: a dependency pinned differently there (pylint's
    # `astroid<=2.12.0-dev0`) must be the version that commit's tests import, not the environment commit's
    from codechat.verifier import swebench_env
    mirrors, old, new = _mirror(tmp_path)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for v in ("1.0", "2.0"):
        _wheel(wheels, v)
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    # setup.py reads "# v1" at the base commit and "# v2" at the environment commit: dep 1.0 and dep 2.0
    spec = {"python": f"{sys.version_info[0]}.{sys.version_info[1]}", "test_cmd": "pytest -rA",
            "install": "python -m pip install -q \"dep==$(sed 's/# v//' setup.py).0\""}
    monkeypatch.setattr(swebench_env, "spec_for", lambda repo, version: dict(spec))
    recs = [{"instance_id": f"me__calc-{i}", "repo": "me/calc", "version": "1", "base_commit": c,
             "environment_setup_commit": new} for i, c in enumerate((old, new))]
    swebench_env.build_swebench_env("me/calc", "1", recs, mirrors, tmp_path / "envs", log=lambda *_: None,
                                    as_of="none")
    env = load_envs(tmp_path / "envs")["me/calc@1"]
    assert set(env.bases) == {old}
    probe = "import dep, sys; print(dep.VERSION, sys.executable)"
    for commit, want in ((old, "1.0"), (new, "2.0"), (None, "2.0")):
        run = env.for_commit(commit)
        got = __import__("subprocess").run([run.interpreter, "-I", "-c", probe], capture_output=True, text=True)
        assert got.stdout.split()[0] == want, got.stderr
        # the layer's interpreter is under the environment's directory: the sandbox shows it with the venv
        assert Path(got.stdout.split()[1]).is_relative_to(env.dir) and run.host_dirs() == env.host_dirs()
    manifest = json.loads((Path(env.dir) / "manifest.json").read_text())
    assert manifest["bases"][old]["packages"]["dep"] == "1.0"
    with pytest.raises(EnvError, match="inside the environment"):
        parse_env({"repo": "a/b", "version": "1", "bases": {old: "../elsewhere"}}, "spec")


def test_an_editable_install_without_a_pep660_backend_runs_again_with_a_legacy_pip(tmp_path, monkeypatch):
    # pylint 2.15 pins setuptools~=62.6 (no build_editable hook); the pip a dated build needs no longer falls back
    # to `setup.py develop`, so the install runs again with one that does, and the dating pip comes back after
    from codechat.verifier import swebench_env
    ran = []

    def fake_run(cmd, cwd, env, steps, timeout_s, as_of=None):
        ran.append(cmd)
        legacy = "pip<25" in " ".join(ran)
        ok = "pip install -e ." not in cmd or "--dry-run" in cmd or legacy
        steps.append({"cmd": cmd, "rc": 0 if ok else 1, "tail": "" if ok else "missing the 'build_editable' hook"})
        return ok

    monkeypatch.setattr(swebench_env, "_run", fake_run)
    assert swebench_env._step("python -m pip install -e .", tmp_path, tmp_path, [])
    assert ran[-3:] == ["python -m pip install -q 'pip<25' wheel", "python -m pip install -e .",
                        "python -m pip install -q 'pip>=26'"]
    ran.clear()
    monkeypatch.setattr(swebench_env, "_run", lambda cmd, *a, **k: ran.append(cmd) or False)
    assert not swebench_env._step("python -m pip install -e .", tmp_path, tmp_path, [{"tail": "other"}])
    assert ran == ["python -m pip install -e ."]  # another failure is not retried


def test_a_file_the_mirror_lacks_is_left_out_of_the_build_and_its_trees_are_not_judged(tmp_path, monkeypatch):
    # a mirror snapshot may leave its largest files out (astropy's IERS table): the environment builds without
    # the file, says so, and a tree that needs it is refused rather than judged without it
    import subprocess
    from codechat import CodechatError
    from codechat.tasks.repo import materialize
    from codechat.verifier import swebench_env
    mirrors, old, new = _mirror(tmp_path)
    bare = mirrors / "me+calc" / "repo"
    blob = subprocess.run(["git", "-C", str(bare), "rev-parse", f"{new}:calc.py"], capture_output=True,
                          text=True).stdout.strip()
    (bare / "objects" / blob[:2] / blob[2:]).unlink()  # a local clone keeps the objects loose
    spec = {"python": f"{sys.version_info[0]}.{sys.version_info[1]}", "test_cmd": "pytest -rA", "install": "true"}
    monkeypatch.setattr(swebench_env, "spec_for", lambda repo, version: dict(spec))
    recs = [{"instance_id": "me__calc-1", "repo": "me/calc", "version": "1", "base_commit": new,
             "environment_setup_commit": new}]
    env = swebench_env.build_swebench_env("me/calc", "1", recs, mirrors, tmp_path / "envs", log=lambda *_: None,
                                          as_of="none")
    manifest = json.loads((Path(env.dir) / "manifest.json").read_text())
    assert manifest["absent_blobs"] == ["calc.py"] and (Path(env.dir) / "src" / "setup.py").is_file()
    with pytest.raises(CodechatError, match="git archive"):
        materialize(RepoTask("me__calc-1", "x", repo_dir=str(bare), commit=new), tmp_path / "base")


def test_a_mirror_lacking_the_environment_commit_is_named_and_the_built_environment_is_kept(tmp_path, monkeypatch):
    # a fork's history may hold every base commit but not the environment commit, which can lie on a stable
    # branch: the build says which commit the mirror lacks, before it removes the environment built earlier
    from codechat.verifier import swebench_env
    mirrors, old, new = _mirror(tmp_path)
    spec = {"python": f"{sys.version_info[0]}.{sys.version_info[1]}", "test_cmd": "pytest -rA", "install": "true"}
    monkeypatch.setattr(swebench_env, "spec_for", lambda repo, version: dict(spec))
    built = tmp_path / "envs" / "me__calc-1"
    built.mkdir(parents=True)
    (built / "env.json").write_text("{}")
    absent = "419a78300f7cd27611196e1e464d50fd0385ff27"
    recs = [{"instance_id": "me__calc-1", "repo": "me/calc", "version": "1", "base_commit": old,
             "environment_setup_commit": absent}]
    with pytest.raises(EnvError, match=f"me/calc@1: the mirror .* lacks the environment commit {absent}"):
        swebench_env.build_swebench_env("me/calc", "1", recs, mirrors, tmp_path / "envs", log=lambda *_: None,
                                        as_of="none")
    assert (built / "env.json").read_text() == "{}"


def test_a_node_id_is_backed_under_the_name_the_official_parser_gives_it():
    # pylint's parser names `test_stdin[/tmp/tree/tests/mymodule.py-...]` `test_stdin[/mymodule.py]`: the runner's
    # record of that node backs the name, and any node of the same name that failed fails it
    from codechat.verifier.repo_suite import agrees, parser_keys
    node = "tests/test_self.py::TestRunTC::test_stdin[/tmp/tree-1/ws/tests/mymodule.py-mymodule-/tmp/tree-1/ws/tests/mymodule.py]"
    name = "tests/test_self.py::TestRunTC::test_stdin[/mymodule.py]"
    assert not agrees(name, "PASSED", {node: ["pass"]})
    assert agrees(name, "PASSED", parser_keys("pylint-dev/pylint", {node: ["pass"]}))
    other = node.replace("tree-1", "tree-2")
    assert not agrees(name, "PASSED", parser_keys("pylint-dev/pylint", {node: ["pass"], other: ["fail"]}))
    assert agrees("t.py::test_x", "PASSED", parser_keys("pytest-dev/pytest", {"t.py::test_x": ["pass"]}))


def test_a_class_test_of_pytest_before_4_is_backed_under_the_id_its_report_line_gives():
    # pytest 3.3 (astropy 1.3's environment) ids a class's test `a.py::TestK::()::test_x` and prints
    # `a.py::TestK::test_x PASSED`: the runner's record of the first backs the second
    from codechat.verifier.repo_suite import agrees, parser_keys
    seen = {"a.py::TestK::()::test_x": ["pass"], "a.py::TestK::()::test_y": ["fail"]}
    assert agrees("a.py::TestK::test_x", "PASSED", parser_keys("astropy/astropy", seen))
    assert not agrees("a.py::TestK::test_y", "PASSED", parser_keys("astropy/astropy", seen))


def test_attack_a_parameter_id_holding_the_instance_marker_backs_no_other_test():
    from codechat.verifier.repo_suite import agrees, parser_keys
    seen = {"a.py::test_p[x::()::y]": ["pass"]}
    assert not agrees("a.py::test_p[x::y]", "PASSED", parser_keys("astropy/astropy", seen))


def test_the_repository_s_own_nspkg_pth_is_removed_and_others_kept(tmp_path, monkeypatch):
    # matplotlib 3.3's `pip install -e .` leaves a -nspkg.pth making `mpl_toolkits` from the environment's source
    # copy at every start: a test's subprocess would import the environment commit's mplot3d, not the tree's
    from codechat.verifier import swebench_env
    site, src = tmp_path / "site", tmp_path / "env" / "src"
    site.mkdir()
    own = site / "matplotlib-0.1-nspkg.pth"
    own.write_text(f"import sys, os; p = os.path.join({str(src / 'lib')!r}, *('mpl_toolkits',))\n")
    other = site / "sphinxcontrib_svg2pdfconverter-1.2.2-nspkg.pth"
    other.write_text("import sys, os; p = os.path.join(sys._getframe(1).f_locals['sitedir'], 'sphinxcontrib')\n")
    monkeypatch.setattr(swebench_env, "_site", lambda venv: site)
    assert swebench_env.drop_own_nspkg(tmp_path / "env", src) == [own.name]
    assert not own.exists() and other.exists()
