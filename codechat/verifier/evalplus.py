"""MBPP+ / HumanEval+ scoring as evalplus does it: the main evalplus files hold test inputs only, so expected
outputs come from running the reference solution on them in the sandbox (once; cached on disk), and a candidate
passes `base` when it matches on the original inputs and `plus` when it matches on base + extra inputs, floats
within the task's `atol`. Outputs are compared as plain data in the verifier's judge, never by the candidate.
MBPP+ OriginFmt files carry expected outputs (tasks/originfmt.py): those are used, and the reference is run
against them once for its time and as a check.

Simplification: one time limit per task for all its inputs (the larger of the verifier's limit and 4x + 2 s the
reference's time), where evalplus times each input.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from codechat import CodechatError
from codechat.sandbox.wire import dumps, loads
from codechat.tasks import Task
from codechat.verifier.verdict import Verdict
from codechat.verifier.extract import extract_code

# evalplus's special oracles for MBPP+: outputs compared as sets (the reference returns set-ordered sequences,
# whose order varies with string hashing), or only checked to be not None.
SET_EQ = {"similar_elements", "find_char_long", "common_in_nested_lists", "extract_singly", "larg_nnum",
          "intersection_array", "find_dissimilar", "Diff"}
NOT_NONE = {"check_str", "text_match_three", "text_starta_endb"}

REFERENCE_TIMEOUT_S = 180.0
"""Time limit for running a reference solution on all its inputs (MBPP+ tasks 255 and 599 take ~40 s)."""
REFERENCE_MEMORY_MB = 6144
"""Memory limit for running a reference on all its inputs (MBPP+ 255 and 599 take GBs on their extreme inputs)."""


def is_evalplus(task: Task) -> bool:
    return "base_input" in task.metadata and "plus_input" in task.metadata


def oracle(task: Task) -> str | None:
    """evalplus's comparison rule of a task: `set`, `not_none`, or None (equality, floats within atol). MBPP+
    main files name it by entry point; MBPP+ OriginFmt records carry it (tasks/originfmt.py)."""
    if task.metadata.get("oracle"):
        return task.metadata["oracle"]
    if str(task.task_id).startswith("Mbpp/") and task.entry_point in SET_EQ | NOT_NONE:
        return "set" if task.entry_point in SET_EQ else "not_none"
    return None


def with_oracle(code: str, task: Task, digest: bool = False) -> str:
    """Append a wrapper that maps the entry point's output as evalplus's oracle compares it, or to a SHA-256 of its
    repr when outputs are too large to send (MBPP+ 255 returns ~0.9 GB on its extreme inputs). It runs in the
    candidate's process, but only normalises: the judge still compares the results, and matching a digest needs
    the right answer. The not-None rule is evalplus's: a bool is compared as it is, anything else by whether it is
    not None."""
    ep, rule = task.entry_point, oracle(task)
    if rule is None and not digest:
        return code
    body = "_cc_orig(*a, **k)"
    if rule == "set":
        body = f"set({body})"
    elif rule == "not_none":
        body = f"(lambda r: r if isinstance(r, bool) else r is not None)({body})"
    if digest:
        body = f"'sha256:' + __import__('hashlib').sha256(repr({body}).encode()).hexdigest()"
    return f"{code}\n\n_cc_orig = {ep}\ndef {ep}(*a, **k):\n    return {body}\n"


def _tup(x):
    return tuple(x)


def _deep_tuple(x):
    return tuple(_deep_tuple(v) for v in x) if isinstance(x, list) else x


# MBPP+ stores tuples, sets and complex numbers as JSON lists / strings; these restore the argument types its
# reference solutions expect (the same conversions evalplus applies when it loads the file). Each maps one
# input (the list of arguments) to the converted list of arguments.
_EACH_ARG_TUPLE = {2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630, 726,
                   740, 744, 809}
_EACH_ARG_LIST_OF_TUPLES = {63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780}
_FIRST_ARG_LIST_OF_TUPLES = {75, 413, 444, 753}
_SECOND_ARG_TUPLE = {106, 750}
_FIRST_ARG_TUPLE = {250, 405, 446, 617, 720, 763, 808, 307}
_EACH_ARG_TUPLE_OF_TUPLES = {259, 401, 445}
_ALL_TUPLES = {580, 615, 791}


def _convert(num: int, args: list) -> list:
    if num in _EACH_ARG_TUPLE:
        return [_tup(a) for a in args]
    if num in _EACH_ARG_LIST_OF_TUPLES:
        return [[_tup(x) for x in a] for a in args]
    if num in _FIRST_ARG_LIST_OF_TUPLES:
        return [[_tup(x) for x in args[0]], *args[1:]]
    if num in _SECOND_ARG_TUPLE:
        return [args[0], _tup(args[1]), *args[2:]]
    if num in _FIRST_ARG_TUPLE:
        return [_tup(args[0]), *args[1:]]
    if num in _EACH_ARG_TUPLE_OF_TUPLES:
        return [tuple(_tup(x) for x in a) for a in args]
    if num in _ALL_TUPLES:
        return list(_deep_tuple(args))
    if num == 115:  # evalplus turns empty members into {} (a dict); kept so the reference behaves the same
        return [[set(x) if isinstance(x, list) and x else {} for x in args[0]]]
    if num == 124:
        return [float(args[0]), complex(args[1])]
    if num == 252:
        return [complex(args[0])]
    if num == 278:
        return [tuple(_tup(x) if isinstance(x, list) else x for x in args[0])]
    if num == 722:
        return [{k: _tup(v) for k, v in args[0].items()}, *args[1:]]
    return args


def task_inputs(task: Task, key: str) -> list[list]:
    """The task's `base_input` or `plus_input` with argument types restored."""
    inputs = task.metadata[key]
    tid = str(task.task_id)
    if not tid.startswith("Mbpp/"):
        return inputs
    num = int(tid.split("/")[1])
    return [_convert(num, list(args)) for args in inputs]


