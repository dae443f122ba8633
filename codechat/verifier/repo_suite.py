"""One test run of a SWE-bench environment (runner `swebench`): the spec's test command with the test patch's
directives, run by `sandbox/suite_runner.py` under the workspace sandbox, its log read by the official parser of
the repository (`swebench.harness.log_parsers.MAP_REPO_TO_PARSER`), so a status means what it means in the
harness. A test passes only when the parser reads it as PASSED (or XFAIL, which the harness counts as passing) and
the runner's recorder saw the runner report it as a success and never as a failure: a forged log line passes
nothing. The record comes back on the private result pipe with the run's nonce, exactly once.

An instance that cannot be judged here is not run (`unjudgeable_reason`, for the judge and
`bench/swebench_gold.py` alike): a FAIL_TO_PASS test needs the internet, or a record id holds a path of the machine the record was made on
that the repository's parser never names so (`machine_paths`).
"""
from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

from codechat.sandbox import isolation
from codechat.sandbox.workspace import run_isolated
from codechat.verifier.repo_env import TestEnv
from codechat.verifier.repo_run import MAX_OUTPUT_BYTES, TestRun
from codechat.verifier.swebench_spec import parse_test_cmd

SUITE_RUNNER = str(Path(__file__).resolve().parents[1] / "sandbox" / "suite_runner.py")
PASSING = ("PASSED", "XFAIL")
_ANY_MISSING = re.compile(r"No module named '([\w.]+)'")


def directives(repo: str, test_patch: str) -> list[str]:
    """The harness's test directives for a test patch (django: module labels; others: file paths)."""
    from swebench.harness.test_spec.python import get_test_directives  # optional dependency
    return get_test_directives({"repo": repo, "test_patch": test_patch})


def path_directives(repo: str, paths: list[str]) -> list[str]:
    """The directives the harness would give for test files `paths` (the agent's run_tests)."""
    return directives(repo, "".join(f"diff --git a/{p} b/{p}\n" for p in paths))


def parse_log(repo: str, log: str) -> dict[str, str]:
    """{test name: PASSED|FAILED|SKIPPED|ERROR|XFAIL} as the harness's parser for `repo` reads the log."""
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER  # optional dependency
    return MAP_REPO_TO_PARSER[repo](log, None)


def _parser_names(repo: str, test_id: str) -> set[str]:
    """The names the repository's official parser gives a test reported as `PASSED test_id`: `{test_id}` for a
    repository it does not know, or without the swebench package (the id as pytest prints it)."""
    try:
        return set(parse_log(repo, f"PASSED {test_id}\n"))
    except Exception:  # noqa: BLE001 - a record names any repository: some parsers need more than a log line
        return {test_id}  # (the JavaScript ones read the test spec), and the record's text is hostile


# an absolute path of 3+ components in a parameter: where a parameter or a value starts (not inside a relative
# path or glob, `tests/**/doc/a.py`, after a drive, `c:/x`, or a scheme, `http://`)
_ABS_PATH = re.compile(r"(?<![^\s,=(\[{'\"-])(?:/[^/\s\[\]]+){3,}")


def machine_paths(repo: str, ids: list[str]) -> list[tuple[str, str]]:
    """(id, path) for each record id whose parameter part (`[...]`) holds an absolute path of 3+ components that
    the repository's log parser never gives back: it names the test otherwise (pydicom's, pylint's and requests'
    parser shortens a parameter that starts with an absolute path to its last part), so no run's log holds the
    id. Such ids name files of the machine the record was made on
    (`test_x[/n/fs/.../pydicom__pydicom__2.2/pydicom/data/test_files/a.dcm-data0]`). A path the parser keeps
    (pytest's own `test_get_cache_dir[/tmp/pycs-/home/projects/src/foo.py-...]`, a literal of the test) and a
    one-part path the parser made (pylint's `test_stdin[/mymodule.py-...]`) are not. Not caught: a machine's path
    in the id of a repository whose parser keeps paths as they are (nothing in the ids tells it from a literal)."""
    out = []
    for t in ids:
        # pytest joins parameters with '-': one that starts with '/' starts a path of its own
        paths = [m[0] for part in re.split(r"-(?=/)", t.partition("[")[2]) for m in _ABS_PATH.finditer(part)]
        names = _parser_names(repo, t) if paths else set()
        lost = next((p for p in paths if not any(p in name for name in names)), None)
        if lost:
            out.append((t, lost))
    return out


def _tree_root(test_id: str, path: str) -> str:
    """The directory of `path` above the repository's tree (the parts before the id's top-level directory, e.g.
    `pydicom`), else the path's directory."""
    top, parts = test_id.split("::")[0].split("/")[0], path.split("/")
    cut = next((i for i in range(2, len(parts) - 1) if parts[i] == top), len(parts) - 1)
    return "/".join(parts[:cut])


def machine_path_reason(repo: str, fail_to_pass: list[str], pass_to_pass: list[str]) -> str | None:
    """Why no environment can judge an instance some of whose ids hold a path of another machine
    (`machine_paths`): the harness counts a record id missing from the log as failed, so the instance never
    resolves anywhere; or None."""
    found = {name: machine_paths(repo, ids) for name, ids in (("FAIL_TO_PASS", fail_to_pass),
                                                              ("PASS_TO_PASS", pass_to_pass))}
    hits = [h for name in found for h in found[name]]
    if not hits:
        return None
    counts = " and ".join(f"{len(found[name])} of its {name} ids" for name in found if found[name])
    roots = list(dict.fromkeys(_tree_root(t, path)[:200] for t, path in hits))  # a record's text: kept short
    more = f" and {len(roots) - 1} other director{'y' if len(roots) == 2 else 'ies'}" if len(roots) > 1 else ""
    return (f"{counts} name files under {roots[0]}{more} (the machine the record was made on): no environment can "
            f"run them")


