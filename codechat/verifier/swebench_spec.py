"""What the official SWE-bench specs, the records and the git mirrors say about an environment, read without
building anything: the (repo, version) spec from the optional `swebench` package, a repository's requirements or
`environment.yml` at a commit (from its mirror, as the harness reads them from the network), conda names mapped to
PyPI, the records' date, the spec's test command as the suite runner's fields, and the files each runner kind keeps
pristine. `swebench_env.py` builds environments from these.
"""
from __future__ import annotations

import re
import shlex
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

import yaml
from packaging.requirements import Requirement

from codechat.tasks.submodules import find_git, mirror_candidates
from codechat.verifier.repo_env import EnvError

CONDA_TO_PYPI = {"iris": "scitools-iris", "matplotlib-base": "matplotlib", "pytables": "tables", "pytorch": "torch",
                 "hdf5": None, "libnetcdf": None, "cdms2": None}
"""Conda package names that mean another package on PyPI (the PyPI package `iris` is an unrelated placeholder),
or None: nothing to pip-install (a C library that the Python packages' wheels carry, or a conda-only package)."""

def swebench_specs() -> dict:
    """MAP_REPO_VERSION_TO_SPECS of the installed `swebench` (an optional dependency: pip install codechat[swebench])."""
    try:
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS  # optional dependency
    except ImportError:
        raise EnvError("the swebench package is not installed (pip install 'swebench>=3,<5', or codechat[swebench])") \
            from None
    return MAP_REPO_VERSION_TO_SPECS


def spec_for(repo: str, version: str) -> dict:
    specs = swebench_specs()
    if repo not in specs:
        raise EnvError(f"{repo}: the swebench package has no specs for this repository")
    if version not in specs[repo]:
        raise EnvError(f"{repo}@{version}: no spec (the package has {', '.join(sorted(specs[repo]))})")
    return dict(specs[repo][version])


def find_mirror(repo: str, mirrors: Path) -> Path:
    """The git directory (bare or a checkout) of `owner/name` under `mirrors`: owner__name, owner+name/repo (the
    layout of a fetched mirror), owner+name, owner/name or name."""
    found = find_git(mirrors, repo)
    if found is None:
        raise EnvError(f"{repo}: no git mirror under {mirrors} (looked for "
                       f"{', '.join(str(c.relative_to(mirrors)) for c in mirror_candidates(mirrors, repo))})")
    return found


def git_show(mirror: Path, commit: str, path: str) -> str | None:
    res = subprocess.run(["git", "-C", str(mirror), "show", f"{commit}:{path}"], capture_output=True)
    return res.stdout.decode("utf-8", errors="replace") if res.returncode == 0 else None


def requirements_txt(repo: str, mirror: Path, commit: str) -> str:
    """The repository's requirements at `commit`, as the harness's get_requirements_by_commit reads them (its paths,
    `-r` includes, the same lines left out), from the mirror instead of the network; cleaned as the harness does."""
    from swebench.harness.constants import MAP_REPO_TO_REQS_PATHS  # optional dependency
    from swebench.harness.test_spec.python import clean_requirements  # optional dependency
    for path in MAP_REPO_TO_REQS_PATHS.get(repo, []):
        text = git_show(mirror, commit, path)
        if text is not None:
            break
    else:
        raise EnvError(f"{repo}: no requirements file at {commit[:12]} (looked for "
                       f"{', '.join(MAP_REPO_TO_REQS_PATHS.get(repo, []))})")
    skip = ("-e .", "#", ".[test")
    own, extra = [], []
    for line in text.splitlines():
        if line.strip().startswith("-r"):
            inc = git_show(mirror, commit, "/".join(path.split("/")[:-1] + [line.strip()[2:].strip()]).lstrip("/"))
            extra += [l for l in (inc or "").splitlines() if not l.strip().startswith(skip)]
        elif not line.strip().startswith(skip):
            own.append(line)
    return clean_requirements("\n".join(extra + own))


def environment_yml_packages(repo: str, mirror: Path, commit: str, instance_id: str) -> list[str]:
    """pip requirement lines for an `environment.yml` spec: conda dependencies (name=version -> name==version)
    and the file's pip section."""
    from swebench.harness.constants import MAP_REPO_TO_ENV_YML_PATHS  # optional dependency
    from swebench.harness.utils import load_cached_environment_yml  # optional dependency
    text = load_cached_environment_yml(instance_id)
    if not text:
        text = next((t for p in MAP_REPO_TO_ENV_YML_PATHS.get(repo, []) if (t := git_show(mirror, commit, p))), None)
    if not text:
        raise EnvError(f"{repo}: no environment.yml at {commit[:12]}")
    out = []
    for dep in (yaml.safe_load(text) or {}).get("dependencies", []):
        if isinstance(dep, dict):
            out += [str(x) for x in dep.get("pip", [])]
        elif isinstance(dep, str):
            name = re.split(r"[=<>!\s]", dep.split("::")[-1], maxsplit=1)[0]
            if name in ("python", "pip") or not name:
                continue
            pin = re.fullmatch(r"[\w.-]+\s*=\s*([\w.*]+)", dep.split("::")[-1].strip())
            out.append(f"{name}=={pin[1]}" if pin and "*" not in pin[1] else dep.split("::")[-1].replace(" ", ""))
    return out


