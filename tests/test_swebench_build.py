"""SWE-bench environment builds and the bench's wrong changes: conda names mapped to their PyPI packages, pip
steps resolved as of a date (and run again undated when they cannot be), the gold with one change block undone."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codechat.verifier.patches import apply_diff, parse_diff
from codechat.verifier.repo_env import EnvError
from codechat.verifier.swebench_env import _step, prepare_pip
from codechat.verifier.swebench_tree import changed_packaging
from codechat.verifier.swebench_spec import (as_of_hint, build_environ, conda_to_pypi, offline_pre_install, parse_as_of,
                                             records_date, spec_packages, tree_pythonpath)


def _bench():
    spec = importlib.util.spec_from_file_location("swebench_gold", Path(__file__).parents[1] / "bench" /
                                                  "swebench_gold.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_conda_names_map_to_their_pypi_packages_and_conda_only_ones_are_left_out():
    lines, changed = conda_to_pypi(["iris", "matplotlib-base==3.5", "hdf5", "numpy==1.23.0", "cdms2"])
    assert lines == ["scitools-iris", "matplotlib==3.5", "numpy==1.23.0"]
    assert changed == {"iris": "scitools-iris", "matplotlib-base": "matplotlib", "hdf5": None, "cdms2": None}


def test_as_of_is_the_newest_record_date_or_a_checked_date():
    recs = [{"created_at": "2020-05-27T16:48:09Z"}, {"created_at": "2020-07-18T06:39:32Z"}, {}]
    assert records_date(recs) == "2020-07-18T06:39:32Z"
    assert parse_as_of("records", recs) == "2020-07-18T06:39:32Z"
    assert parse_as_of("records", [{}]) is None and parse_as_of("none", recs) is None
    assert parse_as_of("2021-01-01", recs) == "2021-01-01"
    with pytest.raises(EnvError, match="ISO 8601"):
        parse_as_of("2020-13-01", recs)
    # a date before the interpreter's release (matplotlib 3.5's records on Python 3.11) names one with its wheels
    assert "--as-of 2022-11-24" in as_of_hint("2022-08-05T15:52:55Z", "3.11")
    assert as_of_hint("2022-11-24", "3.11") is None and as_of_hint(None, "3.11") is None
    assert as_of_hint("2020-07-18T06:39:32Z", "3.8") is None


def _fake_pip(venv: Path, body: str = '[ -z "$PIP_UPLOADED_PRIOR_TO" ]\n') -> None:
    """A `pip` (and a `python` that runs only `-m pip`) on the venv's PATH that prints the date, config and
    arguments it got, then runs `body` (by default: fail when dated, as a pin released after the date does)."""
    (venv / "bin").mkdir(parents=True)
    for name, text in (("pip", 'echo "date=$PIP_UPLOADED_PRIOR_TO config=$PIP_CONFIG_FILE links=$PIP_FIND_LINKS '
                               'args=$*"\n' + body),
                       ("python", '[ "$1 $2" = "-m pip" ] || exit 3\nshift 2\nexec "$(dirname "$0")/pip" "$@"\n')):
        (venv / "bin" / name).write_text("#!/bin/bash\n" + text)
        (venv / "bin" / name).chmod(0o755)


def test_a_dated_pip_step_that_fails_runs_again_undated_and_both_are_recorded(tmp_path, monkeypatch):
    _fake_pip(tmp_path)
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    steps = []
    assert _step("pip install tox==4.16.0", tmp_path, tmp_path, steps, as_of="2020-07-18T06:39:32Z")
    assert [s["rc"] for s in steps] == [1, 0]
    assert steps[0]["as_of"] == "2020-07-18T06:39:32Z" and "as_of" not in steps[1]
    # dated: no configuration files or find-links (an index without upload times would let later files through)
    assert steps[0]["tail"] == f"date=2020-07-18T06:39:32Z config={os.devnull} links= args=install tox==4.16.0"
    assert steps[1]["tail"] == "date= config= links=/opt/wheels args=install tox==4.16.0"


def test_a_python_3_6_venv_gets_its_newest_pip_and_installs_from_the_package_index_alone(tmp_path, monkeypatch):
    # a plain file index lists asgiref 3.12 (Requires-Python >=3.10) without saying so: 3.6's pip took it for
    # django 3.x and stopped (3.8's resolver backtracked for hours); the package index says which Python it needs
    _fake_pip(tmp_path)
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///opt/pypi/simple")
    monkeypatch.delenv("PIP_CONFIG_FILE", raising=False)
    steps = []
    as_of, notes = prepare_pip(tmp_path, "3.6", "2020-04-18T16:41:40Z", steps)
    assert as_of is None and notes["pip_index_only"] and "Python 3.6" in notes["as_of_unavailable"]
    assert [s["cmd"] for s in steps] == ["python -m pip install -q 'pip==21.3.1'"]
    assert _step("python -m pip install -q -r requirements.txt", tmp_path, tmp_path, steps)
    assert steps[-1]["tail"] == f"date= config={os.devnull} links= args=install -q -r requirements.txt"
    newer = tmp_path / "py311"
    _fake_pip(newer)
    steps = []
    assert prepare_pip(newer, "3.11", None, steps) == (None, {"as_of": None}) and steps == []
    prepare_pip(newer, "3.11", "2023-07-17", steps)  # the dated pip comes from the package index alone too
    assert steps[0]["tail"] == f"date= config={os.devnull} links= args=install -q pip>=26"
    steps = []
    assert _step("python -m pip install -q -r requirements.txt", newer, newer, steps)
    assert steps[-1]["tail"] == "date= config= links=/opt/wheels args=install -q -r requirements.txt"


def test_a_step_that_does_not_run_pip_is_never_dated_or_repeated(tmp_path):
    steps = []
    assert not _step("echo \"$PIP_UPLOADED_PRIOR_TO\" >> ran.txt; false", tmp_path, tmp_path, steps,
                     as_of="2020-01-01")
    assert len(steps) == 1 and "as_of" not in steps[0] and (tmp_path / "ran.txt").read_text() == "\n"


BASE = {"a.py": "def f():\n    return 1\n\n\nX = 1\nY = 2\n", "old.py": "gone = True\n"}
GOLD = """--- a/a.py
+++ b/a.py
@@ -1,6 +1,7 @@
 def f():
