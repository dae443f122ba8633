"""The built environment's pytest tried on a one-test file, its log read by the repository's official parser, and
replaced when a build date older than the interpreter gave it one that cannot run there, or when it names tests
otherwise than the records do.

A spec that names `pytest` unpinned (requests: Python 3.9, `packages: pytest`) had the harness's images take the
pytest of the day they were built. A build dated by its records (requests 2.10's of June 2016) takes that day's
pytest instead, 2.9.2, which stops on Python 3.9 before running a test (`warn_about_missing_assertion`: an
INTERNALERROR): such a pytest predates the interpreter and never ran on it. The harness's pytest ran the tests
its records name, so a pytest that cannot run one test is never the harness's: it is installed again as of a
month after the interpreter's release (`later_date`), the spec's pytest pin kept.

The other way round, an interpreter too old for a pip with `--uploaded-prior-to` (3.6 to 3.8) leaves a dated build
undated, and an unpinned pytest is today's newest for it (pytest 8 on 3.8), which no longer calls the nose-style
`setup` methods pydicom 2.0's tests rely on (67 of its PASS_TO_PASS tests of `test_filewriter.py` failed). The
pytest of the build's date is found with codechat's own pip, asked for the spec's interpreter (`dated_version`),
and installed pinned (`date_runner`); a pytest the spec pins, or that CONDA_PYTHON_CAPS caps for the interpreter
(3.6), is kept.

A third difference is in the names of tests: pytest 8 names duplicate parameter ids that end in a digit `_N`
(`[100-100_0]`), earlier ones without the `_` (PYTEST8_DUPLICATE); records made by images with pytest 8 name them
so, and when the environment's pytest collects their other names instead, pytest 8.0 is installed (`name_runner`).
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from codechat.tasks.repo import _str_list
from codechat.verifier.repo_suite import parse_log  # the suite runner's parser: what the judge reads
from codechat.verifier.swebench_spec import CONDA_PYTHON_CAPS, later_date, spec_packages

PROBE_ID = "test_codechat_probe.py::test_probe"


def runner_runs(repo: str, venv: Path, args: list[str], environ: dict[str, str],
                timeout_s: float = 300) -> tuple[bool, str]:
    """Whether the venv's pytest, given the spec's test command arguments, runs a one-test file in an empty
    directory and the repository's official log parser reads that test as passed; and the output's tail."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, PROBE_ID.split("::")[0]).write_text("def test_probe():\n    assert [1] == [1]\n", encoding="utf-8")
        # its own rootdir: no ini file or conftest.py of a directory above (the build's temporary directory) applies
        Path(tmp, "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        env = {**os.environ, **environ, "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}"}
        env.pop("PYTHONPATH", None)
        try:
            res = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", *args, PROBE_ID.split("::")[0]],
                                 cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout_s)
            out = res.stdout + res.stderr
        except subprocess.TimeoutExpired:
            return False, f"timed out after {timeout_s:.0f}s"
    try:
        ok = parse_log(repo, out).get(PROBE_ID) == "PASSED"
    except Exception:  # noqa: BLE001 - a log the parser cannot read is a runner that does not run
        ok = False
    return ok, "\n".join(out.strip().splitlines()[-6:])[-1000:]


def pytest_line(spec: dict, env_dir: Path) -> str:
    """The spec's requirement line for pytest (its package list, pip packages or the requirements file the build
    wrote), else `pytest`."""
    pkgs = str(spec.get("packages") or "")
    lines = list(spec.get("pip_packages") or [])
    if pkgs == "requirements.txt" and (env_dir / "requirements.txt").is_file():
        lines += (env_dir / "requirements.txt").read_text(encoding="utf-8").splitlines()
    elif pkgs and pkgs != "environment.yml":
        lines += spec_packages(pkgs)
    for line in lines:
        try:
            if canonicalize_name(Requirement(line.strip()).name) == "pytest":
                return line.strip()
        except InvalidRequirement:
            continue
    return "pytest"


def check_runner(repo: str, spec: dict, runner: dict, env_dir: Path, as_of: str | None, step, log=print) -> dict:
    """Probe the environment's pytest (`runner_runs`); when it cannot run and the build's date precedes the
    interpreter's release, install the spec's pytest again as of `later_date` (`step(cmd, as_of)` runs a pip
    command in the venv) and probe again. The manifest's record of it: {"runs"[, "tail"][, "reinstalled"]}."""
    ok, tail = runner_runs(repo, env_dir, runner["args"], runner["environ"])
    out: dict = {"runs": ok}
    later = later_date(as_of, str(spec["python"]))
    if not ok and later:
        cmd = f"python -m pip install -q --upgrade {shlex.quote(pytest_line(spec, env_dir))}"
        step(cmd, later)
        ok, tail = runner_runs(repo, env_dir, runner["args"], runner["environ"])
        out.update(runs=ok, reinstalled={"cmd": cmd, "as_of": later})
        log(f"{repo}: the pytest of {as_of[:10]} does not run on Python {spec['python']}: installed again as of "
            f"{later} ({'runs' if ok else 'still does not run'})")
    if not ok:
        out["tail"] = tail
        log(f"{repo}: its pytest does not run a one-test file: {(tail.splitlines() or [''])[-1][:200]}")
    return out


