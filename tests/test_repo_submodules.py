"""A base commit's git submodules filled from local mirrors: in the judged tree (`materialize`) and in the
environment build's checkout. The mechanism runs on two small bare mirrors (a superproject whose commit holds a
gitlink, and the submodule's own repository); the real record (astropy 1.3's `astropy_helpers`) runs when the
mirrors are on this machine."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codechat.tasks.model import TaskFormatError
from codechat.tasks.repo import RepoTask, materialize
from codechat.tasks.repo_loaders import from_swebench
from codechat.tasks.submodules import SubmoduleError, _safe_dir, fill_submodules, url_repo

URL = "https://github.com/helpers-org/helpers.git"
TEST_PATCH = ("diff --git a/tests/test_calc.py b/tests/test_calc.py\n--- a/tests/test_calc.py\n"
              "+++ b/tests/test_calc.py\n@@ -1,2 +1,2 @@\n def test_one():\n-    assert True\n+    assert 1\n")


def _git(cwd, *args) -> str:
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def _mirrors(tmp_path, url=URL, with_sub=True):
    """Bare mirrors me+calc/repo (its commit holds `helpers` as a gitlink to the submodule's first commit) and,
    with `with_sub`, helpers-org+helpers/repo (two commits: helper.py says v1, then v2)."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "helper.py").write_text("VERSION = 'v1'\n")
    _git(sub, "init", "-q")
    _git(sub, "add", "-A")
    _git(sub, "commit", "-qm", "v1")
    first = _git(sub, "rev-parse", "HEAD")
    (sub / "helper.py").write_text("VERSION = 'v2'\n")
    _git(sub, "commit", "-qam", "v2")
    top = tmp_path / "top"
    (top / "tests").mkdir(parents=True)
    (top / "setup.py").write_text("import helpers.helper\n")
    (top / "tests" / "test_calc.py").write_text("def test_one():\n    assert True\n")
    (top / ".gitmodules").write_text(f'[submodule "helpers"]\n\tpath = helpers\n\turl = {url}\n')
    _git(top, "init", "-q")
    _git(top, "add", "-A")
    _git(top, "update-index", "--add", "--cacheinfo", f"160000,{first},helpers")  # the gitlink, no network
    _git(top, "commit", "-qm", "base")
    mirrors = tmp_path / "m"
    _git(tmp_path, "clone", "-q", "--bare", str(top), str(mirrors / "me+calc" / "repo"))
    if with_sub:
        _git(tmp_path, "clone", "-q", "--bare", str(sub), str(mirrors / "helpers-org+helpers" / "repo"))
    return mirrors, _git(top, "rev-parse", "HEAD")


def _record(commit):
    return {"instance_id": "me__calc-1", "repo": "me/calc", "version": "1", "base_commit": commit,
            "environment_setup_commit": commit, "problem_statement": "x", "test_patch": TEST_PATCH,
            "FAIL_TO_PASS": ["tests/test_calc.py::test_one"]}


def test_the_judged_tree_holds_the_submodule_at_its_recorded_commit(tmp_path):
    mirrors, commit = _mirrors(tmp_path)
    task = from_swebench(_record(commit), "x", str(mirrors))
    base = materialize(task, tmp_path / "base")
    assert (base / "helpers" / "helper.py").read_text() == "VERSION = 'v1'\n"  # its gitlink's commit, not v2
    assert not (base / "helpers" / ".git").exists()


def test_a_task_without_mirrors_keeps_the_empty_directory_git_archive_gives(tmp_path):
    mirrors, commit = _mirrors(tmp_path)
    base = materialize(RepoTask("t", "x", repo_dir=str(mirrors / "me+calc" / "repo"), commit=commit),
                       tmp_path / "base")
    assert (base / "setup.py").is_file() and not (base / "helpers" / "helper.py").exists()


def test_a_submodule_without_a_mirror_is_one_line_naming_it(tmp_path):
    mirrors, commit = _mirrors(tmp_path, with_sub=False)
    task = from_swebench(_record(commit), "x", str(mirrors))
    with pytest.raises(TaskFormatError, match=r"submodule helpers at \w+: no git mirror of helpers-org/helpers"):
        materialize(task, tmp_path / "base")


def test_the_environment_build_installs_with_the_submodule_filled(tmp_path, monkeypatch):
    from codechat.verifier import swebench_env
    mirrors, commit = _mirrors(tmp_path)
    spec = {"python": f"{sys.version_info[0]}.{sys.version_info[1]}", "test_cmd": "pytest -rA",
            "install": "cat helpers/helper.py > installed_with.txt"}
    monkeypatch.setattr(swebench_env, "spec_for", lambda repo, version: dict(spec))
    env = swebench_env.build_swebench_env("me/calc", "1", [_record(commit)], mirrors, tmp_path / "envs",
                                          log=lambda *_: None, as_of="none")
    manifest = json.loads((Path(env.dir) / "manifest.json").read_text())
    assert (Path(env.dir) / "overlay" / "installed_with.txt").read_text() == "VERSION = 'v1'\n"
    assert manifest["submodules"] == {commit: ["helpers"]}
    assert manifest["overlay"] == ["installed_with.txt"]  # the submodule's files are the tree's, not the overlay's


def test_a_relative_submodule_url_is_read_against_the_superprojects_name(tmp_path):
    mirrors, commit = _mirrors(tmp_path, url="../../helpers-org/helpers.git")
    base = materialize(from_swebench(_record(commit), "x", str(mirrors)), tmp_path / "base")
    assert (base / "helpers" / "helper.py").is_file()


@pytest.mark.parametrize("url, want", [
    ("https://github.com/astropy/astropy-helpers.git", "astropy/astropy-helpers"),
    ("git://github.com/astropy/astropy-helpers", "astropy/astropy-helpers"),
    ("git@github.com:astropy/astropy-helpers.git", "astropy/astropy-helpers"),
    ("ssh://git@github.com/astropy/astropy-helpers/", "astropy/astropy-helpers"),
    ("../astropy-helpers.git", "astropy/astropy-helpers"),
    ("../../../../etc/passwd", None),
    ("https://github.com/../etc", None),
    ("https://github.com/x", None),
])
def test_submodule_urls_name_a_mirror_and_never_a_path_out_of_the_mirrors(url, want):
    assert url_repo(url, "astropy/astropy") == want


def test_attack_url_leaving_the_mirrors_directory_is_refused(tmp_path):
    mirrors, commit = _mirrors(tmp_path, url="../../../../../../tmp")
    with pytest.raises(TaskFormatError, match="names no owner/name"):
        materialize(from_swebench(_record(commit), "x", str(mirrors)), tmp_path / "base")


def test_attack_a_submodule_path_through_a_link_out_of_the_tree_is_refused(tmp_path):
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (tree / "helpers").symlink_to(outside)
    for path in ("helpers", "helpers/inner", "../outside", ".git/hooks", "/abs"):
        with pytest.raises(SubmoduleError):
            _safe_dir(tree, path)
    mirrors, commit = _mirrors(tmp_path)
    with pytest.raises(SubmoduleError, match="symbolic link"):
        fill_submodules(mirrors / "me+calc" / "repo", commit, tree, mirrors, "me/calc")
    assert list(outside.iterdir()) == []


MIRRORS = Path(os.environ.get("CODECHAT_MIRRORS", "/work/.mirror"))


@pytest.mark.parametrize("instance", ["astropy__astropy-6938", "astropy__astropy-7746"])
def test_real_astropy_1_3_base_holds_astropy_helpers(shared_data, tmp_path, instance):
    recs = {r["instance_id"]: r for r in json.loads((shared_data / "repo" / "swe-bench-lite-test.json").read_text())}
    for name in ("astropy+astropy", "astropy+astropy-helpers"):
        if not (MIRRORS / name / "repo").is_dir():
            pytest.skip(f"no mirror {name} under {MIRRORS}")
    task = from_swebench(recs[instance], instance, str(MIRRORS))
    base = materialize(task, tmp_path / "base")
    assert (base / "astropy_helpers" / "astropy_helpers" / "setup_helpers.py").is_file()
    assert (base / "ah_bootstrap.py").is_file()
