"""Test environments for repository tasks: which interpreter, packages and path run a repository's tests.

A spec file (JSON: a list of objects) names one environment per repository and version:
    [{"repo": "pallets/flask", "version": "2.0", "python": "python3.11",
      "requirements": ["pytest==7.1.2", "Werkzeug==2.0.3", "Jinja2==3.0.3", "itsdangerous==2.0.1", "click==8.0.4"],
      "pythonpath": ["src"], "offline_skip": {"tests/test_x.py::test_y": "calls httpbin.org"}}]
`python` is the interpreter the venv is made with: a version (`3.9`), a name (`python3.9`) or a path; a version or
name is looked for as `pythonX.Y` on PATH and under pyenv's `versions/` (`$PYENV_ROOT`, else ~/.pyenv), and each
candidate is run once to check its version (a pyenv shim of a version not enabled fails and is skipped); `requirements` are pip lines
installed from pip's configured index (pytest among them: the environment's own pytest runs the tests);
`pythonpath` lists directories of the repository tree put first on sys.path (`src` for a src/ layout, `.` by
default): the repository is not pip-installed, because every judgement runs on a fresh copy of the tree.
`offline_skip` maps test ids that need the internet (the sandbox has none) to the reason. An instance is
judgeable only when all its FAIL_TO_PASS tests can run (`offline_reason`): otherwise the judge answers
`env_error` saying how many of them cannot; PASS_TO_PASS ids marked offline are left out, with a warning.

    codechat repo env build SPEC --out DIR   # DIR/<owner>__<name>-<version>/ : a venv and env.json
    codechat repo env check DIR              # each environment's python and pytest versions, or why it fails
An existing environment can be used instead: any directory with `bin/python` and an env.json of the same fields.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from codechat import CodechatError

SPEC_FIELDS = ("repo", "version", "python", "requirements", "pythonpath", "offline_skip", "runner", "test_cmd",
               "environ", "protected", "bases", "overlays", "home")
RUNNERS = ("pytest", "swebench")


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
    runner: str = "pytest"
    """`pytest`: the judge's pytest runner on node ids; `swebench`: the spec's `test_cmd` through the suite runner,
    its log read by the official parser (built by swebench_env.py)."""
    test_cmd: str = ""
    """The SWE-bench spec's test command (runner `swebench`)."""
    environ: dict[str, str] = field(default_factory=dict)
    """Environment variables the test command runs with (the spec's `VAR=value` prefix and exports)."""
    protected: list[str] = field(default_factory=list)
    """Globs of tree files the judge keeps pristine (the runner script and its settings)."""
    dir: str = ""
    """The built environment's directory (holds bin/python); empty until built."""
    bases: dict[str, str] = field(default_factory=dict)
    """Base commit -> a layer venv (a directory under `dir`) holding the packages the install at that commit
    resolved to other versions than the environment's; its site-packages come before the environment's."""
    layer: str = ""
    """The layer the tests of one task run in (`for_commit`); not part of the spec."""
    overlays: dict[str, str] = field(default_factory=dict)
    """Base commit -> the overlay (a directory under `dir`) of the install at that commit: its compiled extensions
    and generated files, which the environment commit's may not match (scikit-learn 0.22's generated shims)."""
    overlay: str = "overlay"
    """The overlay laid over the tree of one task (`for_commit`); not part of the spec."""
    home: str = ""
    """A directory under `dir` whose files each test run finds in its home directory (linked): the files a
    repository's tests download there, taken from mirrors at build time (swebench_data.py); empty: none."""

    @property
    def key(self) -> str:
        return f"{self.repo}@{self.version}"

    def offline_reason(self, fail_to_pass: list[str]) -> str | None:
        """Why an instance with these FAIL_TO_PASS ids cannot be judged offline (some need the internet), or
        None when every one of them can run: a requirement is never shrunk to the tests that can."""
        off = [t for t in fail_to_pass if t in self.offline_skip]
        if not off:
            return None
        return (f"{len(off)} of {len(fail_to_pass)} FAIL_TO_PASS tests are marked offline_skip "
                f"({self.offline_skip[off[0]]}): the instance cannot be judged offline")

    @property
    def interpreter(self) -> str:
        return str(Path(self.dir) / self.layer / "bin" / "python")

    def for_commit(self, commit: str | None) -> "TestEnv":
        """This environment as the tests at base `commit` run in it: through its layer, when it has one."""
        layer, overlay = self.bases.get(commit or "", ""), self.overlays.get(commit or "", "overlay")
        return replace(self, layer=layer, overlay=overlay) if (layer, overlay) != (self.layer, self.overlay) else self

    def host_dirs(self) -> list[str]:
        """Host directories the sandbox must show (read-only) for this environment's interpreter to run: the venv
        and the base installation its pyvenv.cfg `home` names (a pyenv Python other than codechat's: its binary
        and standard library live outside the venv)."""
        dirs = [self.dir]
        try:
            cfg = (Path(self.dir) / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return dirs
        m = re.search(r"^home\s*=\s*(.+?)\s*$", cfg, re.M)
        if m and os.path.isabs(m[1]):
            home = Path(os.path.realpath(m[1]))
            prefix = home.parent if home.name == "bin" else home
            if prefix.is_dir() and str(prefix) not in ("/", "/usr", "/usr/local"):
                dirs.append(str(prefix))
        return dirs


def parse_env(rec: object, where: str) -> TestEnv:
    if not isinstance(rec, dict) or not isinstance(rec.get("repo"), str) or not isinstance(rec.get("version"), str):
        raise EnvError(f"{where}: an environment needs 'repo' and 'version' strings")
    unknown = set(rec) - set(SPEC_FIELDS) - {"dir"}
    if unknown:
        raise EnvError(f"{where}: unknown field(s) {', '.join(sorted(unknown))} (valid: {', '.join(SPEC_FIELDS)})")
    env = TestEnv(rec["repo"], rec["version"])
    for name in ("python", "dir", "runner", "test_cmd", "home"):
        if name in rec:
            if not isinstance(rec[name], str):
                raise EnvError(f"{where}: '{name}' must be a string")
            setattr(env, name, rec[name])
    if env.runner not in RUNNERS:
        raise EnvError(f"{where}: runner {env.runner!r} unknown (valid: {', '.join(RUNNERS)})")
    if env.home and (os.path.isabs(env.home) or ".." in Path(env.home).parts):
        raise EnvError(f"{where}: 'home' must be a directory inside the environment")
    for name in ("requirements", "pythonpath", "protected"):
        if name in rec:
            if not isinstance(rec[name], list) or not all(isinstance(x, str) for x in rec[name]):
                raise EnvError(f"{where}: '{name}' must be a list of strings")
            setattr(env, name, list(rec[name]))
    if "offline_skip" in rec:
        v = rec["offline_skip"]
        if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
            raise EnvError(f"{where}: 'offline_skip' must map test ids to reasons")
        env.offline_skip = dict(v)
    if "environ" in rec:
        v = rec["environ"]
        if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
            raise EnvError(f"{where}: 'environ' must map names to strings")
        env.environ = dict(v)
    for name in ("bases", "overlays"):
        if name in rec:
            v = rec[name]
            if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) and x and
                                                  not os.path.isabs(x) and ".." not in Path(x).parts
                                                  for k, x in v.items()):
                raise EnvError(f"{where}: '{name}' must map commits to directories inside the environment")
            setattr(env, name, dict(v))
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