def conda_to_pypi(lines: list[str]) -> tuple[list[str], dict[str, str | None]]:
    """The pip requirement lines for conda package lines (`CONDA_TO_PYPI`), and {conda name: PyPI name or None}
    for each line renamed or left out."""
    out, changed = [], {}
    for line in lines:
        name = re.split(r"[=<>!~\[;\s]", line.strip(), maxsplit=1)[0]
        if name.lower() not in CONDA_TO_PYPI:
            out.append(line)
            continue
        new = changed[name] = CONDA_TO_PYPI[name.lower()]
        if new is not None:
            out.append(new + line.strip()[len(name):])
    return out, changed


CONDA_PYTHON_CAPS = {"3.6": {"cython": "<3", "pytest": "<7"}}
"""Caps on a conda package list's unpinned packages for an old Python, where PyPI serves a release that installs
but that the harness's conda did not give that Python. Conda's last Python 3.6 builds are Cython 0.29; PyPI's
Cython 3.0 (July 2023) installs on 3.6 too, and scikit-learn 0.20–0.22 do not compile with it (`_ball_tree.pyx`).
PyPI's pytest 7.0 installs on 3.6 and names a complex parameter by its value, where pytest before 7.0 names it by
position; the harness's pytest did so (scikit-learn 0.22's records name `test_shufflesplit_errors[None-train_size3]`,
which pytest 7.0 calls `[None-1j]`)."""


def python_caps(lines: list[str], python: str) -> list[str]:
    """`lines` (requirement lines of a conda package list) with CONDA_PYTHON_CAPS applied to the unpinned ones."""
    caps = CONDA_PYTHON_CAPS.get(python, {})
    return [line + caps[line.lower()] if line.lower() in caps else line for line in lines]


def spec_packages(text: str) -> list[str]:
    """A spec's package list (conda names, shell-quoted as the harness passes them to `conda create`: scikit-learn
    1.3's `'numpy==1.19.2' 'scipy==1.5.2'`) as requirement lines, conda's `name=1.2` pins as `name==1.2`."""
    return [re.sub(r"(?<=[\w])=(?=[\d])", "==", p) for p in shlex.split(text)]


DOWNLOAD = re.compile(r"\b(?:wget|curl)\b")
ASSIGNMENT = re.compile(r"\s*([A-Za-z_]\w*)=\S*\s*")


def offline_pre_install(cmds: list[str]) -> tuple[list[str], list[str]]:
    """The spec's `pre_install` commands split into those to run and those left out: downloads (`wget`, `curl`:
    the build has no internet), lines that only set a shell variable (a Dockerfile's RUN keeps it for the next
    line; here each command runs in its own shell) and every line reading such a variable (matplotlib's qhull
    download: `wget -O "$QHULL_TAR" "$QHULL_URL"`, then `tar -xvzf "$QHULL_TAR"`)."""
    names = {m[1] for c in cmds if (m := ASSIGNMENT.fullmatch(c))}
    reads = re.compile(r"\$\{?(?:" + "|".join(map(re.escape, sorted(names))) + r")\b") if names else None
    run, left_out = [], []
    for c in cmds:
        out = DOWNLOAD.search(c) or ASSIGNMENT.fullmatch(c) or (reads and reads.search(c))
        (left_out if out else run).append(c)
    return run, left_out


SYSTEM_LIBRARIES = {"matplotlib/matplotlib": ("mplsetup.cfg", "MPLSETUPCFG",
                                              {"freetype": "system_freetype", "qhull": "system_qhull"})}
"""Where a repository's build downloads a C library's source (matplotlib: freetype 2.6.1 and qhull 2020.2, from
the internet the build does not have), the build takes the system's instead, unless the library's source is given
locally (`swebench_sources.py`): (a file written in the environment, the variable naming it to the build, {library:
the file's option saying "use the system's"}). Needs the system libraries' headers (libfreetype-dev,
libqhull-dev); matplotlib's tests comparing images with text assume freetype 2.6.1."""


def build_environ(repo: str, env_dir: Path, local: frozenset[str] | set[str] = frozenset()) -> dict[str, str]:
    """The variables the repository's install steps get (SYSTEM_LIBRARIES), their files written in `env_dir`;
    the libraries in `local` are built from their given sources, the others taken from the system."""
    if repo not in SYSTEM_LIBRARIES:
        return {}
    name, var, options = SYSTEM_LIBRARIES[repo]
    text = "[libs]\n" + "".join(f"{opt} = {lib not in local}\n" for lib, opt in options.items())
    (env_dir / name).write_text(text, encoding="utf-8")
    return {var: str(env_dir / name)}