-    return 1
+    return 2
 
 
 X = 1
-Y = 2
+Y = 3
+Z = 4
--- /dev/null
+++ b/new.py
@@ -0,0 +1,4 @@
+import a
+
+def g():
+    return a.f()
--- a/old.py
+++ /dev/null
@@ -1 +0,0 @@
-gone = True
"""


def _apply(diff: str) -> dict:
    files = dict(BASE)
    files.update(apply_diff(diff, files.get) if diff else {})
    return {k: v for k, v in files.items() if v is not None}


def test_wrong_variants_undo_one_change_block_each_largest_first():
    bench = _bench()
    gold = _apply(GOLD)
    variants = bench.wrong_variants(GOLD, 10)
    assert len(variants) == len(bench.change_blocks(GOLD)) == 4
    got = [_apply(v) for v in variants]
    assert got[0] == {k: v for k, v in gold.items() if k != "new.py"}        # the new file (4 lines) not created
    assert got[1]["a.py"] == "def f():\n    return 2\n\n\nX = 1\nY = 2\n" and "new.py" in got[1]  # Y/Z block
    assert got[2]["a.py"] == "def f():\n    return 1\n\n\nX = 1\nY = 3\nZ = 4\n"
    assert got[3] == {**gold, "old.py": "gone = True\n"}                     # the deletion undone
    assert all(g != gold for g in got)
    assert bench.wrong_variants(GOLD, 2) == variants[:2]


def test_a_one_block_gold_has_one_wrong_variant_the_base():
    bench = _bench()
    one = "--- a/old.py\n+++ b/old.py\n@@ -1 +1 @@\n-gone = True\n+gone = False\n"
    assert bench.wrong_variants(one, 3) == [""]


def test_every_lite_gold_has_wrong_variants_that_parse_and_differ_from_it(shared_data):
    bench = _bench()
    recs = json.loads((shared_data / "repo" / "swe-bench-lite-test.json").read_text())
    for rec in recs:
        variants = bench.wrong_variants(rec["patch"], 3)
        assert variants, rec["instance_id"]
        for v in variants:
            assert v != rec["patch"] and (v == "" or parse_diff(v)), rec["instance_id"]


def test_summary_counts_wrong_variants_that_still_resolved():
    bench = _bench()
    recs = [{"instance_id": "o__r-1", "repo": "o/r", "version": "1"}, {"instance_id": "o__r-2", "repo": "o/r",
                                                                      "version": "1"}]
    lines = [{"instance_id": "o__r-1", "kind": "gold", "status": "passed", "seconds": 2.0, "message": ""},
             {"instance_id": "o__r-1", "kind": "wrong", "status": "failed", "seconds": 4.0, "message": "",
              "blocks": 3, "tried": 2, "tried_resolved": 1},
             {"instance_id": "o__r-2", "kind": "gold", "status": "passed", "seconds": 2.0, "message": ""},
             {"instance_id": "o__r-2", "kind": "wrong", "status": "passed", "seconds": 4.0, "message": "",
              "blocks": 2, "tried": 2, "tried_resolved": 2}]
    fig = bench.summarize(lines, recs, {})["repos"]["o/r"]
    assert fig["wrong_resolved"] == 1 and fig["wrong_resolved_ids"] == ["o__r-2"]
    assert fig["wrong_blocks_unneeded"] == {"o__r-1": "1 of 3", "o__r-2": "2 of 2"}


REPORT = {"environment": {"python_version": "3.9", "sys_platform": "linux"}, "install": [
    {"download_info": {"url": "file:///src", "dir_info": {"editable": True}}, "requested_extras": ["test"],
     "metadata": {"requires_dist": ["docutils>=0.12", "Jinja2<3.0", 'colorama>=0.3.5; sys_platform == "win32"',
                                    'typed_ast; python_version < "3.8"', 'pytest; extra == "test"',
                                    'flake8; extra == "lint"', "requests[socks]>=2.5"]}},
    {"download_info": {"url": "https://files/docutils-0.23.whl", "archive_info": {}},
     "metadata": {"requires_dist": ["never-listed"]}}]}


def test_an_editable_install_gets_its_requirements_as_of_the_date_then_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_CONFIG_FILE", raising=False)
    (tmp_path / "report.json").write_text(json.dumps(REPORT))
    _fake_pip(tmp_path, f'if [[ "$*" == *--report* ]]; then cp {tmp_path / "report.json"} "${{@: -1}}"; fi\n')
    steps = []
    assert _step("python -m pip install -e .[test]", tmp_path, tmp_path, steps, as_of="2020-05-27")
    report = tmp_path / "pip-report.json"
    assert [(s["tail"], s.get("as_of")) for s in steps] == [
        (f"date= config= links= args=install -e .[test] --dry-run --quiet --report {report}", None),
        (f"date=2020-05-27 config={os.devnull} links= args=install -q docutils>=0.12 Jinja2<3.0 pytest "
         "requests[socks]>=2.5", "2020-05-27"),
        ("date= config= links= args=install -e .[test]", None)]


def test_build_refuses_a_bad_as_of_date_before_building(tmp_path, capsys):
    from codechat.cli import main
    recs = tmp_path / "recs.json"
    recs.write_text(json.dumps([{"instance_id": "me__calc-1", "repo": "me/calc", "version": "1", "base_commit": "a"}]))
    assert main(["repo", "env", "build", str(recs), "--mirrors", str(tmp_path), "--out", str(tmp_path / "envs"),
                 "--as-of", "yesterday"]) == 2
    assert "--as-of 'yesterday': give an ISO 8601 date" in capsys.readouterr().err
    assert not (tmp_path / "envs").exists()


EMPTY_FILES = """diff --git a/pkg/__init__.py b/pkg/__init__.py
new file mode 100644
index 0000000..e69de29
diff --git a/pkg/mod.py b/pkg/mod.py
new file mode 100644
--- /dev/null
+++ b/pkg/mod.py
@@ -0,0 +1 @@
+x = 1
diff --git a/old/__init__.py b/old/__init__.py
deleted file mode 100644
index e69de29..0000000
"""


def test_git_header_alone_creates_or_deletes_an_empty_file():
    fps = parse_diff(EMPTY_FILES)
    assert [(f.path, f.is_new, f.is_delete, len(f.hunks)) for f in fps] == [
        ("pkg/__init__.py", True, False, 0), ("pkg/mod.py", True, False, 1), ("old/__init__.py", False, True, 0)]
    assert apply_diff(EMPTY_FILES, {"old/__init__.py": ""}.get) == {"pkg/__init__.py": "", "pkg/mod.py": "x = 1\n",
                                                                     "old/__init__.py": None}


def test_a_lite_test_patch_creating_an_empty_package_init_creates_it(shared_data):
    recs = {r["instance_id"]: r for r in json.loads((shared_data / "repo" / "swe-bench-lite-test.json").read_text())}
    paths = [f.path for f in parse_diff(recs["sphinx-doc__sphinx-10451"]["test_patch"])]
    assert "tests/roots/test-ext-napoleon/mypackage/__init__.py" in paths


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_base_commits_with_the_same_packaging_files_are_installed_once(tmp_path):
    # django 4.0's 19 Lite bases hold 10 distinct packaging states; an install per state stands for its commits
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q")
    commits = []
    for setup_cfg, note in (("[metadata]\nversion = 1\n", "a"), ("[metadata]\nversion = 2\n", "b"),
                            ("[metadata]\nversion = 2\n", "c"), ("[metadata]\nversion = 1\n", "d")):
        (repo / "setup.cfg").write_text(setup_cfg)
        (repo / "notes.txt").write_text(note)
        _git(repo, "add", "-A")
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", note)
        commits.append(_git(repo, "rev-parse", "HEAD"))
    env_commit, b, c, d = commits
    assert changed_packaging(repo, env_commit, {b, c, d}) == {min(b, c): sorted([b, c])}
    assert changed_packaging(repo, env_commit, {d, env_commit}) == {}
    # a compiled source that differs (scikit-learn 0.22's bases under the same packaging files) needs its own build
    (repo / "_fast.pyx").write_text("def f(): pass\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "e")
    e = _git(repo, "rev-parse", "HEAD")
    assert changed_packaging(repo, env_commit, {d, e}) == {e: [e]}


def test_django_4_0_lite_bases_need_eight_installs_not_nineteen(shared_data):
    from codechat.verifier.swebench_spec import find_mirror
    mirrors = Path(os.environ.get("CODECHAT_MIRRORS", "/work/.mirror"))
    try:
        mirror = find_mirror("django/django", mirrors)
    except EnvError as e:
        pytest.skip(str(e))
    recs = [r for r in json.loads((shared_data / "repo" / "swe-bench-lite-test.json").read_text())
            if r["repo"] == "django/django" and r["version"] == "4.0"]
    groups = changed_packaging(mirror, recs[0]["environment_setup_commit"], {r["base_commit"] for r in recs})
    # 18 bases' packaging files differ from the environment commit's, in 7 ways: 7 installs and the environment's
    assert len(recs) == 19 and len(groups) == 7 and sum(len(g) for g in groups.values()) == 18


def test_a_spec_package_list_is_read_as_the_shell_reads_it():
    # scikit-learn 1.3's list is shell-quoted for `conda create`: read word by word, pip got `'numpy==1.19.2'`
    assert spec_packages("'numpy==1.19.2' 'scipy==1.5.2' pytest \"pandas<2.0.0\" numpy=1.19") == [
        "numpy==1.19.2", "scipy==1.5.2", "pytest", "pandas<2.0.0", "numpy==1.19"]
    pytest.importorskip("swebench")
    from codechat.verifier.swebench_spec import spec_for
    assert spec_packages(spec_for("scikit-learn/scikit-learn", "1.3")["packages"])[:3] == [
        "numpy==1.19.2", "scipy==1.5.2", "cython==3.0.10"]


def test_an_install_asking_for_setup_py_develop_runs_with_a_pip_that_still_has_it(tmp_path, monkeypatch):
    # scikit-learn's spec installs with `--no-use-pep517`, an option the pip that dating needs no longer has
    from codechat.verifier import swebench_env
    ran = []
    cmd = "python -m pip install -v --no-use-pep517 --no-build-isolation -e ."

    def fake_run(c, cwd, env, steps, timeout_s, as_of=None):
        ran.append(c)
        ok = "--no-use-pep517" not in c or "pip<25" in " ".join(ran)
        steps.append({"cmd": c, "rc": 0 if ok else 2, "tail": "" if ok else "no such option: --no-use-pep517"})
        return ok

    monkeypatch.setattr(swebench_env, "_run", fake_run)
    assert _step(cmd, tmp_path, tmp_path, [])
    assert ran[-3:] == ["python -m pip install -q 'pip<25' wheel", cmd, "python -m pip install -q 'pip>=26'"]


def test_pre_install_downloads_and_the_lines_using_them_are_left_out_offline():
    cmds = ['URL="http://example.org/q.tgz"', "TAR=/tmp/q.tgz", 'wget -O "$TAR" "$URL"', "tar -xzf ${TAR} -C b",
            "curl -sO http://example.org/x", "echo $HOME > home.txt", "sed -i s/a/b/ setup.cfg"]
    assert offline_pre_install(cmds) == (["echo $HOME > home.txt", "sed -i s/a/b/ setup.cfg"],
                                         cmds[:5])
    pytest.importorskip("swebench")
    from codechat.verifier.swebench_spec import spec_for
    run, left_out = offline_pre_install(spec_for("matplotlib/matplotlib", "3.6")["pre_install"])
    assert [c.split()[0] for c in run] == ["apt-get"]  # itself skipped as root-only at build time
    assert any(c.startswith("wget") for c in left_out) and any(c.startswith("tar") for c in left_out)


def test_matplotlib_builds_with_the_systems_freetype_and_qhull(tmp_path):
    environ = build_environ("matplotlib/matplotlib", tmp_path)
    cfg = Path(environ["MPLSETUPCFG"])
    assert cfg.parent == tmp_path and "system_freetype = True" in cfg.read_text()
    assert "system_qhull = True" in cfg.read_text() and build_environ("sympy/sympy", tmp_path) == {}
    steps = []
    assert _step('echo "cfg=$MPLSETUPCFG"', tmp_path, tmp_path, steps, environ=environ)
    assert steps[0]["tail"] == f"cfg={cfg}"


def test_the_code_under_test_is_imported_from_the_trees_package_directory(tmp_path):
    # matplotlib's package is lib/matplotlib, beside a src/ of C++ sources: with src/ on sys.path, the editable
    # install's copy (the environment commit's code) was imported instead of the tree under test
    (tmp_path / "src" / "tri").mkdir(parents=True)
    (tmp_path / "src" / "_path.cpp").write_text("")
    (tmp_path / "lib" / "matplotlib").mkdir(parents=True)
    assert tree_pythonpath(tmp_path) == ["."]
    (tmp_path / "lib" / "matplotlib" / "__init__.py").write_text("")
    assert tree_pythonpath(tmp_path) == ["lib"]
    (tmp_path / "src" / "_pytest").mkdir()
    (tmp_path / "src" / "_pytest" / "__init__.py").write_text("")
    assert tree_pythonpath(tmp_path) == ["src"]


def test_an_unpinned_cython_on_python_3_6_is_the_one_conda_had():
    # PyPI's Cython 3.0 installs on 3.6, conda never built it there, and scikit-learn 0.22 does not compile with it
    from codechat.verifier.swebench_spec import python_caps
    lines = ["numpy", "Cython", "cython==0.28.5", "scipy"]
    assert python_caps(lines, "3.6") == ["numpy", "Cython<3", "cython==0.28.5", "scipy"]
    assert python_caps(lines, "3.9") == lines


def test_an_unpinned_pytest_on_python_3_6_names_parameters_as_the_records_do(shared_data):
    # pytest 7.0 installs on 3.6 from PyPI and names a complex parameter `1j`; the harness's pytest named it by
    # position, as scikit-learn 0.22's records show
    from codechat.verifier.swebench_spec import python_caps, spec_packages, spec_for
    spec = spec_for("scikit-learn/scikit-learn", "0.22")
    assert "pytest<7" in python_caps(spec_packages(spec["packages"]), "3.6")
    assert python_caps(["pytest"], "3.9") == ["pytest"]
    records = json.loads((shared_data / "repo" / "swe-bench-lite-test.json").read_text())
    passing = json.loads(next(r for r in records if r["instance_id"] == "scikit-learn__scikit-learn-14983")["PASS_TO_PASS"])
    assert "sklearn/model_selection/tests/test_split.py::test_shufflesplit_errors[None-train_size3]" in passing


def test_a_wrong_variant_undoing_only_docstrings_or_comments_is_passed_over():
    # a gold whose largest blocks rewrite docstrings (scikit-learn 10297) would give "wrong" changes that are the
    # gold's program; with the base files the variants that change code come first
    bench = _bench()
    base = {"m.py": 'def f(a):\n    """Old text\n    more."""\n    return a\n\n\n# note\nX = 1\n'}
    gold = ("--- a/m.py\n+++ b/m.py\n@@ -1,8 +1,8 @@\n def f(a):\n-    \"\"\"Old text\n-    more.\"\"\"\n"
            "+    \"\"\"New text,\n+    rewritten.\"\"\"\n     return a\n \n \n-# note\n+# a note\n-X = 1\n+X = 2\n")
    plain = bench.wrong_variants(gold, 3)
    assert len(plain) == 2 and "X = 2" in plain[0]          # the docstring block (4 lines) first, X kept
    code = bench.wrong_variants(gold, 3, base.get)
    assert len(code) == 1 and "X = 2" not in code[0]        # only undoing `X = 2` changes the program
    assert "X = 1" in apply_diff(code[0], base.get)["m.py"]
    docs_only = "--- a/m.py\n+++ b/m.py\n@@ -7,1 +7,1 @@\n-# note\n+# a note\n"
    assert bench.wrong_variants(docs_only, 3, base.get) == bench.wrong_variants(docs_only, 3) == [""]