def unjudgeable_reason(repo: str, fail_to_pass: list[str], pass_to_pass: list[str],
                       env: TestEnv | None) -> str | None:
    """Why an instance cannot be judged here, or None: some FAIL_TO_PASS test needs the internet (its environment's
    `offline_skip`: `TestEnv.offline_reason`), or some record id can be produced by no run (`machine_path_reason`).
    The judge answers `env_error` with it; `bench/swebench_gold.py` lists the instance under "skipped"."""
    return (env.offline_reason(fail_to_pass) if env is not None else None) \
        or machine_path_reason(repo, fail_to_pass, pass_to_pass)


def parser_keys(repo: str, seen: dict[str, list[str]]) -> dict[str, list[str]]:
    """The recorder's outcomes by pytest node id, also under the names the repository's parser gives those ids:
    up to the first space (`-rA` lines split there), and the parser's own rewriting (pylint's shortens a
    parameter that is an absolute path to its last part: `test_stdin[/tmp/tree/tests/mymodule.py-...]` is
    `test_stdin[/mymodule.py]`), and without the `::()` that pytest before 4.0 puts in a class's ids (a class
    instance's collector, `a.py::TestK::()::test_x`; its report lines say `a.py::TestK::test_x`). Ids that share a
    name share their outcomes, so one failure fails the name."""
    out = {k: list(v) for k, v in seen.items()}
    for k, v in seen.items():
        head, bracket, params = k.partition("[")  # a parameter's id may hold any text: left as it is
        plain = head.replace("::()::", "::") + bracket + params
        for alias in {k.split()[0], plain, plain.split()[0], *parse_log(repo, f"PASSED {plain}\n")} - {k}:
            out.setdefault(alias, []).extend(v)
    return out


def agrees(name: str, status: str, seen: dict[str, list[str]]) -> bool:
    """A parsed PASSED/XFAIL that the recorder backs: it saw that test (same key) succeed and never fail."""
    got = seen.get(name, [])
    return status in PASSING and "pass" in got and "fail" not in got


def run_suite(root: Path, env: TestEnv, targets: list[str], timeout_s: float, max_output_bytes: int = 16384,
              hide_paths: tuple[str, ...] = (), memory_mb: int = 4096) -> TestRun:
    """Run the environment's test command on `targets` (the harness's directives: `directives`,
    `path_directives`) in the workspace at root."""
    cmd = parse_test_cmd(env.test_cmd)
    nonce = secrets.token_hex(16)
    spec = {"nonce": nonce, "root": str(root), "kind": cmd["kind"], "script": cmd["script"],
            "args": cmd["args"] + list(targets), "cwd": "", "pythonpath": env.pythonpath,
            "environ": env.environ, "writable": True, "home": str(Path(env.dir) / env.home) if env.home else ""}
    limits = isolation.Limits(cpu_s=int(timeout_s) + 1, memory_mb=memory_mb, nproc=64, nofile=512, fsize_mb=64)
    res = run_isolated([env.interpreter, "-I", SUITE_RUNNER, "{fd}"], root, timeout_s=timeout_s, limits=limits,
                       max_output_bytes=max(max_output_bytes, MAX_OUTPUT_BYTES), hide_paths=hide_paths, channel=True,
                       stdin=(json.dumps(spec) + "\n").encode(), binds=tuple(env.host_dirs()))
    output = res.output
    if res.status == "timeout":
        return TestRun("timeout", output=output, duration_s=res.duration_s)
    if res.status == "error":
        return TestRun("env_error", output=output, duration_s=res.duration_s, message=output.strip()[-300:])
    records = []
    for line in res.channel.decode("utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("nonce") == nonce:
            records.append(rec)
    if len(records) != 1:
        why = "the test run ended before reporting (early exit or crash)" if not records else \
            "more than one result record (forged)"
        if not records and "codechat sandbox launch failed" in output:
            return TestRun("env_error", output=output, duration_s=res.duration_s,
                           message=output.strip().splitlines()[-1][:300])
        return TestRun("error", output=output + f"\n[judge] {why}", duration_s=res.duration_s, message=why)
    rec = records[0]
    if rec.get("error") and not _ANY_MISSING.search(str(rec["error"])):  # the runner is imported from the tree
        # (sympy's runtests, pytest's own): a change that breaks it has no test result, like an early exit
        return TestRun("error", output=output, duration_s=res.duration_s, message=str(rec["error"])[:300])
    seen = {str(k): [str(x) for x in v] for k, v in (rec.get("seen") or {}).items() if isinstance(v, list)}
    if cmd["kind"] == "pytest":
        seen = parser_keys(env.repo, seen)
    statuses = parse_log(env.repo, output)
    tests = {name: agrees(name, status, seen) for name, status in statuses.items()}
    forged = sorted(n for n, s in statuses.items() if s in PASSING and not tests[n])
    run = TestRun("ok", tests, [], list(rec.get("tampered", [])), output, res.duration_s, exit_code=rec.get("exit"))
    if forged:
        run.output += f"\n[judge] read as passed in the log but not reported passed by the runner: {forged[:5]}"
    if not any(tests.values()):  # a module the tree does not hold is missing: the judge asks whether the base
        # lacks it too (then it is the environment's fault: env_error), as for the pytest runner's collection errors
        text = str(rec.get("error") or "") + "\n" + output  # any wording: pytest's "Error importing plugin ..." too
        run.collect_errors = [f"ModuleNotFoundError: No module named '{m[1]}'" for m in _ANY_MISSING.finditer(text)][:5]
    return run