def cache_dir() -> Path:
    root = os.environ.get("CODECHAT_CACHE") or Path.home() / ".cache" / "codechat"
    return Path(root) / "evalplus"


def _stable(value) -> str:
    """Text of task data that is the same in every process: JSON (the MBPP+ main files' data is JSON), with
    sets sorted (a set's repr follows the hash seed); data JSON cannot hold (tuple keys) in a canonical repr."""
    try:
        return json.dumps(value, default=lambda o: sorted(map(_canonical, o)) if isinstance(o, (set, frozenset))
                          else repr(o))
    except TypeError:
        return _canonical(value)


def _canonical(v) -> str:
    if isinstance(v, (set, frozenset)):
        return f"{type(v).__name__}({sorted(map(_canonical, v))})"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_canonical(k)}: {_canonical(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return f"{type(v).__name__}[{', '.join(map(_canonical, v))}]"
    return repr(v)


def task_key(task: Task) -> str:
    h = hashlib.sha256()
    parts = ["v4", task.task_id, task.solution or "", task.entry_point or "",
             _stable([task.metadata["base_input"], task.metadata["plus_input"]])]
    if "expected" in task.metadata or task.metadata.get("oracle"):  # OriginFmt: the file's results and rule
        parts += [repr(task.metadata.get("oracle")), _stable(task.metadata.get("expected"))]
    for part in parts:
        h.update(part.encode())
    return h.hexdigest()[:24]


def expected_outputs(verifier, task: Task) -> dict:
    """{"base": [...], "plus": [...], "ref_s": seconds} for a task, from the cache or by running its reference."""
    path = cache_dir() / f"{task_key(task)}.json"
    if path.is_file():
        return loads(path.read_bytes())
    if not task.solution:
        raise CodechatError(f"task {task.task_id}: evalplus task without a reference solution")
    base, plus = task_inputs(task, "base_input"), task_inputs(task, "plus_input")
    if "expected" in task.metadata:
        out = _file_expected(verifier, task, base, plus)
    else:
        out = _reference_outputs(verifier, task, base, plus)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(dumps(out))
    tmp.replace(path)
    return out


def _file_expected(verifier, task: Task, base: list, plus: list) -> dict:
    """The file's own expected outputs (MBPP+ OriginFmt), with the reference run against them for its time (the
    per-task limit) and as a check that file and reference agree."""
    expected = list(task.metadata["expected"])
    timed = dataclasses.replace(task, timeout_s=REFERENCE_TIMEOUT_S)
    v = verifier.verify_io(timed, with_oracle(task.solution, task), base + plus, expected,
                           float(task.metadata.get("atol") or 0.0), REFERENCE_MEMORY_MB)
    if not v.passed:
        raise CodechatError(f"task {task.task_id}: reference solution disagrees with the file's expected outputs "
                            f"({v.status}: {v.message[:160]})")
    return {"base": expected[:len(base)], "plus": expected[len(base):], "ref_s": v.duration_s, "digest": False}


def _reference_outputs(verifier, task: Task, base: list, plus: list) -> dict:
    """Expected outputs from running the reference on every input (MBPP+ main files hold none)."""
    digest = False
    for digest in (False, True):  # digests only when the plain outputs exceed the result cap, or their
        # encoding ran past the limit (MBPP+ 255's ~0.9 GB: ~165 s on a busy machine, its digests 43 s)
        r = verifier.call_function(with_oracle(task.solution, task, digest), task.entry_point, base + plus,
                                   timeout_s=REFERENCE_TIMEOUT_S, memory_mb=REFERENCE_MEMORY_MB)
        if r.status != "timeout" and not any("bytes exceeds" in (e or "") for e in [r.message, *r.errors]):
            break
    if r.status != "ok" or any(e is not None for e in r.errors):
        bad = next((e for e in r.errors if e), r.message)
        raise CodechatError(f"task {task.task_id}: reference solution failed on its own inputs ({r.status}: {bad})")
    return {"base": r.outputs[:len(base)], "plus": r.outputs[len(base):], "ref_s": r.duration_s, "digest": digest}


def verify_base_plus(verifier, task: Task, completion: str, expected: dict) -> tuple[Verdict, Verdict]:
    """(base verdict, plus verdict); plus runs only when base passed (it includes the base inputs)."""
    atol = float(task.metadata.get("atol") or 0.0)
    timeout = max(verifier.cfg.timeout_s, 4 * expected.get("ref_s", 0.0) + 2.0)
    timed = dataclasses.replace(task, timeout_s=timeout)
    code = extract_code(completion, task)
    if code is not None:
        completion = with_oracle(code, task, bool(expected.get("digest")))
    base_in = task_inputs(task, "base_input")
    base = verifier.verify_io(timed, completion, base_in, expected["base"], atol, REFERENCE_MEMORY_MB)
    if not base.passed or not task.metadata["plus_input"]:
        return base, base
    inputs = base_in + task_inputs(task, "plus_input")
    plus = verifier.verify_io(timed, completion, inputs, expected["base"] + expected["plus"], atol,
                              REFERENCE_MEMORY_MB)
    return base, plus


def score_evalplus(verifier, pairs: list[tuple[Task, str]]) -> list[tuple[Verdict, Verdict]]:
    """Base and plus verdicts for (task, completion) pairs, expected outputs computed once per task. A task whose
    reference fails on its own inputs is reported (one warning) and its samples scored as `error`."""
    def expect(t: Task):
        try:
            return expected_outputs(verifier, t)
        except CodechatError as e:
            print(f"warning: {e}", file=sys.stderr)
            return str(e)

    def score(p):
        exp = expected[p[0].task_id]
        if isinstance(exp, str):
            v = Verdict("error", False, 0.0, error_type="ReferenceError", message=exp[:200])
            return v, v
        return verify_base_plus(verifier, p[0], p[1], exp)

    tasks = {t.task_id: t for t, _ in pairs}
    with ThreadPoolExecutor(verifier.workers) as ex:
        expected = dict(zip(tasks, ex.map(expect, tasks.values())))
        return list(ex.map(score, pairs))
