"""Test environments built from the official SWE-bench specs (the optional `swebench` package), without Docker.

    codechat repo env build swe-bench-lite-test.json --mirrors DIR --out ENVS [--only sympy] [--sources SRC]

For each (repo, version) of a record set, `swebench.harness.constants.MAP_REPO_VERSION_TO_SPECS` gives the Python
version, the packages (`requirements.txt`: the repository's own file at the environment commit, read from the git
mirror and cleaned with the harness's `clean_requirements`; `environment.yml`; or a package list), the pip pins,
`pre_install` and `install` commands and the test command. The build makes ENVS/<owner>__<name>-<version>/:
a venv with that interpreter (pyenv's), `src/`: the repository at the records' `environment_setup_commit` (a
shared clone of the mirror, its git submodules filled from their own mirrors under DIR, as the image build's
install fetches them) with `pre_install` and `install` run in it as the image build runs them, `overlay/`:
every file that install created or changed in the tree (pytest's `_version.py`, compiled extensions), which the
judge lays over each fresh tree (`overlays/<commit>`: a base commit's own install's, for its trees), `env.json`
(what the judge reads) and `manifest.json` (what was done: each
step's command, exit status, seconds and output tail; packages pip could not install; steps skipped because
they need root or Docker, such as `apt-get` and `locale-gen`).
What this simplifies: conda packages are installed with pip, under `CONDA_TO_PYPI`'s name where the conda name
is another package's on PyPI (or none at all), else under the same name (those pip lacks are listed in the
manifest as `missing`); the harness's per-instance `install` re-run before testing is replaced by the overlay
(the tree under test comes first on sys.path, the editable install supplies metadata and entry points) and, for
a base commit whose install resolves some packages to other versions, a layer venv holding those (`_layers`).
Unpinned packages move on after a spec was written (docutils dropped the `roman` module sphinx 3.x imports): with
`as_of` (by default the newest `created_at` of the version's records) every pip step resolves as of that date
(pip's `--uploaded-prior-to`; a step that cannot, such as a pin released later, runs again undated), see `_step`.
Reading the specs, the records and the mirrors: `swebench_spec.py`; what a commit's tree holds: `swebench_tree.py`;
library sources a build would download, given locally (`--sources`: matplotlib's freetype): `swebench_sources.py`;
data files the tests download (pydicom's), from mirrors into the environment's `home/`: `swebench_data.py`.
A pytest the build's date gives that cannot run on the spec's interpreter is installed again as of the
interpreter's release; a build that cannot be dated (3.7, 3.8) gets its date's pytest pinned; records that name
duplicate parameters as pytest 8 does get pytest 8 when the environment's names them otherwise (`swebench_probe.py`).
Tests that need the internet at test time (requests' calls to httpbin.org; the harness's containers had a network,
the sandbox has none) are not in the specs: `--offline-skip FILE` gives them, as `offline_skip` marks in env.json.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from packaging.utils import canonicalize_name

from codechat.tasks.submodules import SubmoduleError, fill_submodules
from codechat.verifier.repo_env import EnvError, TestEnv, env_dirname, resolve_python
from codechat.verifier.swebench_spec import (RUNNER_FILES, as_of_hint, conda_to_pypi, environment_yml_packages,
                                             find_mirror, parse_as_of, parse_test_cmd, requirements_txt, spec_for,
                                             build_environ, offline_pre_install, python_caps, spec_packages,
                                             tree_pythonpath, tree_requirements)
from codechat.verifier.swebench_data import fill_test_data
from codechat.verifier.swebench_probe import check_runner, date_runner, name_runner
from codechat.verifier.swebench_sources import link_sources, linked_version, prepare_sources
from codechat.verifier.swebench_tree import changed_packaging, copy_overlay, without_absent

DOCKER_ONLY = re.compile(r"\b(?:apt-get|apt|locale-gen|conda|useradd|chmod|chown)\b|/etc/")
STEP_TIMEOUT_S = 3600
PIP_MIN_DATED = "26"
"""The oldest pip with `--uploaded-prior-to`, which a venv's pip is upgraded to when the build is dated."""
PIP_MIN_DATED_LEGACY = "25"
"""pip below this still installs a tree in editable mode through `setup.py develop` when its build backend has
no PEP 660 hook (an editable install that fails so runs again with such a pip)."""
PIP_NEWEST_FOR = {"3.6": "21.3.1", "3.7": "24.0", "3.8": "25.0.1"}
"""The newest pip that runs on each Python older than PIP_MIN_DATED needs, installed when such a build is undated
(the pip a 3.6 venv starts with is 18.1)."""
INDEX_ONLY = "pip-index-only"
"""A file in a venv whose pip steps all run on the package index alone, without pip's configuration files,
find-links or extra indexes: undated builds on PIP_NEWEST_FOR's Pythons. A plain file index lists releases without
their Requires-Python, so pip takes ones the old interpreter cannot run (asgiref 3.12 for django 3.x on 3.6: the
old resolver stops there, today's backtracks for hours); the package index says which Python each file needs."""


