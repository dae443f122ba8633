"""Repository tasks (kind `repo`): fix a small Python project so that hidden tests pass, without editing tests.

A `RepoTask` holds the starting files (inline `{path: content}`, or `repo_dir` = a local directory or a git
checkout at `commit`), the problem statement the agent reads, the hidden tests added only for the final
judgement (`hidden_tests` files and/or a unified-diff `test_patch`), the visible tests the agent may run, the
test ids that must pass, the `protected` globs whose edits are discarded, and the episode limits.

Our JSONL, one task per line (`kind`, `task_id`, `problem` and `files` or `repo_dir` required):
    {"kind": "repo", "task_id": "parser-empty", "problem": "parse('') raises IndexError ...",
     "files": {"parser.py": "...", "tests/test_parser.py": "..."}, "visible_tests": ["tests/test_parser.py"],
     "hidden_tests": {"tests/test_hidden.py": "..."}, "fail_to_pass": [], "pass_to_pass": [],
     "protected": ["tests/*"], "limits": {"max_turns": 12}, "solution": {"parser.py": "..."}, "metadata": {}}
(with `repo_dir` a git checkout: `commit`, and `mirrors`, a directory of git mirrors its submodules come from).
`materialize(task, parent)` writes the pristine base tree once; workspaces are cloned from it.
Loaders for SWE-bench records and QuixBugs: `repo_loaders.py`; the generated family: `repo_family/`.
"""
from __future__ import annotations

import fnmatch
import json
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from codechat.sandbox.isolation import rmtree
from codechat.sandbox.workspace import WorkspaceError, safe_path, walk_files, write_tree
from codechat.tasks.model import TaskFormatError
from codechat.tasks.submodules import SubmoduleError, fill_submodules

DEFAULT_PROTECTED = ["test_*.py", "*_test.py", "conftest.py", "tests/*", "*/tests/*"]
"""Default protected globs: matched against the whole relative path and against the file name."""
MAX_FILES, MAX_FILE_CHARS = 2000, 1 << 20


@dataclass
class RepoLimits:
    """Budgets of one episode; exceeding any ends it as truncated."""
    max_turns: int = 16
    """Model turns (one tool call each at most)."""
    max_tool_calls: int = 24
    """Tool calls, including malformed ones."""
    wall_s: float = 300.0
    """Wall-clock seconds for the whole episode."""
    max_tokens: int = 4096
    """Tokens in the transcript (prompt, model and tool-result tokens together)."""
    test_timeout_s: float = 60.0
    """Wall-clock seconds of one test run (the agent's run_tests and the final judgement)."""


