"""What the judge does with a loaded program: run tests, compare outputs with expected ones, or collect outputs.

- `tests`: exec the task's setup, then each test (an assert or a whole script) with assertions counted.
- `io`:    call the entry point on each input; compare the outputs with the expected ones here (atol for floats).
- `call`:  call the entry point on each input; return the outputs as plain data (for expected outputs).
The judge reports one result record (plain data) on its result pipe; the zygote adds what it observed.
"""
from __future__ import annotations

import copy
import pickle

from codechat.sandbox import stdio_judge, wire
from codechat.sandbox.judge import (Channel, CandidateGone, Remote, build_namespace, classify, instrument)


def _first_failure(results: list[tuple]) -> tuple[str, str | None, str]:
    for status, etype, msg in results:
        if status != "passed":
            return status, etype, msg
    return "passed", None, ""


def _at(i: int, result: tuple[str, str, str]) -> tuple[str, str, str]:
    status, etype, msg = result
    return status, etype, f"test {i}: {msg}" if msg else f"test {i} failed"


def run_tests(chan: Channel, ns: dict, job: dict) -> dict:
    hits = [0]

    def hit() -> None:
        hits[0] += 1

    ns["__codechat_assert_hit__"] = hit
    if job.get("setup"):
        try:
            exec(compile(job["setup"], "<setup>", "exec", dont_inherit=True), ns)
        except BaseException as e:  # noqa: BLE001
            status, etype, msg = classify(e)
            return {"status": "error" if status == "failed" else status, "error_type": etype,
                    "message": f"setup: {msg}", "tests_passed": 0}
    results = []
    for i, src in enumerate(job["tests"]):
        hits0, calls0 = hits[0], chan.calls
        try:
            exec(instrument(src, f"<test {i}>"), ns)
        except CandidateGone as e:
            results.append(_at(i, classify(e)))
            break  # the program is gone: the remaining tests cannot run
        except BaseException as e:  # noqa: BLE001 - any failure of a test is that test's verdict
            results.append(_at(i, classify(e)))
            continue
        if hits[0] == hits0:
            results.append(("failed", "NoAssertion", f"test {i} executed no assertion"))
        elif chan.calls == calls0:
            results.append(("failed", "NoCall", f"test {i} never called the program"))
        else:
            results.append(("passed", None, ""))
    status, etype, msg = _first_failure(results)
    return {"status": status, "error_type": etype, "message": msg,
            "tests_passed": sum(r[0] == "passed" for r in results)}


def _is_floats(x) -> bool:
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)) and x:
        return all(isinstance(i, float) for i in x)
    return False


def outputs_match(out, exp, atol: float) -> bool:
    """EvalPlus's rule: exact equality, or allclose(rtol=1e-7, atol) when the expected value is float(s)."""
    if atol == 0 and _is_floats(exp):
        atol = 1e-6
    try:
        if bool(out == exp):
            return True
    except Exception:  # noqa: BLE001 - e.g. an array compared elementwise: fall through to allclose
        pass
    if atol and _is_floats(exp) and (isinstance(out, (int, float)) or isinstance(out, (list, tuple))):
        try:
            import numpy as np
            return bool(np.allclose(out, exp, rtol=1e-07, atol=atol))
        except Exception:  # noqa: BLE001
            return False
    return False


def _call_each(chan: Channel, ns: dict, job: dict, on_value) -> list[tuple]:
    fn = ns.get(job["entry_point"])
    results = []
    for i, args in enumerate(job["inputs"]):
        try:
            if not isinstance(fn, Remote):
                raise NameError(f"name '{job['entry_point']}' is not defined by the program")
            value = fn(*copy.deepcopy(list(args)))
            results.append(on_value(i, value))
        except CandidateGone as e:
            results.append(classify(e))
            results += [("error", "EarlyExit", "not run")] * (len(job["inputs"]) - i - 1)
            break
        except BaseException as e:  # noqa: BLE001
            results.append(classify(e))
    return results


def run_io(chan: Channel, ns: dict, job: dict) -> dict:
    def check(i, value):
        if isinstance(value, Remote):
            return ("failed", "NotPlainData", f"input {i}: returned a {value._type} object")
        if outputs_match(value, job["expected"][i], float(job.get("atol") or 0)):
            return ("passed", None, "")
        return ("failed", "AssertionError", f"input {i}: wrong output")
    results = _call_each(chan, ns, job, check)
    status, etype, msg = _first_failure(results)
    if not job["inputs"]:
        status, etype, msg = "failed", "NoAssertion", "no inputs to compare"
    return {"status": status, "error_type": etype, "message": msg,
            "tests_passed": sum(r[0] == "passed" for r in results)}


def run_calls(chan: Channel, ns: dict, job: dict) -> dict:
    outputs: list = [None] * len(job["inputs"])

    def keep(i, value):
        if isinstance(value, Remote):
            return ("error", "NotPlainData", f"returned a {value._type} object")
        outputs[i] = value
        return ("passed", None, "")

    results = _call_each(chan, ns, job, keep)
    errors = [None if status == "passed" else f"{etype}: {msg}" for status, etype, msg in results]
    return {"status": "ok", "outputs": outputs, "errors": errors,
            "tests_passed": sum(e is None for e in errors)}


MODES = {"tests": run_tests, "io": run_io, "call": run_calls}


def judge(sock_fd: int, payload_fd: int, max_bytes: int) -> bytes:
    """One job in the judge: read the tests, wait for the program to load, run the mode; returns the record."""
    job = pickle.loads(wire.recv(payload_fd, 1 << 30))  # written by the parent: trusted
    if job["mode"] == "stdio":  # no RPC: the program's stdout comes over the socket (stdio_judge.py)
        return wire.dumps(stdio_judge.judge(sock_fd, job, max_bytes))
    chan = Channel(sock_fd, max_bytes)
    try:
        first = chan.recv()
    except CandidateGone as e:
        result = {"status": "error", "error_type": "EarlyExit", "message": f"program ended while loading ({e})"}
    else:
        if first[0] == "load_error" and len(first) == 3:
            etype = str(first[1])
            status = {"SyntaxError": "syntax_error", "IndentationError": "syntax_error",
                      "TabError": "syntax_error", "MemoryError": "memory"}.get(etype, "error")
            result = {"status": status, "error_type": etype, "message": str(first[2])[:300]}
        elif first[0] == "loaded" and len(first) == 2 and isinstance(first[1], list):
            ns = build_namespace(chan, first[1], job.get("entry_point"))
            result = MODES[job["mode"]](chan, ns, job)
        else:
            result = {"status": "error", "error_type": "EarlyExit", "message": "malformed hello"}
    result.setdefault("tests_passed", 0)
    return wire.dumps(result)