def load_offline_marks(path: str | Path) -> dict[str, dict[str, str]]:
    """{repo@version: {test id: why it needs the internet}} from a spec file's `offline_skip` fields (entries
    without one add nothing, so a full environment spec serves), for environments built from other sources
    (`codechat repo env build RECORDS --offline-skip FILE`). Two entries of one repo@version are merged."""
    marks: dict[str, dict[str, str]] = {}
    for env in load_specs(path):
        if env.offline_skip:
            marks.setdefault(env.key, {}).update(env.offline_skip)
    return marks


def set_offline_skip(env_dir: str | Path, marks: dict[str, str]) -> None:
    """Replace the `offline_skip` of the environment built in `env_dir` (its env.json)."""
    cfg = Path(env_dir) / "env.json"
    try:
        rec = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise EnvError(f"{cfg}: cannot read ({e})") from None
    rec["offline_skip"] = dict(marks)
    cfg.write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")


def env_dirname(env: TestEnv) -> str:
    return f"{env.repo.replace('/', '__')}-{env.version}"


def _pyenv_roots() -> list[Path]:
    roots = [os.environ["PYENV_ROOT"]] if os.environ.get("PYENV_ROOT") else []
    return list(dict.fromkeys(Path(r) for r in roots + [str(Path.home() / ".pyenv")]))