NEEDS_LEGACY_PIP = ("build_editable", "no such option: --no-use-pep517")
"""What an editable install's failure says when only a pip below PIP_MIN_DATED_LEGACY can run it."""
EDITABLE = re.compile(r"(?<=\s)(?:-e|--editable)(?:\s+|=)(?=\S)")


def _step(cmd: str, cwd: Path, venv: Path, steps: list, timeout_s: float = STEP_TIMEOUT_S,
          as_of: str | None = None, index_only: bool = False, environ: dict | None = None) -> bool:
    """Run one build command in the venv, recording it in `steps`. With `as_of`, a command that runs pip first
    resolves as of that date: PIP_UPLOADED_PRIOR_TO, and no pip configuration files, find-links or extra indexes
    (an index without upload times, such as a local file index, would let later files through); a dated run that
    fails (a pin released later, an index that cannot serve the date) runs again undated. An editable install of
    the tree cannot be dated itself (its build backend would come from that date too, and may not build it): its
    requirements are read from an undated dry run's report, installed as of the date, and then the command runs
    as written, undated, keeping them (they satisfy it). `index_only` (or the venv's INDEX_ONLY file): the package
    index alone. `environ`: variables added for the command (build_environ). Every run is recorded."""
    env = {**os.environ, **(environ or {}), "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}",
           "VIRTUAL_ENV": str(venv), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    if index_only or (venv / INDEX_ONLY).exists():
        env = _index_only(env)
    if as_of and re.search(r"\bpip\b", cmd) and not re.search(r"[;&|<>`$]", cmd):
        dated_env = {**_index_only(env), "PIP_UPLOADED_PRIOR_TO": str(as_of)}
        if not EDITABLE.search(cmd):
            if _run(cmd, cwd, dated_env, steps, timeout_s, as_of):
                return True
        else:
            report = venv / "pip-report.json"
            if _run(f"{cmd} --dry-run --quiet --report {shlex.quote(str(report))}", cwd, env, steps, timeout_s):
                reqs = tree_requirements(json.loads(report.read_text(encoding="utf-8")))
                if reqs:
                    _run("python -m pip install -q " + " ".join(shlex.quote(r) for r in reqs), cwd, dated_env, steps,
                         timeout_s, as_of)
    if _run(cmd, cwd, env, steps, timeout_s):
        return True
    if not (EDITABLE.search(cmd) and any(s in steps[-1]["tail"] for s in NEEDS_LEGACY_PIP)):
        return False
    # a tree whose pinned build backend predates PEP 660 (pylint 2.15's setuptools~=62.6), or a spec that asks for
    # `setup.py develop` itself (scikit-learn's `--no-use-pep517`): the pip that dating needs has neither, as the
    # pip of the harness's images had; that pip runs it, with `wheel` (which its `--no-use-pep517` needs)
    _run(f"python -m pip install -q 'pip<{PIP_MIN_DATED_LEGACY}' wheel", cwd, env, steps, timeout_s)
    ok = _run(cmd, cwd, env, steps, timeout_s)
    _run(f"python -m pip install -q 'pip>={PIP_MIN_DATED}'", cwd, env, steps, timeout_s)
    return ok


def _index_only(env: dict) -> dict:
    """`env` without pip's configuration files, find-links and extra indexes (the package index alone)."""
    return {**{k: v for k, v in env.items() if k not in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL")},
            "PIP_CONFIG_FILE": os.devnull}


def _run(cmd: str, cwd: Path, env: dict, steps: list, timeout_s: float, as_of: str | None = None) -> bool:
    t0 = time.monotonic()
    try:
        res = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
        rc, out = res.returncode, res.stdout + res.stderr
    except subprocess.TimeoutExpired:
        rc, out = 124, f"timed out after {timeout_s:.0f}s"
    steps.append({"cmd": cmd, "rc": rc, "seconds": round(time.monotonic() - t0, 1),
                  "tail": "\n".join(out.strip().splitlines()[-8:])[-2000:], **({"as_of": as_of} if as_of else {})})
    return rc == 0


def _pip(pkgs: list[str], d: Path, steps: list, missing: list, as_of: str | None = None,
         target: Path | None = None) -> None:
    """pip install the lines together; when that fails, one by one, listing those that fail in `missing`. With
    `target`: without dependencies, into that directory."""
    pkgs = [p for p in (x.strip() for x in pkgs) if p and not p.startswith("#")]
    pip = "python -m pip install -q" + (f" --no-deps --target {shlex.quote(str(target))}" if target else "")
    if not pkgs or _step(f"{pip} " + " ".join(shlex.quote(p) for p in pkgs), d, d, steps, as_of=as_of):
        return
    for p in pkgs:
        if not _step(f"{pip} {shlex.quote(p)}", d, d, steps, as_of=as_of):
            missing.append(p)


def _dated_pip(d: Path, steps: list) -> bool:
    """Whether the venv's pip can resolve as of a date, after upgrading it (undated) where its Python allows."""
    # from the package index alone: a plain file index lists the newest pip without its Requires-Python, and
    # the venv's pip takes it and stops (3.9 then stayed undated with pip 23, though pip 26.0.1 runs on it)
    _step(f"python -m pip install -q 'pip>={PIP_MIN_DATED}'", d, d, steps, index_only=True)
    return _step("python -m pip install --help | grep -q -e --uploaded-prior-to", d, d, steps)


def prepare_pip(d: Path, python: str, as_of: str | None, steps: list) -> tuple[str | None, dict]:
    """The venv's pip made ready: dated when `as_of` is given and a dated pip runs on `python`; else, on an old
    Python (PIP_NEWEST_FOR), the newest pip for it, on the package index alone (INDEX_ONLY). Returns the date the
    build resolves as of (None: as of the build) and the manifest's notes about it."""
    if python not in PIP_NEWEST_FOR and as_of and _dated_pip(d, steps):
        return as_of, {"as_of": as_of}
    notes: dict = {"as_of": None}
    if as_of:
        notes["as_of_unavailable"] = (f"{as_of}: no pip with --uploaded-prior-to runs on Python {python}; packages "
                                      "resolved as of the build")
    if python in PIP_NEWEST_FOR:
        (d / INDEX_ONLY).write_text("pip steps use the package index alone (swebench_env.INDEX_ONLY)\n")
        notes["pip_index_only"] = True
        _step(f"python -m pip install -q 'pip=={PIP_NEWEST_FOR[python]}'", d, d, steps)
    return None, notes


def _packages(venv: Path) -> dict[str, str]:
    """{canonical name: version} of the distributions installed in the venv, editable installs left out."""
    res = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json", "--exclude-editable",
                          "--disable-pip-version-check"], capture_output=True, text=True)
    try:
        return {canonicalize_name(p["name"]): p["version"] for p in json.loads(res.stdout)}
    except (ValueError, KeyError, TypeError):
        return {}


