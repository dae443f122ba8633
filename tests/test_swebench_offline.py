"""Tests that need the internet in environments built from the official SWE-bench specs: the specs do not say
which (the harness's containers had a network, the sandbox has none), `repo env build --offline-skip FILE` gives
them as `offline_skip` marks kept in env.json; an instance one of whose FAIL_TO_PASS tests is marked is not judged,
a marked PASS_TO_PASS test is left out of the judgement; `bench/swebench_offline_marks.py` finds the marks from the
gold runs' network errors."""
import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codechat.cli import main
from codechat.verifier.repo import RepoJudge
from codechat.tasks.repo import RepoTask
from codechat.verifier.repo_env import TestEnv, load_envs
from codechat.verifier.repo_suite import machine_path_reason, machine_paths
from codechat.verifier.swebench_spec import RUNNER_FILES
from tests.test_swebench_build import _bench
from tests.test_swebench_envs import F2P, FIX, P2P, _mirror, _task

pytest.importorskip("swebench", reason="the optional swebench package (pip install codechat[swebench])")

NETWORK_P2P = "test_remote (app.tests.T.test_remote)"
REMOTE = "+\n+    def test_remote(self):\n+        raise ConnectionError('httpbin.org: Name or service not known')\n"


def _judge(change, offline_skip: dict):
    task = _task()
    task.test_patch = task.test_patch.replace("@@ -0,0 +1,10 @@", "@@ -0,0 +1,13 @@") + REMOTE
    task.pass_to_pass = [P2P, NETWORK_P2P]
    env = TestEnv("django/django", "9.9", runner="swebench", test_cmd="./tests/runtests.py --verbose",
                  protected=RUNNER_FILES["unittest"], offline_skip=offline_skip, dir=sys.prefix)
    with RepoJudge(envs={env.key: env}) as judge:
        return judge.judge(task, change)


def test_a_pass_to_pass_test_needing_the_internet_is_left_out_when_marked():
    v = _judge(FIX, {})
    assert not v.passed and NETWORK_P2P in v.pass_to_pass["failed"], v.message + v.output_tail
    v = _judge(FIX, {NETWORK_P2P: "calls httpbin.org"})
    assert v.passed, v.message + v.output_tail
    assert v.pass_to_pass["passed"] == [P2P] and any("calls httpbin.org" in w for w in v.warnings)
    assert not _judge({}, {NETWORK_P2P: "calls httpbin.org"}).passed


def test_an_instance_whose_fail_to_pass_needs_the_internet_is_not_judged():
    v = _judge(FIX, {F2P: "calls httpbin.org"})
    assert v.status == "env_error" and "1 of 1 FAIL_TO_PASS tests are marked offline_skip (calls httpbin.org)" \
        in v.message


