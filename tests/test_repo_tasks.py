"""Repository tasks: the JSONL schema, the loaders (SWE-bench records, QuixBugs), and the generated family."""
import json
import random
import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from codechat import CodechatError
from codechat.tasks.model import TaskFormatError
from codechat.tasks.repo import RepoTask, materialize, parse_repo_task, save_repo_tasks
from codechat.tasks.repo_family import HELDOUT_PAIRS, generate_repo_tasks, pairs
from codechat.tasks.repo_family.units import BUG_KINDS, UNITS
from codechat.tasks.repo_loaders import is_repo_spec, load_repo_tasks, quixbugs_test

GOOD = {"kind": "repo", "task_id": "t1", "problem": "fix it", "files": {"a.py": "x = 1\n"},
        "hidden_tests": {"tests/test_a.py": "from a import x\n\ndef test_x():\n    assert x == 2\n"}}


def test_jsonl_round_trip(tmp_path):
    t = parse_repo_task(dict(GOOD, limits={"max_turns": 3}, solution={"a.py": "x = 2\n"}), "f:1")
    assert t.limits.max_turns == 3 and t.solution == {"a.py": "x = 2\n"} and t.is_protected("tests/test_a.py")
    save_repo_tasks([t], tmp_path / "r.jsonl")
    assert is_repo_spec(str(tmp_path / "r.jsonl"))
    (back,) = load_repo_tasks(str(tmp_path / "r.jsonl"))
    assert back.files == t.files and back.hidden_tests == t.hidden_tests and back.limits == t.limits
    assert back.solution == t.solution


@pytest.mark.parametrize("change, needle", [
    ({"problem": ""}, "'problem'"), ({"files": {"../x.py": "1"}}, "'..'"), ({"files": {"/etc/x": "1"}}, "relative"),
    ({"repo_dir": "/x"}, "exactly one"), ({"hidden_tests": {}}, "hidden_tests"),
    ({"limits": {"max_turns": 0}}, "max_turns"), ({"limits": {"turns": 3}}, "unknown limit"),
    ({"protected": 3}, "protected"), ({"files": {"a.py": 1}}, "'files'")])
def test_bad_fields_name_themselves(change, needle):
    with pytest.raises(TaskFormatError, match=needle):
        parse_repo_task(dict(GOOD, **change), "tasks.jsonl:7")


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(list(GOOD) + ["limits", "protected", "repo_dir", "commit", "visible_tests",
                                                     "test_patch", "solution", "metadata"]),
                       st.one_of(st.none(), st.integers(), st.text(max_size=5),
                                 st.dictionaries(st.text(max_size=6), st.one_of(st.text(max_size=4), st.integers()),
                                                 max_size=2), st.lists(st.text(max_size=4), max_size=2))))
def test_fuzz_records_fail_cleanly(rec):
    try:
        t = parse_repo_task(rec, "x:1")
    except TaskFormatError as e:
        assert str(e).startswith("x:1: ")
        return
    assert isinstance(t, RepoTask) and (t.files or t.repo_dir)


def test_quixbugs_loads_and_reference_differs(shared_data):
    tasks = load_repo_tasks(str(shared_data / "repo" / "quixbugs"))
    assert len(tasks) == 40 and is_repo_spec(str(shared_data / "repo" / "quixbugs"))
    for t in tasks:
        assert t.solution and all(t.files[p] != s for p, s in t.solution.items())
        test_src = t.hidden_tests[t.visible_tests[0]]
        assert "use_correct" not in test_src and "correct_python_programs" not in test_src


def test_quixbugs_switch_rewrite():
    src = ("import pytest\nif pytest.use_correct:\n    from correct_python_programs.x import x\nelse:\n"
           "    from python_programs.x import x\n\nif not pytest.run_slow:\n    pytest.skip(\"slow\")\n")
    assert quixbugs_test(src) == ("import pytest\nfrom python_programs.x import x\n\nif not False:\n"
                                  "    return  # slow case, not run: \"slow\"\n")


def test_swebench_needs_repos_on_disk(shared_data, tmp_path):
    path = str(shared_data / "repo" / "swe-bench-lite-test.json")
    assert is_repo_spec(path)
    with pytest.raises(CodechatError, match="--repos"):
        load_repo_tasks(path)
    with pytest.raises(CodechatError, match="repository django/django not found under .*nothing is downloaded"):
        load_repo_tasks(path, repos=str(tmp_path))


