"""Test environments for repository tasks: which interpreter, packages and path run a repository's tests.

A spec file (JSON: a list of objects) names one environment per repository and version:
    [{"repo": "pallets/flask", "version": "2.0", "python": "python3.11",
      "requirements": ["pytest==7.1.2", "Werkzeug==2.0.3", "Jinja2==3.0.3", "itsdangerous==2.0.1", "click==8.0.4"],
      "pythonpath": ["src"], "offline_skip": {"tests/test_x.py::test_y": "calls httpbin.org"}}]
`python` is the interpreter the venv is made with (a name on PATH or a path); `requirements` are pip lines
installed from pip's configured index (pytest among them: the environment's own pytest runs the tests);
`pythonpath` lists directories of the repository tree put first on sys.path (`src` for a src/ layout, `.` by
default): the repository is not pip-installed, because every judgement runs on a fresh copy of the tree.
`offline_skip` maps test ids that need the internet (the sandbox has none) to the reason; the judge leaves
them out of FAIL_TO_PASS / PASS_TO_PASS and lists them in the verdict's warnings.

    codechat repo env build SPEC --out DIR   # DIR/<owner>__<name>-<version>/ : a venv and env.json
    codechat repo env check DIR              # each environment's python and pytest versions, or why it fails
An existing environment can be used instead: any directory with `bin/python` and an env.json of the same fields.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from codechat import CodechatError

SPEC_FIELDS = ("repo", "version", "python", "requirements", "pythonpath", "offline_skip")


class EnvError(CodechatError):
    """A spec or environment that cannot be read, built or run; the message names it."""


@dataclass
class TestEnv:
    """One repository/version environment."""
    __test__ = False  # not a pytest test class
    repo: str
    """owner/name, as in SWE-bench records."""
    version: str
    """The record's `version`."""
    python: str = "python3"
    """Interpreter the venv is created with."""
    requirements: list[str] = field(default_factory=list)
    """pip requirement lines."""
    pythonpath: list[str] = field(default_factory=lambda: ["."])
    """Tree directories put first on sys.path."""
    offline_skip: dict[str, str] = field(default_factory=dict)
    """Test id -> why it cannot run offline."""
    dir: str = ""
    """The built environment's directory (holds bin/python); empty until built."""

    @property
    def key(self) -> str:
        return f"{self.repo}@{self.version}"

    @property
    def interpreter(self) -> str:
        return str(Path(self.dir) / "bin" / "python")


def parse_env(rec: object, where: str) -> TestEnv:
    if not isinstance(rec, dict) or not isinstance(rec.get("repo"), str) or not isinstance(rec.get("version"), str):
        raise EnvError(f"{where}: an environment needs 'repo' and 'version' strings")
    unknown = set(rec) - set(SPEC_FIELDS) - {"dir"}
    if unknown:
        raise EnvError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} (valid: {', '.join(SPEC_FIELDS)})")
    env = TestEnv(rec["repo"], rec["version"])
    for name in ("python", "dir"):
        if name in rec:
            if not isinstance(rec[name], str):
                raise EnvError(f"{where}: '{name}' must be a string")
            setattr(env, name, rec[name])
    for name in ("requirements", "pythonpath"):
        if name in rec:
            if not isinstance(rec[name], list) or not all(isinstance(x, str) for x in rec[name]):
                raise EnvError(f"{where}: '{name}' must be a list of strings")
            setattr(env, name, list(rec[name]))
    if "offline_skip" in rec:
        v = rec["offline_skip"]
        if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
            raise EnvError(f"{where}: 'offline_skip' must map test ids to reasons")
        env.offline_skip = dict(v)
    return env


def load_specs(path: str | Path) -> list[TestEnv]:
    p = Path(path).expanduser()
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise EnvError(f"{p}: cannot read environment spec ({e})") from None
    if not isinstance(data, list):
        raise EnvError(f"{p}: an environment spec is a JSON list of objects")
    return [parse_env(r, f"{p}[{i}]") for i, r in enumerate(data)]


def env_dirname(env: TestEnv) -> str:
    return f"{env.repo.replace('/', '__')}-{env.version}"


def build_env(env: TestEnv, out: Path, log=print) -> TestEnv:
    """Create out/<owner>__<name>-<version>/ (venv, pip install of the requirements), write its env.json."""
    python = shutil.which(env.python) or (env.python if Path(env.python).is_file() else None)
    if not python:
        raise EnvError(f"{env.key}: interpreter {env.python!r} not found on this machine")
    d = (out / env_dirname(env)).resolve()
    log(f"{env.key}: venv with {python} in {d}")
    _check(subprocess.run([python, "-m", "venv", "--clear", str(d)], capture_output=True, text=True), env, "venv")
    if env.requirements:
        log(f"{env.key}: pip install {' '.join(env.requirements)}")
        _check(subprocess.run([str(d / "bin" / "python"), "-m", "pip", "install", "-q", *env.requirements],
                              capture_output=True, text=True), env, "pip install")
    built = TestEnv(**{**asdict(env), "dir": str(d)})
    rec = asdict(built)
    rec.pop("dir")
    (d / "env.json").write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")
    return built


def _check(res: subprocess.CompletedProcess, env: TestEnv, what: str) -> None:
    if res.returncode != 0:
        last = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
        raise EnvError(f"{env.key}: {what} failed: {last[0][:300]}")


def load_envs(root: str | Path) -> dict[str, TestEnv]:
    """Built environments under `root` (each a directory with env.json and bin/python), by `repo@version`."""
    r = Path(root).expanduser()
    if not r.is_dir():
        raise EnvError(f"{r}: no such environments directory")
    envs = {}
    for cfg in sorted(r.glob("*/env.json")):
        try:
            rec = json.loads(cfg.read_text(encoding="utf-8"))
        except ValueError as e:
            raise EnvError(f"{cfg}: not JSON ({e})") from None
        env = parse_env({**rec, "dir": str(cfg.parent.resolve())}, str(cfg))
        envs[env.key] = env
    return envs


def check_env(env: TestEnv) -> str:
    """'python X, pytest Y' for a working environment; raises EnvError saying why not."""
    if not Path(env.interpreter).exists():
        raise EnvError(f"{env.key}: {env.interpreter} missing (build the environment first)")
    res = subprocess.run([env.interpreter, "-I", "-c", "import sys, pytest; print(sys.version.split()[0], "
                          "pytest.__version__)"], capture_output=True, text=True, timeout=120)
    _check(res, env, "import pytest")
    py, pt = res.stdout.split()
    return f"python {py}, pytest {pt}"
