"""Data files a repository's tests download at test time (pydicom's DICOM files from pydicom/pydicom-data), taken
from a git mirror at build time, checked against the tree's hash table, and found by each sandboxed test run in
its home directory, where the download would have put them; and the pytest of a build's date on an interpreter
too old for a dated pip."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codechat.sandbox.suite_runner import link_home
from codechat.tasks.repo import RepoTask
from codechat.verifier import swebench_probe
from codechat.verifier.repo import RepoJudge
from codechat.verifier.repo_env import EnvError, TestEnv, parse_env
from codechat.verifier.swebench_data import fill_test_data
from codechat.verifier.swebench_probe import date_runner
from codechat.verifier.swebench_spec import RUNNER_FILES
from tests.test_swebench_envs import RUNTESTS

MIRRORS = Path(os.environ.get("CODECHAT_MIRRORS", "/work/.mirror"))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def _commit(repo: Path, files: dict[str, bytes]) -> str:
    repo.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").exists():
        _git(repo, "init", "-q")
    for path, data in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    return _git(repo, "rev-parse", "HEAD")


def _pydicom_like(tmp_path: Path, with_data_mirror: bool = True) -> tuple[Path, str]:
    """A mirrors directory holding a pydicom-like tree whose urls.json names three files of a data repository:
    one as its hash table says, one whose contents differ from its hash, one at a path the data commit lacks."""
    mirrors = tmp_path / "mirrors"
    data = _commit(mirrors / "pydicom__pydicom-data", {"data/a.dcm": b"A" * 10, "data/b.dcm": b"B"}) \
        if with_data_mirror else "0" * 40
    raw = f"https://github.com/pydicom/pydicom-data/raw/{data}/data"
    urls = {"a.dcm": f"{raw}/a.dcm", "b.dcm": f"{raw}/b.dcm", "gone.dcm": f"{raw}/gone.dcm"}
    hashes = {"a.dcm": hashlib.sha256(b"A" * 10).hexdigest(), "b.dcm": hashlib.sha256(b"not B").hexdigest()}
    commit = _commit(mirrors / "pydicom__pydicom", {"pydicom/data/urls.json": json.dumps(urls).encode(),
                                                      "pydicom/data/hashes.json": json.dumps(hashes).encode()})
    return mirrors, commit


def test_the_files_the_tests_download_come_from_the_data_mirror_checked_against_the_tree_s_hashes(tmp_path):
    mirrors, commit = _pydicom_like(tmp_path)
    out = fill_test_data("pydicom/pydicom", mirrors / "pydicom__pydicom", [commit], mirrors, tmp_path / "env",
                         log=lambda *_: None)
    assert out == {"home": "home", "files": 1, "absent": ["gone.dcm"], "hash_differs": ["b.dcm"], "no_mirror": []}
    data = tmp_path / "env" / "home" / ".pydicom" / "data"
    assert sorted(os.listdir(data)) == ["a.dcm"] and (data / "a.dcm").read_bytes() == b"A" * 10
    # a repository whose tests download nothing gets no home
    assert fill_test_data("pallets/flask", mirrors / "pydicom__pydicom", [commit], mirrors, tmp_path / "e2") == {}


def test_without_a_data_mirror_the_build_names_the_missing_one(tmp_path):
    mirrors, commit = _pydicom_like(tmp_path, with_data_mirror=False)
    said = []
    out = fill_test_data("pydicom/pydicom", mirrors / "pydicom__pydicom", [commit], mirrors, tmp_path / "env",
                         log=said.append)
    assert out["files"] == 0 and out["no_mirror"] == ["pydicom/pydicom-data"] and len(out["absent"]) == 3
    assert "no mirror of pydicom/pydicom-data" in said[0]


@pytest.mark.skipif(not (MIRRORS / "pydicom+pydicom-data" / "repo").is_dir()
                    or not (MIRRORS / "pydicom+pydicom" / "repo").is_dir(), reason="no pydicom mirrors here")
def test_real_pydicom_2_2_data_files_from_the_fetched_mirror(tmp_path):
    # pydicom 2.2's environment commit names 68 files at two pydicom-data commits; the fetched snapshot lacks the
    # contents of the six over about 3.5 MB, and every file it holds matches pydicom's own SHA-256 table
    out = fill_test_data("pydicom/pydicom", MIRRORS / "pydicom+pydicom" / "repo",
                         ["0fa18d2a2179c92efc22200ed6b3689e66cecf92"], MIRRORS, tmp_path, log=lambda *_: None)
    assert out["files"] == 62 and out["hash_differs"] == [] and sorted(out["absent"]) == [
        "RG1_J2KR.dcm", "RG1_UNCI.dcm", "RG1_UNCR.dcm", "RG3_UNCI.dcm", "RG3_UNCR.dcm", "color3d_jpeg_baseline.dcm"]
    assert (tmp_path / "home" / ".pydicom" / "data" / "emri_small_big_endian.dcm").is_file()


def test_the_run_s_home_links_the_files_and_keeps_what_is_there(tmp_path):
    src, home = tmp_path / "src", tmp_path / "home"
    (src / ".pydicom" / "data").mkdir(parents=True)
    (src / ".pydicom" / "data" / "a.dcm").write_bytes(b"A")
    (src / ".pydicom" / "data" / "b.dcm").write_bytes(b"B")
    (home / ".pydicom" / "data").mkdir(parents=True)
    (home / ".pydicom" / "data" / "b.dcm").write_bytes(b"own")
    assert link_home(str(src), str(home)) == 1
    assert (home / ".pydicom" / "data" / "a.dcm").read_bytes() == b"A"
    assert (home / ".pydicom" / "data" / "b.dcm").read_bytes() == b"own"
    (home / ".pydicom" / "data" / "a.dcm").unlink()  # a test may delete one (to download it again)
    assert (src / ".pydicom" / "data" / "a.dcm").is_file()


def test_home_must_lie_inside_the_environment():
    assert parse_env({"repo": "a/b", "version": "1", "home": "home"}, "x").home == "home"
    for bad in ("/etc", "../x", "home/../../x"):
        with pytest.raises(EnvError, match="'home' must be a directory inside the environment"):
            parse_env({"repo": "a/b", "version": "1", "home": bad}, "x")


TEST_PATCH = """diff --git a/tests/app/tests.py b/tests/app/tests.py
new file mode 100644
--- /dev/null
+++ b/tests/app/tests.py
@@ -0,0 +1,8 @@
+import os
+import unittest
+from reader import size
+
+
+class T(unittest.TestCase):
+    def test_size(self):
+        self.assertEqual(size(os.path.expanduser("~/.pydicom/data/a.dcm")), 10)
"""


def test_a_sandboxed_test_run_finds_the_downloaded_files_in_its_home(tmp_path):
    # a venv of codechat's base interpreter, with a home of one data file; the django-style runner reads it
    venv = tmp_path / "env"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True)
    (venv / "home" / ".pydicom" / "data").mkdir(parents=True)
    (venv / "home" / ".pydicom" / "data" / "a.dcm").write_bytes(b"A" * 10)
    task = RepoTask("pydicom__fixture-1", "size() must count bytes",
                    {"reader.py": "def size(p):\n    return 0\n", "tests/runtests.py": RUNTESTS,
                     "tests/app/__init__.py": ""}, test_patch=TEST_PATCH,
                    fail_to_pass=["test_size (app.tests.T.test_size)"],
                    metadata={"repo": "django/django", "version": "9"})
    fix = {"reader.py": "import os\n\n\ndef size(p):\n    return os.path.getsize(p)\n"}
    verdicts = {}
    for home in ("home", ""):
        env = TestEnv("django/django", "9", runner="swebench", test_cmd="./tests/runtests.py --verbose",
                      protected=RUNNER_FILES["unittest"], dir=str(venv), home=home)
        with RepoJudge(envs={env.key: env}) as judge:
            verdicts[home] = judge.judge(task, fix)
    assert verdicts["home"].passed, verdicts["home"].message
    assert not verdicts[""].passed  # without the environment's home the file is not there


def test_the_pytest_of_the_build_s_date_is_installed_pinned_unless_the_spec_pins_one(tmp_path, monkeypatch):
    asked, ran = [], []
    monkeypatch.setattr(swebench_probe, "dated_version",
                        lambda line, py, date: asked.append((line, py, date)) or "6.0.2")
    spec = {"python": "3.8", "packages": "numpy", "pip_packages": ["pytest"], "test_cmd": "pytest -rA"}
    out = date_runner(spec, tmp_path, "2020-09-22T03:16:19Z", lambda cmd: ran.append(cmd) or True,
                      log=lambda *_: None)
    assert out == {"as_of": "2020-09-22T03:16:19Z", "version": "6.0.2"}
    assert asked == [("pytest", "3.8", "2020-09-22T03:16:19Z")] and ran == ["python -m pip install -q pytest==6.0.2"]
    ran.clear()
    assert date_runner({**spec, "pip_packages": ["pytest==3.3.1"]}, tmp_path, "2017-01-01", ran.append) == {}
    assert date_runner({**spec, "python": "3.6"}, tmp_path, "2019-01-01", ran.append) == {}  # capped below 7 there
    assert ran == []
    monkeypatch.setattr(swebench_probe, "dated_version", lambda *a: None)  # codechat's pip cannot tell: kept
    assert date_runner(spec, tmp_path, "2020-09-22", ran.append, log=lambda *_: None)["unavailable"] and ran == []


def test_codechat_s_pip_names_the_pytest_of_a_date_for_an_older_interpreter():
    # asks the package index: skipped where it cannot be reached
    got = swebench_probe.dated_version("pytest", "3.8", "2020-09-22T03:16:19Z", timeout_s=120)
    if got is None:
        pytest.skip("the package index cannot be reached (or codechat's pip has no --uploaded-prior-to)")
    assert got == "6.0.2"  # pydicom 2.0's records' date; pytest 6.1.0 came out on 2020-09-26


def test_the_bench_reads_record_test_ids_as_json_text_or_as_lists():
    # Lite stores FAIL_TO_PASS as JSON text, the dev records (pydicom's among them) as a list
    from tests.test_swebench_build import _bench
    bench = _bench()
    ids = ["a.py::test_x", "a.py::test_y"]
    assert bench.record_ids({"instance_id": "i", "FAIL_TO_PASS": json.dumps(ids)}, "FAIL_TO_PASS") == ids
    assert bench.record_ids({"instance_id": "i", "FAIL_TO_PASS": ids}, "FAIL_TO_PASS") == ids
    env = TestEnv("a/b", "1", offline_skip={"a.py::test_y": "needs the internet"})
    rec = {"instance_id": "i", "repo": "a/b", "version": "1", "FAIL_TO_PASS": ids}
    assert "1 of 2 FAIL_TO_PASS tests are marked offline_skip" in bench.skip_reason(rec, {env.key: env})