def _probe(python: str) -> tuple[str, str] | None:
    """('X.Y', sys.executable) of an interpreter, or None when it does not run (a pyenv shim of a version not
    enabled); sys.executable is the real interpreter behind a shim."""
    try:
        res = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2], sys.executable)"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.fullmatch(r"(\d+\.\d+) (.*)", res.stdout.strip())
    return (m[1], m[2] or python) if res.returncode == 0 and m else None


def resolve_python(spec: str) -> str:
    """The interpreter a spec's `python` names (a version `3.9`, a name `python3.9`, or a path), checked by
    running it; EnvError saying where it was looked for when there is none."""
    if "/" in spec:
        if Path(spec).is_file() and _probe(spec):
            return spec
        raise EnvError(f"interpreter {spec!r} not found or does not run")
    m = re.fullmatch(r"(?:python)?(\d+\.\d+)", spec)
    version = m[1] if m else None
    name = f"python{version}" if version else spec
    cands = [str(Path(d) / name) for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    if version:
        for root in _pyenv_roots():
            found = sorted((root / "versions").glob(f"{version}.*/bin/{name}"),
                           key=lambda p: [int(x) if x.isdigit() else -1 for x in p.parts[-3].split(".")], reverse=True)
            cands += [str(p) for p in found]
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            got = _probe(c)
            if got and (version is None or got[0] == version):
                return got[1]
    where = "PATH" + "".join(f" and {r}/versions" for r in _pyenv_roots()) if version else "PATH"
    raise EnvError(f"interpreter {spec!r} not found (looked on {where})")


def build_env(env: TestEnv, out: Path, log=print) -> TestEnv:
    """Create out/<owner>__<name>-<version>/ (venv, pip install of the requirements), write its env.json."""
    try:
        python = resolve_python(env.python)
    except EnvError as e:
        raise EnvError(f"{env.key}: {e}") from None
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
    rec.pop("layer")
    rec.pop("overlay")
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
    if env.runner == "swebench":
        res = subprocess.run([env.interpreter, "-I", "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True, timeout=120)
        _check(res, env, "python")
        return f"python {res.stdout.strip()}, test command {env.test_cmd!r}"
    res = subprocess.run([env.interpreter, "-I", "-c", "import sys, pytest; print(sys.version.split()[0], "
                          "pytest.__version__)"], capture_output=True, text=True, timeout=120)
    _check(res, env, "import pytest")
    py, pt = res.stdout.split()
    return f"python {py}, pytest {pt}"


def lay_overlay(env: TestEnv, tree: Path) -> list[str]:
    """Copy the environment's overlay (files its install created or changed: swebench_env.py; the base commit's own
    install's when it has one, `for_commit`) into a fresh tree; the paths copied."""
    src = Path(env.dir) / env.overlay
    done = []
    for f in sorted(src.rglob("*")) if src.is_dir() else []:
        if f.is_file() and not f.is_symlink():
            rel = f.relative_to(src)
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            (tree / rel).write_bytes(f.read_bytes())
            os.chmod(tree / rel, f.stat().st_mode & 0o755)
            done.append(str(rel))
    return done
