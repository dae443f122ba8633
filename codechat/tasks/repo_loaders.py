"""Load repository task sets: our JSONL (kind `repo`), SWE-bench-style records against repositories on disk,
QuixBugs from its directory, and the built-in generated family (`builtin:repo-train`, `builtin:repo-heldout`).

    load_repo_tasks("tasks.jsonl")                                # our schema, see codechat/tasks/repo.py
    load_repo_tasks("swe-bench-lite-test.json", repos="~/repos")  # REPOS/INSTANCE_ID (a tree), REPOS/owner__name ...
    load_repo_tasks("../shared/data/repo/quixbugs")               # 40 one-line bugs, pytest tests
    load_repo_tasks("builtin:repo-heldout")
Nothing is downloaded: a SWE-bench record whose repository is not on disk stops with one line naming it.
A record's repository is REPOS/INSTANCE_ID (a tree at the base commit, e.g. unpacked from the harness image's
/testbed or a `git archive`; used as it is, the base commit unchecked), else a git checkout or bare mirror
REPOS/owner__name, REPOS/owner/name, REPOS/name or REPOS/owner+name/repo (exported at the base commit, its git
submodules filled from their own mirrors under REPOS: `submodules.py`). The gold patch becomes the task's reference fix
(`solution`: the patched files; `solution_patch`: the diff). SWE-bench test ids are kept as given; the judge
matches every id style the records use (verifier/repo_rules.py).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from codechat import CodechatError
from codechat.tasks.loaders import read_records
from codechat.tasks.model import TaskFormatError
from codechat.tasks.repo import RepoLimits, RepoTask, _str_list, parse_repo_task
from codechat.tasks.repo_family import REPO_SETS
from codechat.verifier.patches import PatchError, apply_diff, parse_diff
from codechat.verifier.repo_rules import test_targets

SWEBENCH_FIELDS = ("instance_id", "problem_statement", "base_commit", "test_patch")


def is_repo_spec(spec: str | None) -> bool:
    """True when `spec` names a repository task set (so verify/eval take the repository path)."""
    if not spec:
        return False
    if spec.startswith("builtin:"):
        return spec.split(":", 1)[1] in REPO_SETS
    p = Path(spec).expanduser()
    if p.is_dir():
        return (p / "python_programs").is_dir() and (p / "python_testcases").is_dir()
    if not p.is_file():
        return False
    try:
        first = read_records(p)[0][1]
    except (TaskFormatError, IndexError):
        return False
    return first.get("kind") == "repo" or all(f in first for f in SWEBENCH_FIELDS)


def load_repo_tasks(spec: str, repos: str | None = None) -> list[RepoTask]:
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        if name not in REPO_SETS:
            raise TaskFormatError(f"{spec}: no built-in repository set '{name}' (valid: {', '.join(REPO_SETS)})")
        return REPO_SETS[name]()
    p = Path(spec).expanduser()
    if p.is_dir():
        return load_quixbugs(p)
    records = read_records(p)
    tasks, seen = [], {}
    for lineno, rec in records:
        where = f"{p}:{lineno}"
        if rec.get("kind") == "repo":
            task = parse_repo_task(rec, where)
        elif all(f in rec for f in SWEBENCH_FIELDS):
            task = from_swebench(rec, where, repos)
        else:
            raise TaskFormatError(f"{where}: not a repository task (need kind: repo, or the SWE-bench fields "
                                  f"{', '.join(SWEBENCH_FIELDS)})")
        if task.task_id in seen:
            raise TaskFormatError(f"{where}: duplicate task_id '{task.task_id}' (first at line {seen[task.task_id]})")
        seen[task.task_id] = lineno
        task.metadata.setdefault("source", str(p))
        tasks.append(task)
    return tasks


def find_repo(repo: str, repos: str | None, where: str, instance: str = "") -> tuple[Path, bool]:
    """(directory, is a git checkout) for `owner/name` under `repos`: REPOS/INSTANCE_ID (a tree, or a one-folder
    archive layout REPOS/INSTANCE_ID/NAME), else a git checkout at REPOS/owner__name, REPOS/owner/name, REPOS/name."""
    if not repos:
        raise CodechatError(f"{where}: SWE-bench record for {repo}: give --repos DIR holding the checkouts "
                            f"(nothing is downloaded)")
    root = Path(repos).expanduser()
    if instance and (root / instance).is_dir():
        tree = root / instance
        inner = [d for d in tree.iterdir() if d.is_dir()]
        if len(inner) == 1 and not any(f.is_file() for f in tree.iterdir()):
            tree = inner[0]  # git archive --prefix=NAME/
        return tree, (tree / ".git").exists()
    owner_name = repo.replace("/", "__")
    candidates = [root / owner_name, root / repo, root / repo.rsplit("/", 1)[-1], root / repo.replace("/", "+") / "repo"]
    for c in candidates:
        if (c / ".git").exists() or ((c / "HEAD").is_file() and (c / "objects").is_dir()):  # a checkout or a bare mirror
            return c, True
    raise CodechatError(f"{where}: repository {repo} not found under {root} (looked for {instance or 'INSTANCE_ID'}, "
                        f"{', '.join(str(c.relative_to(root)) for c in candidates)}; nothing is downloaded)")


def _read_base(checkout: Path, commit: str | None):
    def read(path: str) -> str | None:
        if commit is None:
            f = checkout / path
            return f.read_text(encoding="utf-8", errors="replace") if f.is_file() else None
        res = subprocess.run(["git", "-C", str(checkout), "show", f"{commit}:{path}"], capture_output=True)
        return res.stdout.decode("utf-8", errors="replace") if res.returncode == 0 else None
    return read


def from_swebench(rec: dict, where: str, repos: str | None) -> RepoTask:
    repo = rec.get("repo") or rec["instance_id"].rsplit("-", 1)[0].replace("__", "/")
    checkout, is_git = find_repo(str(repo), repos, where, str(rec["instance_id"]))
    commit = str(rec["base_commit"]) if is_git else None
    meta = {"source": "swe-bench", "repo": repo, "version": str(rec.get("version", "")),
            "base_commit": str(rec["base_commit"])}
    if rec.get("patch"):
        meta["solution_patch"] = rec["patch"]
        try:
            fixed = apply_diff(rec["patch"], _read_base(checkout, commit))
            meta["solution"] = {p: t for p, t in fixed.items() if t is not None}
        except PatchError as e:
            raise TaskFormatError(f"{where}: the gold patch does not apply to {checkout}: {e}") from None
    # the test files the test patch changes that the base already has: the agent's run_tests runs them (the
    # judge runs the patched versions)
    read = _read_base(checkout, commit)
    visible = test_targets([fp.path for fp in parse_diff(str(rec["test_patch"]))
                            if not fp.is_new and read(fp.path) is not None])
    return RepoTask(str(rec["instance_id"]), str(rec["problem_statement"]), repo_dir=str(checkout),
                    commit=commit, test_patch=str(rec["test_patch"]), visible_tests=visible,
                    fail_to_pass=_ids(rec.get("FAIL_TO_PASS"), "FAIL_TO_PASS", where),
                    pass_to_pass=_ids(rec.get("PASS_TO_PASS"), "PASS_TO_PASS", where),
                    limits=RepoLimits(max_turns=40, max_tool_calls=60, wall_s=1800, max_tokens=32768,
                                      test_timeout_s=600), metadata=meta,
                    mirrors=str(Path(repos).expanduser()) if is_git else None)


def _ids(v, name: str, where: str) -> list[str]:
    return _str_list(v or [], name, where)


_CORRECT_SWITCH = re.compile(r"if pytest\.use_correct:\n\s+from correct_python_programs[^\n]*\nelse:\n\s+(from [^\n]*)\n")


def quixbugs_test(src: str) -> str:
    """A QuixBugs test file without its conftest switches: imports the program under repair, runs every case
    but the two it marks slow."""
    src = _CORRECT_SWITCH.sub(lambda m: m.group(1) + "\n", src)
    # the cases QuixBugs marks slow (minutes with the correct program) are not run: a skipped test never passes
    src = re.sub(r'pytest\.skip\(("[^"]*")\)', r"return  # slow case, not run: \1", src)
    return src.replace("pytest.use_correct", "False").replace("pytest.run_slow", "False")


def _docstring(src: str) -> str:
    m = re.search(r'"""(.*?)"""', src, re.S)
    return m.group(1).strip() if m else ""


def load_quixbugs(root: Path) -> list[RepoTask]:
    """One task per program with a pytest file: the buggy program, its helpers and test data; the visible and
    hidden tests are its QuixBugs test file (the set has no split); the reference is the corrected program."""
    progs, tests, data = root / "python_programs", root / "python_testcases", root / "json_testcases"
    if not (progs.is_dir() and tests.is_dir()):
        raise TaskFormatError(f"{root}: not a QuixBugs directory (needs python_programs/ and python_testcases/)")
    tasks = []
    for test in sorted(tests.glob("test_*.py")):
        name = test.stem[len("test_"):]
        prog, fixed = progs / f"{name}.py", root / "correct_python_programs" / f"{name}.py"
        if not prog.is_file():
            continue
        path = f"python_programs/{name}.py"
        test_path = f"python_testcases/test_{name}.py"
        files = {path: prog.read_text(), "python_programs/__init__.py": "",
                 "python_testcases/load_testdata.py": (tests / "load_testdata.py").read_text(),
                 "python_testcases/node.py": (tests / "node.py").read_text(),
                 "python_programs/node.py": (progs / "node.py").read_text(),
                 "README.md": f"# {name}\n\nQuixBugs program `{path}`; tests in `{test_path}` "
                              f"(run them with run_tests).\n"}
        if (data / f"{name}.json").is_file():
            files[f"json_testcases/{name}.json"] = (data / f"{name}.json").read_text()
        test_src = quixbugs_test(test.read_text())
        files[test_path] = test_src
        doc = _docstring(prog.read_text())
        problem = (f"`{name}` in {path} has a bug on one line: some of the tests in {test_path} fail. "
                   f"Fix the program (not the tests).\n\n{doc}")
        meta = {"source": "quixbugs", "bug": "one-line"}
        if fixed.is_file():
            meta["solution"] = {path: fixed.read_text()}
        tasks.append(RepoTask(f"quixbugs/{name}", problem, files, hidden_tests={test_path: test_src},
                              visible_tests=[test_path], limits=RepoLimits(max_tokens=16384, test_timeout_s=60),
                              metadata=meta))
    if not tasks:
        raise TaskFormatError(f"{root}: no QuixBugs programs with a python_testcases/test_NAME.py")
    return tasks