def _site(venv: Path) -> Path:
    res = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(res.stdout.strip())


def drop_own_nspkg(venv: Path, src: Path) -> list[str]:
    """Removes the repository's own `-nspkg.pth` files (setup.py's `namespace_packages` under `pip install -e`):
    at every interpreter start they make the namespace package (matplotlib's `mpl_toolkits` before 3.7) from the
    environment's source copy, so a test's subprocess would import the environment commit's `mpl_toolkits`, not the
    tree's; in the harness that file names the one checkout under test. The runner makes the namespace from the
    tree (`suite_runner.legacy_namespaces`). Returns the names removed."""
    gone = []
    for pth in sorted(_site(venv).glob("*-nspkg.pth")):
        if str(src) in pth.read_text(encoding="utf-8", errors="replace"):
            pth.unlink()
            gone.append(pth.name)
    return gone


def _layers(d: Path, python: str, repo: str, installed: dict[str, dict], commit: str, steps: list,
            log=print) -> dict[str, str]:
    """For each base commit whose install resolved some distributions to other versions than the environment
    commit's (pylint's older commits pin `astroid<=2.12.0-dev0`), a layer venv `bases/<commit>`: those versions,
    pip-installed without dependencies into its own site-packages, followed by the environment's (a `.pth` adds
    them), so the tests of that commit import what its own install gave them, as in the harness's per-instance
    install. The repository's own distribution is left out (the tree under test comes first on sys.path).
    {commit: layer directory relative to d}."""
    final, own, out, made = installed.get(commit, {}), canonicalize_name(repo.split("/")[-1]), {}, {}
    for c, pkgs in installed.items():
        want = sorted(f"{n}=={v}" for n, v in pkgs.items() if final.get(n) != v and n != own)
        if c == commit or not want:
            continue
        if tuple(want) in made:  # base commits whose installs gave the same versions share one layer
            out[c] = made[tuple(want)]
            continue
        rel = f"bases/{c[:12]}"
        layer = d / rel
        subprocess.run([python, "-m", "venv", "--without-pip", str(layer)], check=True, capture_output=True)
        site, missing = _site(layer), []
        _pip(want, d, steps, missing, target=site)
        if len(missing) == len(want):
            shutil.rmtree(layer)
            continue
        (site / "_codechat_env.pth").write_text(f"import site; site.addsitedir({str(_site(d))!r})\n",
                                                encoding="utf-8")
        log(f"{d.name}: layer for {c[:12]}: {', '.join(w for w in want if w not in missing)}")
        out[c] = made[tuple(want)] = rel
    return out