def tree_pythonpath(src: Path) -> list[str]:
    """The tree directory the code under test is imported from: `src` or `lib` when it holds a Python package
    (pytest-dev's `src/_pytest`; matplotlib's `lib/matplotlib`, where its editable install points, beside a `src`
    of C++ sources), else the root."""
    for d in ("src", "lib"):
        if any((p / "__init__.py").is_file() for p in (src / d).glob("*/")):
            return [d]
    return ["."]


def records_date(records: list[dict]) -> str | None:
    """The newest `created_at` of the records (ISO 8601, as SWE-bench writes it), or None when none has one."""
    dates = [str(r["created_at"]) for r in records if r.get("created_at")]
    return max(dates) if dates else None


def parse_test_cmd(test_cmd: str) -> dict:
    """The suite runner's fields for a spec's `test_cmd`: {"kind", "script", "args", "environ"}."""
    words = shlex.split(test_cmd)
    environ = {}
    while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
        k, _, v = words.pop(0).partition("=")
        environ[k] = v
    if not words:
        raise EnvError(f"test command {test_cmd!r}: nothing to run")
    head, args = words[0], words[1:]
    if head.endswith("runtests.py"):
        return {"kind": "unittest", "script": head.removeprefix("./"), "args": args, "environ": environ}
    if head.endswith("bin/test"):
        return {"kind": "sympy", "script": head.removeprefix("./"), "args": args, "environ": environ}
    if head == "tox":  # the spec's pre_install makes tox.ini run `pytest -rA`: run that directly
        return {"kind": "pytest", "script": "", "args": ["-rA"], "environ": environ}
    if head in ("pytest", "py.test") or (head == "python" and args[:2] == ["-m", "pytest"]):
        return {"kind": "pytest", "script": "", "args": args[2:] if head == "python" else args, "environ": environ}
    raise EnvError(f"test command {test_cmd!r}: no runner for {head!r}")


RUNNER_FILES = {"unittest": ["tests/runtests.py", "tests/test_sqlite.py", "tests/urls.py"],
                "sympy": ["bin/test", "sympy/utilities/runtests.py", "sympy/testing/runtests.py"],
                "pytest": []}
"""Files the judge keeps pristine for a runner kind (an edit is dropped): the runner script and its settings."""


PYTHON_RELEASED = {"3.5": "2015-09-13", "3.6": "2016-12-23", "3.7": "2018-06-27", "3.8": "2019-10-14",
                   "3.9": "2020-10-05", "3.10": "2021-10-04", "3.11": "2022-10-24", "3.12": "2023-10-02",
                   "3.13": "2024-10-07"}
"""CPython releases, for `later_date`."""


def later_date(as_of: str | None, python: str) -> str | None:
    """A month after the interpreter's release when `as_of` precedes it (when its wheels and the packages that run
    on it were out), else None."""
    released = PYTHON_RELEASED.get(str(python))
    if not (as_of and released and as_of[:10] < released):
        return None
    return (datetime.fromisoformat(released) + timedelta(days=31)).date().isoformat()


def as_of_hint(as_of: str | None, python: str) -> str | None:
    """What to say when a build's date precedes its interpreter's release (matplotlib 3.5's records of Aug 2022 on
    Python 3.11): packages with compiled code had no wheels for it then, so pip builds them from source (pandas,
    numpy in its build environment: slow, and not always possible), where the harness's images, built later, took
    wheels. Pure-Python trees (sympy on 3.9) build fine, so the date is not moved; the hint names a later one."""
    later = later_date(as_of, python)
    if later is None:
        return None
    return (f"packages as of {as_of[:10]}, before Python {python} ({PYTHON_RELEASED[str(python)]}): compiled ones "
            f"build from source; `--as-of {later}` takes their wheels")


def parse_as_of(value: str | None, records: list[dict]) -> str | None:
    """The date a build resolves its packages as of: "records" (the newest `created_at` of the records), "none"
    or None (undated: today's index), or an ISO 8601 date or datetime."""
    if value in (None, "", "none"):
        return None
    if value == "records":
        return records_date(records)
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise EnvError(f"--as-of {value!r}: give an ISO 8601 date (2020-07-01, 2020-07-01T00:00:00Z), "
                       f"'records' or 'none'") from None
    return value


def group_records(records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Records by (repo, version): one environment each."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        out.setdefault((str(r["repo"]), str(r["version"])), []).append(r)
    return out


def tree_requirements(report: dict) -> list[str]:
    """The requirements of the local trees a pip installation report installs (their requested extras and the
    target interpreter's markers applied; markers dropped), other local trees left out."""
    out = []
    for item in report.get("install", []):
        if "dir_info" not in item.get("download_info", {}):
            continue
        extras = item.get("requested_extras") or []
        for line in item.get("metadata", {}).get("requires_dist") or []:
            req = Requirement(line)
            if req.url or (req.marker is not None and not any(
                    req.marker.evaluate({**report.get("environment", {}), "extra": e}) for e in [*extras, ""])):
                continue
            out.append(f"{req.name}{'[' + ','.join(sorted(req.extras)) + ']' if req.extras else ''}{req.specifier}")
    return out