def test_swebench_record_against_a_local_git_checkout(tmp_path):
    repo = tmp_path / "repos" / "acme__lib"
    repo.mkdir(parents=True)
    (repo / "lib.py").write_text("def f():\n    return 1\n")
    # a test's image and a file in another encoding reach the tests byte for byte
    png, latin = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "caf\xe9 >>\xbb<<\n".encode("latin-1")
    (repo / "img.png").write_bytes(png)
    (repo / "undecodable.rst").write_bytes(latin)
    git = ["git", "-C", str(repo), "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "base"], check=True)
    commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    (repo / "lib.py").write_text("changed after the base commit\n")
    rec = {"repo": "acme/lib", "instance_id": "acme__lib-1", "problem_statement": "f should return 2",
           "base_commit": commit, "test_patch": "--- /dev/null\n+++ b/test_lib.py\n@@ -0,0 +1,2 @@\n"
           "+from lib import f\n+def test_f(): assert f() == 2\n", "FAIL_TO_PASS": '["test_lib.py::test_f"]',
           "PASS_TO_PASS": "[]"}
    (tmp_path / "recs.json").write_text(json.dumps([rec]))
    (t,) = load_repo_tasks(str(tmp_path / "recs.json"), repos=str(tmp_path / "repos"))
    assert t.fail_to_pass == ["test_lib.py::test_f"] and t.commit == commit
    base = materialize(t, tmp_path / "base")
    assert (base / "lib.py").read_text() == "def f():\n    return 1\n" and not (base / ".git").exists()
    assert (base / "img.png").read_bytes() == png and (base / "undecodable.rst").read_bytes() == latin


def _run(module_src: str, asserts: list[str], pkg_mod: str) -> list[bool]:
    ns: dict = {}
    exec(module_src, ns)
    out = []
    for a in asserts:
        try:
            exec(a, dict(ns))
            out.append(True)
        except Exception:  # noqa: BLE001
            out.append(False)
    return out


@pytest.mark.parametrize("name", sorted(UNITS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_unit_visible_holds_hidden_catches(name, seed):
    u = UNITS[name](random.Random(seed))
    assert u.bugs and set(u.bugs) <= set(BUG_KINDS)
    assert all(_run(u.correct, u.visible, name)), "visible tests must pass on the correct code"
    for bug, src in u.bugs.items():
        assert all(_run(src, u.visible, name)), f"{bug}: visible tests must pass on the buggy code"
        assert all(_run(u.correct, u.hidden[bug], name)), f"{bug}: hidden tests must pass on the fix"
        assert not any(_run(src, u.hidden[bug], name)), f"{bug}: every hidden test must catch the bug"


def test_family_splits_differ_by_composition_and_are_seeded():
    train, held = generate_repo_tasks("train", 40, seed=3), generate_repo_tasks("heldout", 20, seed=3)
    pt = {(t.metadata["unit"], t.metadata["bug"]) for t in train}
    ph = {(t.metadata["unit"], t.metadata["bug"]) for t in held}
    assert not pt & ph and ph == HELDOUT_PAIRS and pt == set(pairs("train"))
    assert {b for _, b in pt} == {b for _, b in ph} == set(BUG_KINDS)
    again = generate_repo_tasks("train", 40, seed=3)
    assert [t.files for t in again] == [t.files for t in train]
    assert [t.files for t in generate_repo_tasks("train", 40, seed=4)] != [t.files for t in train]
    for t in train + held:
        mods = [p for p in t.files if not p.startswith("tests/") and p.endswith(".py") and "__init__" not in p]
        assert 1 <= len(mods) <= 3 and "README.md" in t.files and t.visible_tests
        assert set(t.solution) <= set(t.files) and all(not t.is_protected(p) for p in t.solution)
        assert all(t.is_protected(p) for p in t.hidden_tests)


def test_every_test_file_imports_every_function_its_asserts_call():
    """A visible assert of to_fahrenheit calls to_celsius: the test files import every function the module's units
    define (before, `to_celsius` was not imported, so that visible test failed on every task and no
    to_fahrenheit task could be resolved, not even by its reference fix)."""
    import ast as _ast
    for t in generate_repo_tasks("train", 128) + generate_repo_tasks("heldout", 32):
        tests = {p: x for p, x in {**t.files, **t.hidden_tests}.items() if p.startswith("tests/")}
        for path, text in tests.items():
            tree = _ast.parse(text)
            imported = {a.name for n in tree.body if isinstance(n, _ast.ImportFrom) for a in n.names}
            called = {n.func.id for n in _ast.walk(tree) if isinstance(n, _ast.Call) and isinstance(n.func, _ast.Name)}
            assert called <= imported, (t.task_id, path, called - imported)