@dataclass
class RepoTask:
    task_id: str
    """Unique id within its set."""
    problem: str
    """The issue text the agent reads."""
    files: dict[str, str] = field(default_factory=dict)
    """Inline starting files {relative path: text}; empty when `repo_dir` is used."""
    repo_dir: str | None = None
    """A local directory (copied) or git checkout (exported at `commit`) holding the starting files."""
    commit: str | None = None
    """With a git `repo_dir`: the commit to start from (git archive); None = the directory as it is."""
    hidden_tests: dict[str, str] = field(default_factory=dict)
    """Test files {path: text} written into the clean copy only for the final judgement (overwriting)."""
    test_patch: str = ""
    """A unified diff adding/changing test files, applied after `hidden_tests` at judgement (SWE-bench)."""
    visible_tests: list[str] = field(default_factory=list)
    """pytest paths or node ids the agent's `run_tests` runs (files of the starting tree)."""
    fail_to_pass: list[str] = field(default_factory=list)
    """Test ids that must pass; empty = every test collected from the hidden test files."""
    pass_to_pass: list[str] = field(default_factory=list)
    """Test ids that must keep passing; empty = the visible tests that pass on the starting tree."""
    protected: list[str] = field(default_factory=lambda: list(DEFAULT_PROTECTED))
    """Globs of paths whose edits are refused by the tools and discarded at judgement."""
    limits: RepoLimits = field(default_factory=RepoLimits)
    """Episode budgets."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """`solution` (the reference fix {path: text}), `bug` kind, `source`, anything else."""
    mirrors: str | None = None
    """With a git `repo_dir` and `commit`: a directory of git mirrors that `commit`'s submodules are filled from
    (`submodules.py`); None = their directories stay empty, as `git archive` leaves them."""

    kind = "repo"

    def is_protected(self, path: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        return any(fnmatch.fnmatchcase(path, g) or fnmatch.fnmatchcase(name, g) for g in self.protected)

    @property
    def solution(self) -> dict[str, str] | None:
        return self.metadata.get("solution")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kind"] = "repo"
        d["solution"] = d["metadata"].pop("solution", None)
        return {k: v for k, v in d.items() if v not in (None, "", [], {})}


def _str_map(v: Any, name: str, where: str) -> dict[str, str]:
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        raise TaskFormatError(f"{where}: field '{name}' must be an object of path -> text")
    if len(v) > MAX_FILES or any(len(x) > MAX_FILE_CHARS for x in v.values()):
        raise TaskFormatError(f"{where}: field '{name}' has more than {MAX_FILES} files or a file over "
                              f"{MAX_FILE_CHARS} characters")
    try:
        return {safe_path(k): x for k, x in v.items()}
    except WorkspaceError as e:
        raise TaskFormatError(f"{where}: field '{name}': {e}") from None


def _str_list(v: Any, name: str, where: str) -> list[str]:
    if isinstance(v, str):  # SWE-bench stores lists as JSON text
        try:
            v = json.loads(v)
        except ValueError:
            raise TaskFormatError(f"{where}: field '{name}' must be a list of strings") from None
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise TaskFormatError(f"{where}: field '{name}' must be a list of strings")
    return list(v)


def parse_limits(v: Any, where: str) -> RepoLimits:
    lim = RepoLimits()
    if v is None:
        return lim
    if not isinstance(v, dict):
        raise TaskFormatError(f"{where}: field 'limits' must be an object")
    for k, x in v.items():
        if k not in RepoLimits.__dataclass_fields__:
            raise TaskFormatError(f"{where}: unknown limit '{k}' (valid: {', '.join(RepoLimits.__dataclass_fields__)})")
        if isinstance(x, bool) or not isinstance(x, (int, float)) or x <= 0:
            raise TaskFormatError(f"{where}: limit '{k}' must be a positive number, got {x!r}")
        setattr(lim, k, type(getattr(lim, k))(x))
    return lim


def parse_repo_task(rec: dict[str, Any], where: str) -> RepoTask:
    """One JSONL record of kind `repo` -> RepoTask; a bad field raises TaskFormatError naming it."""
    for f in ("task_id", "problem"):
        if f not in rec:
            raise TaskFormatError(f"{where}: missing required field '{f}'")
    if not isinstance(rec["problem"], str) or not rec["problem"].strip():
        raise TaskFormatError(f"{where}: field 'problem' must be a non-empty string")
    files = _str_map(rec.get("files") or {}, "files", where)
    repo_dir = rec.get("repo_dir")
    if bool(files) == bool(repo_dir):
        raise TaskFormatError(f"{where}: give exactly one of 'files' (inline) or 'repo_dir'")
    if repo_dir is not None and not isinstance(repo_dir, str):
        raise TaskFormatError(f"{where}: field 'repo_dir' must be a string")
    commit = rec.get("commit")
    if commit is not None and (not isinstance(commit, str) or not commit.strip() or commit.startswith("-")):
        raise TaskFormatError(f"{where}: field 'commit' must be a commit id or ref")
    mirrors = rec.get("mirrors")
    if mirrors is not None and (not isinstance(mirrors, str) or not mirrors.strip()):
        raise TaskFormatError(f"{where}: field 'mirrors' must be a directory of git mirrors")
    protected = _str_list(rec["protected"], "protected", where) if "protected" in rec else list(DEFAULT_PROTECTED)
    test_patch = rec.get("test_patch") or ""
    if not isinstance(test_patch, str):
        raise TaskFormatError(f"{where}: field 'test_patch' must be a string (a unified diff)")
    hidden = _str_map(rec.get("hidden_tests") or {}, "hidden_tests", where)
    if not hidden and not test_patch:
        raise TaskFormatError(f"{where}: needs 'hidden_tests' or 'test_patch' (the tests of the final judgement)")
    meta = rec.get("metadata") or {}
    if not isinstance(meta, dict):
        raise TaskFormatError(f"{where}: field 'metadata' must be an object")
    meta = dict(meta)
    if rec.get("solution") is not None:
        meta["solution"] = _str_map(rec["solution"], "solution", where)
    return RepoTask(str(rec["task_id"]), rec["problem"], files, repo_dir, commit, hidden, test_patch,
                    _str_list(rec.get("visible_tests") or [], "visible_tests", where),
                    _str_list(rec.get("fail_to_pass") or [], "fail_to_pass", where),
                    _str_list(rec.get("pass_to_pass") or [], "pass_to_pass", where),
                    protected, parse_limits(rec.get("limits"), where), meta, mirrors)


def save_repo_tasks(tasks: list[RepoTask], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for t in tasks:
            f.write(json.dumps(t.to_dict(), ensure_ascii=False) + "\n")


def _copy_dir(src: Path, dst: Path) -> None:
    # byte for byte: the tests read images, data files and text in other encodings (sphinx's test roots, its
    # undecodable.rst); the tools read them as text, a change is compared by bytes (`Workspace.changes`)
    write_tree(dst, {rel: (src / rel).read_bytes() for rel in walk_files(src)})


def materialize(task: RepoTask, dst: Path) -> Path:
    """Write the task's pristine starting tree at dst (created). Raises TaskFormatError when repo_dir is unusable."""
    dst = Path(dst)
    dst.mkdir(parents=True, mode=0o755)
    if task.files:
        write_tree(dst, task.files)
        return dst
    src = Path(task.repo_dir).expanduser()
    if not src.is_dir():
        raise TaskFormatError(f"task {task.task_id}: repo_dir {src} not found (repositories are never downloaded)")
    if task.commit is None:
        _copy_dir(src, dst)
        return dst
    tar = subprocess.run(["git", "-C", str(src), "archive", "--format=tar", task.commit], capture_output=True)
    if tar.returncode != 0:
        msg = tar.stderr.decode(errors="replace").strip().splitlines()
        raise TaskFormatError(f"task {task.task_id}: git archive {task.commit} in {src} failed: "
                              f"{msg[-1] if msg else 'unknown error'}")
    tmp = dst.parent / f".{dst.name}-raw"
    tmp.mkdir()
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=tar.stdout, check=True)
    if task.mirrors:
        try:
            fill_submodules(src, task.commit, tmp, Path(task.mirrors).expanduser(), task.metadata.get("repo"))
        except SubmoduleError as e:
            rmtree(str(tmp))
            raise TaskFormatError(f"task {task.task_id}: {e}") from None
    _copy_dir(tmp, dst)
    rmtree(str(tmp))
    return dst