def build_swebench_env(repo: str, version: str, records: list[dict], mirrors: Path, out: Path,
                       log=print, as_of: str | None = "records", sources: Path | None = None,
                       offline_skip: dict[str, str] | None = None) -> TestEnv:
    """Build out/<owner>__<name>-<version>/ from the official spec (see the module docstring); `as_of` as
    `parse_as_of` reads it; `sources`: the directory of library sources the build would download
    (`swebench_sources.py`); `offline_skip`: {test id: why} of the tests that need the internet (the specs say
    nothing of it; the harness's containers had a network), kept in env.json for the judge."""
    t_start = time.monotonic()
    as_of = parse_as_of(as_of, records)
    spec = spec_for(repo, version)
    runner = parse_test_cmd(spec["test_cmd"])
    try:
        python = resolve_python(str(spec["python"]))
    except EnvError as e:
        raise EnvError(f"{repo}@{version}: {e}; install it with `pyenv install {spec['python']}`") from None
    mirror = find_mirror(repo, mirrors)
    first = records[0]
    commit = str(first.get("environment_setup_commit") or first["base_commit"])
    env = TestEnv(repo, version, python=str(spec["python"]))
    d = (out / env_dirname(env)).resolve()
    if subprocess.run(["git", "-C", str(mirror), "cat-file", "-e", f"{commit}^{{tree}}"], capture_output=True).returncode:
        # checked before anything is removed: an environment built earlier at d stays usable
        raise EnvError(f"{env.key}: the mirror {mirror} lacks the environment commit {commit} (it may lie on a "
                       f"branch the mirror's history left out, such as a stable branch); nothing was built")
    log(f"{env.key}: venv with {python} in {d}, tree at {commit[:12]}")
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    steps, missing, skipped = [], [], []
    subprocess.run([python, "-m", "venv", str(d)], check=True, capture_output=True)
    if hint := as_of_hint(as_of, str(spec["python"])):
        log(f"{env.key}: {hint}")
    wanted, (as_of, notes) = as_of, prepare_pip(d, str(spec["python"]), as_of, steps)
    if hint:
        notes["as_of_hint"] = hint
    if "as_of_unavailable" in notes:
        log(f"{env.key}: {notes['as_of_unavailable']}")
    src = d / "src"
    for cmd in (["git", "clone", "-q", "--shared", "--no-checkout", str(mirror), str(src)],
                ["git", "-C", str(src), "checkout", "-q", commit]):
        if cmd[3] == "checkout" and (absent := without_absent(src, commit)):
            notes["absent_blobs"] = absent
            log(f"{env.key}: the mirror lacks {', '.join(absent)}: built without")
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode:
            raise EnvError(f"{env.key}: {' '.join(cmd[:3])} failed: {res.stderr.strip()[-300:]}")
    pkgs = spec.get("packages", "")
    if pkgs == "requirements.txt":
        (d / "requirements.txt").write_text(requirements_txt(repo, mirror, commit), encoding="utf-8")
        if not _step(f"python -m pip install -q -r {d / 'requirements.txt'}", d, d, steps, as_of=as_of):
            _pip((d / "requirements.txt").read_text().splitlines(), d, steps, missing, as_of)
    elif pkgs:  # conda packages: an environment.yml or the spec's list
        conda = (environment_yml_packages(repo, mirror, commit, str(first["instance_id"])) if pkgs == "environment.yml"
                 else spec_packages(pkgs))
        conda, notes["conda_to_pypi"] = conda_to_pypi(conda)
        conda = python_caps(conda, str(spec["python"]))
        _pip(conda, d, steps, missing, as_of)
    _pip(list(spec.get("pip_packages", [])), d, steps, missing, as_of)
    own = canonicalize_name(repo.split("/")[-1]) == "pytest"  # pytest-dev/pytest runs its own tree's pytest
    if wanted and as_of is None and runner["kind"] == "pytest" and not own:  # no dated pip: its pytest dated
        notes["runner_as_of"] = date_runner(spec, d, wanted, lambda cmd: _step(cmd, d, d, steps),
                                            lambda m: log(f"{env.key}: {m}"))
    # the harness runs `install` again in every instance's container, at its base commit: what an instance's
    # packaging files resolve differently from the environment commit's comes from installing there once
    installed, overlays = {}, {}
    groups = changed_packaging(src, commit, {str(r["base_commit"]) for r in records})
    pre_install, offline = offline_pre_install(list(spec.get("pre_install", [])))
    if offline:
        notes["skipped_offline"] = offline
    prepared, used = prepare_sources(repo, mirror, commit, sources, d, log)
    if used:
        notes["build_sources"] = used
    build_env = build_environ(repo, d, set(prepared))
    if build_env:
        notes["build_environ"] = build_env
    for c in [*groups, commit]:
        if c != commit:
            log(f"{env.key}: install at {c[:12]} (its packaging files differ; "
                f"{len(groups[c])} base commit(s) with these files)")
        # from a clean tree, as each instance's image builds: an earlier commit's build outputs would stay (0.22:
        # a stale `_online_lda` extension shadowed the base's `_online_lda.py`) and go into this commit's overlay
        if not _step(f"git clean -q -f -d -x && git checkout -q -f {c}", src, d, steps):
            if c == commit:
                raise EnvError(f"{env.key}: git checkout {c[:12]} failed: {steps[-1]['tail'][-200:]}")
            continue
        try:  # a checkout leaves submodules empty; the install may need them (astropy 1.3's astropy_helpers)
            if filled := fill_submodules(src, c, src, mirrors, repo):
                notes.setdefault("submodules", {})[c] = filled
        except SubmoduleError as e:
            if c == commit:
                raise EnvError(f"{env.key}: {e}") from None
            log(f"{env.key}: not installed at {c[:12]}: {e}")
            continue
        link_sources(src, prepared)
        ok = True
        for cmd in pre_install + ([spec["install"]] if spec.get("install") else []):
            if DOCKER_ONLY.search(cmd):
                skipped.append(cmd)
                continue
            log(f"{env.key}: {cmd[:100]}")
            ok = _step(cmd, src, d, steps, as_of=as_of, environ=build_env) and ok
            if not ok and c == commit:
                _write_manifest(d, spec, commit, python, steps, missing, skipped, [], t_start, notes)
                last = (steps[-1]["tail"].splitlines() or [""])[-1]
                raise EnvError(f"{env.key}: `{cmd[:80]}` failed: {last[:200]} (manifest: {d / 'manifest.json'})")
        for member in groups.get(c, [c]):
            installed[member] = _packages(d)
        if c != commit and ok:  # what this base's install compiled or generated, for its trees (last: overlay/)
            copy_overlay(src, d / "overlays" / c[:12])
            overlays.update({member: f"overlays/{c[:12]}" for member in groups[c]})
    if runner["kind"] == "pytest" and not own:
        notes["runner_probe"] = check_runner(repo, spec, runner, d, as_of,
                                             lambda cmd, date: _step(cmd, d, d, steps, as_of=date), log)
        if named := name_runner(records, spec, d, src, runner["environ"], lambda cmd: _step(cmd, d, d, steps), log):
            notes["runner_names"] = named
    for name, (source, _) in prepared.items():  # what the built extension links, as the manifest says
        used[name]["linked"] = linked = linked_version(source, d)
        if linked != used[name]["version"]:
            log(f"{env.key}: the built extension links {name} {linked!r}, not {used[name]['version']}")
    if dropped := drop_own_nspkg(d, src):
        notes["nspkg_dropped"] = dropped
    bases = _layers(d, python, repo, installed, commit, steps, log)
    if bases:
        notes["bases"] = {c: {"dir": rel, "packages": installed[c]} for c, rel in bases.items()}
    if offline_skip:
        notes["offline_skip"] = len(offline_skip)
    environ = {}
    for cmd in spec.get("eval_commands", []):
        m = re.fullmatch(r"export (\w+)=(\S+)", cmd.strip())
        if m:
            environ[m[1]] = m[2]
        else:
            skipped.append(cmd)
    data = fill_test_data(repo, mirror, [commit, *sorted({str(r["base_commit"]) for r in records})], mirrors, d,
                          lambda m: log(f"{env.key}: {m}"))
    notes.update({"test_data": data} if data else {})
    overlay = copy_overlay(src, d / "overlay")
    built = TestEnv(repo, version, python=str(spec["python"]), pythonpath=tree_pythonpath(src),
                    runner="swebench", test_cmd=spec["test_cmd"], environ={**runner["environ"], **environ},
                    protected=RUNNER_FILES[runner["kind"]], bases=bases, overlays=overlays,
                    offline_skip=dict(offline_skip or {}), dir=str(d), home=data.get("home", "") if data else "")
    rec = {k: v for k, v in built.__dict__.items() if k not in ("dir", "layer", "overlay")}
    (d / "env.json").write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")
    _write_manifest(d, spec, commit, python, steps, missing, skipped, overlay, t_start, notes)
    return built


def _write_manifest(d: Path, spec: dict, commit: str, python: str, steps: list, missing: list, skipped: list,
                    overlay: list, t_start: float, notes: dict) -> None:
    (d / "manifest.json").write_text(json.dumps({
        "spec": spec, "commit": commit, "python": python, **notes, "steps": steps, "missing": missing,
        "skipped_docker_only": sorted(set(skipped)), "overlay": overlay, "build_s": round(time.monotonic() - t_start, 1)},
        indent=1, default=str) + "\n", encoding="utf-8")