def dated_version(line: str, python: str, as_of: str, timeout_s: float = 300) -> str | None:
    """The version of requirement `line` that pip would have chosen on Python `python` as of `as_of`, asked of
    codechat's own pip (`pip download --uploaded-prior-to`, wheels only, the package index alone); None when
    that pip cannot say (too old, no network, no such wheel)."""
    name = canonicalize_name(Requirement(line).name)
    env = {**{k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL")},
           "PIP_CONFIG_FILE": os.devnull}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            res = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                                  "--python-version", python, "--uploaded-prior-to", as_of, "-d", tmp, line],
                                 env=env, capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            return None
        for f in os.listdir(tmp) if res.returncode == 0 else []:
            m = re.match(r"([^-]+)-([^-]+)-.*\.whl$", f)
            if m and canonicalize_name(m[1]) == name:
                return m[2]
    return None


def date_runner(spec: dict, env_dir: Path, as_of: str, step, log=print) -> dict:
    """Pin the environment's pytest to the version of `as_of` when the spec leaves it unpinned and the build could
    not be dated (see the module docstring); `step(cmd)` runs a pip command in the venv. The manifest's record:
    {"as_of", "version"} or {"as_of", "unavailable"}; {} when the spec pins pytest or CONDA_PYTHON_CAPS caps it
    for the interpreter (3.6: below 7, as the harness had it)."""
    line = pytest_line(spec, env_dir)
    if "==" in line or "pytest" in CONDA_PYTHON_CAPS.get(str(spec["python"]), {}):
        return {}
    version = dated_version(line, str(spec["python"]), as_of)
    if version is None:
        log(f"pytest as of {as_of[:10]}: codechat's pip could not tell; the newest pytest for Python "
            f"{spec['python']} stays")
        return {"as_of": as_of, "unavailable": True}
    ok = step(f"python -m pip install -q {shlex.quote(f'pytest=={version}')}")
    log(f"pytest as of {as_of[:10]}: {version}{'' if ok else ' (its install failed)'}")
    return {"as_of": as_of, "version": version, **({} if ok else {"failed": True})}


PYTEST8_DUPLICATE = re.compile(r"(\d)_(\d+)\]$")
"""pytest 8's name for the N-th of duplicate parameter ids that end in a digit (`[100-100_0]`); pytest 7 and
earlier write `[100-1000]`. The harness's images took the pytest of the day they were built (8.x for unpinned
specs), so a record made there names such tests the pytest 8 way, and an environment dated before pytest 8
(matplotlib 3.5's records on Python 3.11: pytest 7.2) runs them under other names: the record's ids are missing."""


def pytest7_name(test_id: str) -> str | None:
    """pytest 7's name of a test that pytest 8 names `..._N]` (PYTEST8_DUPLICATE), or None."""
    m = PYTEST8_DUPLICATE.search(test_id)
    return f"{test_id[:m.start()]}{m[1]}{m[2]}]" if m else None


def record_ids(record: dict) -> list[str]:
    """A record's FAIL_TO_PASS and PASS_TO_PASS ids (JSON text, as SWE-bench writes them, or lists)."""
    where = str(record.get("instance_id"))
    return [i for key in ("FAIL_TO_PASS", "PASS_TO_PASS") for i in _str_list(record.get(key) or [], key, where)]


def collected_ids(env_dir: Path, src: Path, files: list[str], environ: dict[str, str],
                  timeout_s: float = 600) -> set[str]:
    """The test ids the venv's pytest collects from `files` of the tree `src` (`--collect-only -q`; without its
    warnings plugin: a tree that makes warnings errors, such as matplotlib's deprecated `pkg_resources` namespace
    before 3.7, would stop collection, which the judge's runner handles and names do not depend on)."""
    env = {**os.environ, **environ, "PATH": f"{env_dir / 'bin'}:{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)
    try:
        res = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pytest", "--collect-only", "-q",
                              "-p", "no:cacheprovider", "-p", "no:warnings", *files], cwd=src, env=env, capture_output=True, text=True,
                             timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return set()
    return {line.strip() for line in res.stdout.splitlines() if "::" in line}


def name_runner(records: list[dict], spec: dict, env_dir: Path, src: Path, environ: dict[str, str], step,
                log=print) -> dict:
    """Install pytest 8.0 when the records name duplicate parameters the pytest 8 way (PYTEST8_DUPLICATE) and
    the environment's pytest collects none of those ids but their pytest 7 names (checked at the environment
    commit's tree, on the files the ids name); a spec's `==` pin is kept. `step(cmd)` runs a pip command in the
    venv (undated: pytest 8 came after such a build's date). The manifest's record: {} when no record id has the
    form, else {"ids", "collected"[, "pytest7_names", "installed"]}."""
    ids = sorted({i for r in records for i in record_ids(r) if PYTEST8_DUPLICATE.search(i)})
    if not ids:
        return {}
    files = sorted({i.split("::")[0] for i in ids if (src / i.split("::")[0]).is_file()})
    found = collected_ids(env_dir, src, files, environ) if files else set()
    out: dict = {"ids": len(ids), "collected": sum(i in found for i in ids)}
    if out["collected"] or not any(pytest7_name(i) in found for i in ids):
        return out
    out["pytest7_names"] = sum(pytest7_name(i) in found for i in ids)
    if "==" in pytest_line(spec, env_dir):
        log(f"{len(ids)} record ids use pytest 8's names for duplicate parameters; the spec pins pytest: kept")
        return out
    ok = step("python -m pip install -q 'pytest>=8.0,<8.1'")
    found = collected_ids(env_dir, src, files, environ)
    out.update(installed="pytest>=8.0,<8.1" if ok else None, collected=sum(i in found for i in ids))
    log(f"{len(ids)} record ids use pytest 8's names for duplicate parameters (`[100-100_0]`), the environment's "
        f"pytest 7's (`[100-1000]`): pytest 8.0 installed, {out['collected']} of them collected")
    return out