def _build(tmp_path, monkeypatch, *extra):
    from codechat.verifier import swebench_env
    if not (tmp_path / "m").is_dir():
        _mirror(tmp_path)
    mirrors = tmp_path / "m"
    new = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path / "work", capture_output=True,
                         text=True).stdout.strip()
    monkeypatch.setattr(swebench_env, "spec_for", lambda repo, version: {
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}", "test_cmd": "pytest -rA"})
    recs = tmp_path / "recs.json"
    recs.write_text(json.dumps([{"instance_id": "me__calc-1", "repo": "me/calc", "version": "1", "base_commit": new,
                                 "environment_setup_commit": new}]))
    return main(["repo", "env", "build", str(recs), "--mirrors", str(mirrors), "--out", str(tmp_path / "envs"),
                 "--as-of", "none", *extra])


def test_build_keeps_the_marks_of_each_version_in_env_json_and_keep_replaces_them(tmp_path, monkeypatch, capsys):
    marks = tmp_path / "marks.json"
    # an environment spec serves: its other fields are not used; a version without records is named
    marks.write_text(json.dumps([
        {"repo": "me/calc", "version": "1", "python": "3.9", "requirements": ["pytest"],
         "offline_skip": {"tests/test_calc.py::test_get": "calls httpbin.org"}},
        {"repo": "me/calc", "version": "1.0", "offline_skip": {"tests/test_calc.py::test_x": "calls httpbin.org"}},
        {"repo": "other/repo", "version": "2", "offline_skip": {"t.py::t": "calls httpbin.org"}}]))
    assert _build(tmp_path, monkeypatch, "--offline-skip", str(marks)) == 0
    assert "me/calc@1.0: no records of this version" in capsys.readouterr().err
    env = load_envs(tmp_path / "envs")["me/calc@1"]
    assert env.offline_skip == {"tests/test_calc.py::test_get": "calls httpbin.org"}
    assert json.loads((tmp_path / "envs" / "me__calc-1" / "manifest.json").read_text())["offline_skip"] == 1
    marks.write_text(json.dumps([{"repo": "me/calc", "version": "1", "offline_skip": {"a.py::b": "calls x.org"}}]))
    assert _build(tmp_path, monkeypatch, "--offline-skip", str(marks), "--keep") == 0
    assert load_envs(tmp_path / "envs")["me/calc@1"].offline_skip == {"a.py::b": "calls x.org"}


def test_a_bad_marks_file_is_named_before_anything_is_built(tmp_path, monkeypatch, capsys):
    marks = tmp_path / "marks.json"
    marks.write_text(json.dumps([{"repo": "me/calc", "version": "1", "offline_skip": ["a.py::b"]}]))
    assert _build(tmp_path, monkeypatch, "--offline-skip", str(marks)) == 2
    assert f"--offline-skip: {marks}[0]: 'offline_skip' must map test ids to reasons" in capsys.readouterr().err
    assert not (tmp_path / "envs").exists()


def test_the_bench_lists_skipped_instances_with_their_reason_and_judges_the_others(tmp_path):
    bench = _bench()
    (tmp_path / "envs" / "o__r-1").mkdir(parents=True)
    (tmp_path / "envs" / "o__r-1" / "env.json").write_text(json.dumps(
        {"repo": "o/r", "version": "1", "runner": "swebench", "offline_skip": {"t.py::a": "calls httpbin.org"}}))
    recs = [{"instance_id": f"o__r-{i}", "repo": "o/r", "version": "1", "FAIL_TO_PASS": json.dumps([f2p])}
            for i, f2p in ((1, "t.py::a"), (2, "t.py::b"))]
    out = tmp_path / "results.jsonl"
    fig = bench.run_all(recs, str(tmp_path / "envs"), str(tmp_path / "no-mirrors"), 0, str(out), None)
    assert fig["skipped"] == 1 and fig["repos"]["o/r"]["skipped"] == {
        "o__r-1": "1 of 1 FAIL_TO_PASS tests are marked offline_skip (calls httpbin.org): the instance cannot be "
                  "judged offline"}
    # the other is judged (here its tree cannot load: no mirror), and only it counts as an instance
    assert fig["instances"] == 1 and "o__r-2" in fig["repos"]["o/r"]["not_resolved"]
    assert [json.loads(l)["kind"] for l in out.read_text().splitlines()] == ["skipped", "gold"]


MACHINE_P2P = ("pydicom/tests/test_x.py::test_read[/n/fs/p-swe-bench/temp/tmpq/pydicom__pydicom__2.2/pydicom/data/"
               "test_files/a.dcm-data0]")


def test_ids_naming_files_of_the_record_s_machine_are_caught_where_the_repository_s_parser_renames_them():
    # pydicom's parser names `[/any/abs/path/a.dcm-data0]` `[/a.dcm-data0]`: no log ever holds the record's id
    assert machine_paths("pydicom/pydicom", ["a.py::t", MACHINE_P2P]) == [
        (MACHINE_P2P, "/n/fs/p-swe-bench/temp/tmpq/pydicom__pydicom__2.2/pydicom/data/test_files/a.dcm-data0")]
    # the same literal in pytest's own ids is a test parameter that its parser keeps
    literal = "testing/test_a.py::test_cache_dir[/tmp/pycs-/home/projects/src/foo.py-/tmp/pycs/home/projects/src]"
    assert machine_paths("pytest-dev/pytest", [literal]) == []
    # a one-part path is the parser's own name (pylint's `test_stdin[/mymodule.py]`); a repository the parsers do
    # not know, or a relative path, is never caught
    assert machine_paths("pylint-dev/pylint", ["tests/test_self.py::TestRunTC::test_stdin[/mymodule.py]"]) == []
    assert machine_paths("me/own", [MACHINE_P2P]) == []
    assert machine_paths("pydicom/pydicom", ["a.py::t[n/fs/a/b/c.dcm]", "a.py::t[http://example.com/a/b/c]"]) == []
    two = MACHINE_P2P.replace("data0]", "data1]").replace("/n/fs/p-swe-bench/temp/tmpq/pydicom__pydicom__2.2/pydicom",
                                                          "/home/u/.pydicom")
    assert machine_path_reason("pydicom/pydicom", [MACHINE_P2P], [two, "a.py::t"]) == (
        "1 of its FAIL_TO_PASS ids and 1 of its PASS_TO_PASS ids name files under /n/fs/p-swe-bench/temp/tmpq/"
        "pydicom__pydicom__2.2 and 1 other directory (the machine the record was made on): no environment can run "
        "them")
    # a record's ids are its author's text: the reason stays one short line
    assert len(machine_path_reason("pydicom/pydicom", [], ["a.py::t[" + "/a" * 100000 + "]"])) < 400


ID_PARTS = st.lists(st.sampled_from(list("ab/[]-: \n\t()=,'\".x0_\x00\u2028") + [
    "::", " - ", "[/", "/n/fs/x/y", "PASSED ", "FAILED"]), max_size=20).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(repo=st.sampled_from(["immutable-js/immutable-js", "pydicom/pydicom", "django/django", "", "__class__"]),
       a=ID_PARTS, b=ID_PARTS)
def test_any_record_text_and_repository_name_gives_a_reason_or_none(repo, a, b):
    # a record names any repository (some parsers need the test spec, not just a log line) and any id text
    why = machine_path_reason(repo, ["t.py::x[/" + a], [b, "q.py::y[" + b + "-/" + a + "]"])
    assert why is None or (why.endswith("no environment can run them") and len(why) < 700)


def test_the_judge_answers_env_error_for_an_instance_whose_ids_no_run_names():
    task = RepoTask("pydicom__pydicom-1", "", files={"pydicom/a.py": "x = 1\n"}, fail_to_pass=["a.py::t"],
                    pass_to_pass=[MACHINE_P2P], metadata={"repo": "pydicom/pydicom"})
    with RepoJudge() as judge:
        v = judge.judge(task, {"pydicom/a.py": "x = 2\n"})
    assert v.status == "env_error" and not v.passed and v.env == "codechat"
    assert v.message.startswith("1 of its PASS_TO_PASS ids name files under /n/fs/p-swe-bench/temp/tmpq/"
                                "pydicom__pydicom__2.2 (the machine the record was made on)"), v.message


def test_real_records_skip_pydicom_1458_only(shared_data, tmp_path):
    dev = json.loads((shared_data / "repo" / "sweagent_swe-bench-dev-easy.json").read_text())
    lite = json.loads((shared_data / "repo" / "swe-bench-lite-test.json").read_text())
    bench, by_id = _bench(), {r["instance_id"]: r for r in dev + lite}
    why = ("44 of its PASS_TO_PASS ids name files under /n/fs/p-swe-bench/temp/tmpqcg17m39/pydicom__pydicom__2.2 and "
           "1 other directory (the machine the record was made on): no environment can run them")
    assert bench.skip_reason(by_id["pydicom__pydicom-1458"], {}) == why
    # pylint 7080's `test_stdin[/mymodule.py]` is its parser's own name; 1194's ids hold no path
    assert bench.skip_reason(by_id["pylint-dev__pylint-7080"], {}) is None
    assert bench.skip_reason(by_id["pydicom__pydicom-1194"], {}) is None
    assert [r["instance_id"] for r in dev + lite if bench.skip_reason(r, {})] == ["pydicom__pydicom-1458"]
    (tmp_path / "envs" / "pydicom__pydicom-2.2").mkdir(parents=True)
    (tmp_path / "envs" / "pydicom__pydicom-2.2" / "env.json").write_text(json.dumps(
        {"repo": "pydicom/pydicom", "version": "2.2", "runner": "swebench"}))
    fig = bench.run_all(dev, str(tmp_path / "envs"), str(tmp_path / "no-mirrors"), 0, None, None)
    assert fig["instances"] == 0 and fig["repos"]["pydicom/pydicom"]["skipped"] == {"pydicom__pydicom-1458": why}


GOLD = "diff --git a/r.py b/r.py\n--- a/r.py\n+++ b/r.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
OUTPUT = """=================================== FAILURES ===================================
_______________________ RequestsTestCase.test_HTTP_200_OK ______________________
    def test_HTTP_200_OK(self):
>       r = requests.get(httpbin('get'))
E       requests.exceptions.ConnectionError: HTTPConnectionPool(host='httpbin.org', port=80): Max retries exceeded
E       socket.gaierror: [Errno -2] Name or service not known
__ RequestsTestCase.test_accept_objects_with_a_very_long_name_that_fills_the_line __
E       socket.gaierror: [Errno -3] Temporary failure in name resolution
__________________________ RequestsTestCase.test_bug ___________________________
E       AssertionError: assert 'a' == 'b'
=========================== short test summary info ============================
"""


def _log(root, instance, n, patch, failed):
    d = root / instance / str(n)
    d.mkdir(parents=True)
    (d / "patch.diff").write_text(patch)
    (d / "test_output.txt").write_text(OUTPUT)
    (d / "report.json").write_text(json.dumps({"fail_to_pass": {"failed": failed[:1], "unknown": []},
                                               "pass_to_pass": {"failed": failed[1:], "unknown": []}}))


def test_marks_are_the_record_tests_whose_gold_run_fails_with_a_network_error(tmp_path):
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("marks", Path(__file__).parents[1] / "bench" /
                                                  "swebench_offline_marks.py")
    marks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(marks)
    ids = [f"test_requests.py::RequestsTestCase::{n}" for n in
           ("test_HTTP_200_OK", "test_accept_objects_with_a_very_long_name_that_fills_the_line", "test_bug")]
    recs = [{"instance_id": "psf__requests-1", "repo": "psf/requests", "version": "2.3", "patch": GOLD}]
    _log(tmp_path, "psf__requests-1", 1, GOLD, ids)
    _log(tmp_path, "psf__requests-1", 2, "", ids + ["test_requests.py::T::test_only_in_the_empty_run"])
    found, other = marks.find_marks(tmp_path, recs)
    # the gold judgement only (not the empty one); a failure that is the code's, not the network's, is not marked
    assert sorted(found["psf/requests@2.3"]) == ids[:2] and other == {"psf/requests@2.3": 1}
    assert found["psf/requests@2.3"][ids[1]] == ("needs the internet (socket.gaierror: [Errno -3] Temporary failure "
                                                 "in name resolution; the sandbox has no network)")
    given = tmp_path / "given.json"
    given.write_text(json.dumps([{"repo": "psf/requests", "version": "2.3", "offline_skip": {ids[0]: "calls httpbin"}},
                                 {"repo": "pallets/flask", "version": "2.0", "python": "3.9"}]))
    out = marks.merged(found, str(given))
    assert out == [{"repo": "psf/requests", "version": "2.3",
                    "offline_skip": {ids[0]: "calls httpbin", ids[1]: found["psf/requests@2.3"][ids[1]]}}]
