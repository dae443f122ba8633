"""What the judge does with a loaded program: run tests, compare outputs with expected ones, or collect outputs.

- `tests`: exec the task's setup, then each test (an assert or a whole script) with assertions counted.
- `io`:    call the entry point on each input; compare the outputs with the expected ones here (atol for floats).
- `call`:  call the entry point on each input; return the outputs as plain data (for expected outputs).
The judge reports one result record (plain data) on its result pipe; the zygote adds what it observed.
"""
from __future__ import annotations

import copy
import math
import pickle
import time

from codechat.sandbox import frames, grammar, judge_objects, stdio_capture, stdio_judge, wire
from codechat.sandbox.bindings import LIVE, bind_entry_point, build_namespace, caught_in, instrument, names_in
from codechat.sandbox.judge import Channel, CandidateGone, TimeLimit, TimeLimitGone, classify, raised_class
from codechat.sandbox.remote import Remote
from codechat.sandbox.timelimits import TimeLimits


def _first_failure(results: list[tuple]) -> tuple[str, str | None, str]:
    for status, etype, msg in results:
        if status != "passed":
            return status, etype, msg
    return "passed", None, ""


def _at(i: int, result: tuple[str, str, str]) -> tuple[str, str, str]:
    status, etype, msg = result
    return status, etype, f"test {i}: {msg}" if msg else f"test {i} failed"


def _task_code(ns: dict, chan: Channel, job: dict) -> dict | None:
    """Run the task's own code here (trusted): the prelude (a HumanEval prompt's imports and helpers), then the
    setup. The names they define replace the program's; returns an error record if either fails."""
    for part in ("prelude", "setup"):
        if job.get(part):
            try:
                exec(compile(job[part], f"<{part}>", "exec", dont_inherit=True), ns)
            except BaseException as e:  # noqa: BLE001
                status, etype, msg = classify(e)
                return {"status": "error" if status == "failed" else status, "error_type": etype,
                        "message": f"{part}: {msg}", "tests_passed": 0}
        if part == "prelude":
            bind_entry_point(chan, ns, job.get("entry_point"))
    return None


def run_tests(chan: Channel, entries: list, job: dict, cand_stat: int = -1, started: float = 0.0) -> dict:
    hits = [0]

    def hit() -> None:
        hits[0] += 1

    wanted, modules = _referenced(job)
    ns, taken = build_namespace(chan, entries, job.get("entry_point"), wanted, modules)
    # a class of the program's that a test catches (`except TheirError`) is the judge's class of the
    # exceptions the program raises under that name: a real exception class, made here, with no program code
    for name in taken & frozenset().union(*map(caught_in, job["tests"])):
        if type(ns[name]) is Remote and ns[name]._type == "type":
            ns[name] = raised_class(name)
    bound = {n: ns[n] for n in taken}
    failed = _task_code(ns, chan, job)
    if failed:
        return failed
    # the program's values of the task's classes are rebuilt as ours; the setup's and prelude's classes (the
    # program's process defines them too) travel as copies, those the tests define as references (judge_objects)
    chan.classes = ns
    chan.shared = frozenset(v for v in ns.values() if judge_objects.task_class(ns, getattr(v, "__name__", "")) is v)
    program = {n for n, v in bound.items() if ns.get(n) is v}  # still the program's after the task's code ran
    values = {name for name, kind, _ in entries if kind == "value"}
    copied = frozenset(program & values)  # the program's data globals, copied at load: read fresh after calls
    if copied:
        ns[LIVE] = _fresh(chan, ns, copied)
    ns["__codechat_assert_hit__"] = hit
    clock = TimeLimits(job["time_limits"], cand_stat, started) if job.get("time_limits") else None
    results = []
    for i, src in enumerate(job["tests"]):
        if clock is not None:
            if clock.start() <= 0:
                results.append(("timeout", None, f"test {i}: not run, the program's total time is used up"))
                continue
            try:
                chan.arm(clock.budget, clock.cpu, clock.deadline())
            except CandidateGone as e:
                results.append(_at(i, classify(e)))
                break
        result, gone = _run_test(chan, ns, src, i, hits, program, copied)
        if clock is not None and (clock.stop() or result[0] == "timeout"):
            result = ("timeout", None, f"test {i}: {clock.describe()}")
        results.append(result)
        if gone:
            break  # the program is gone (or stuck): the remaining tests cannot run
    status, etype, msg = _first_failure(results)
    rec = {"status": status, "error_type": etype, "message": msg,
           "tests_passed": sum(r[0] == "passed" for r in results)}
    if clock is not None and clock.cpu:
        rec["cpu_s"] = clock.cpu_total()
    return rec


def _fresh(chan: Channel, ns: dict, names: frozenset):
    """The reader a test's `NAME` of a copied program global becomes: the copy from load until the test first
    calls into the program, then the program's value at the time of the read (one round trip per read after
    a call). A value the program no longer has as data arrives as a handle, like any program object."""
    seen = {n: (chan.calls, ns[n]) for n in names}

    def read(name: str):
        calls, value = seen[name]
        if calls != chan.calls:
            value = chan.request("value", ("n", name))
            seen[name] = (chan.calls, value)
        return value
    return read


def _run_test(chan: Channel, ns: dict, src: str, i: int, hits: list, program: set,
              copied: frozenset = frozenset()) -> tuple[tuple, bool]:
    """One test's (status, error_type, message), and whether the program is gone (no test can follow)."""
    hits0, calls0 = hits[0], chan.calls
    try:
        exec(instrument(src, f"<test {i}>", copied & names_in(src)[0]), ns)
    except TimeLimit:
        return ("timeout", None, f"test {i}: interrupted at its time limit"), False
    except TimeLimitGone:
        return ("timeout", None, f"test {i}: the program did not stop at the test's time limit"), True
    except CandidateGone as e:
        return _at(i, classify(e)), True
    except BaseException as e:  # noqa: BLE001 - any failure of a test is that test's verdict
        return _at(i, classify(e)), False
    if hits[0] == hits0:
        return ("failed", "NoAssertion", f"test {i} executed no assertion"), False
    if chan.calls == calls0 and not (names_in(src)[0] & program):  # reading a program's value counts
        return ("failed", "NoCall", f"test {i} never called the program"), False
    return ("passed", None, ""), False


def _referenced(job: dict) -> tuple[frozenset, frozenset]:
    """Names the task's tests and setup mention, and those they use as modules (`NAME.attr`)."""
    names, bases = set(), set()
    for src in [*job["tests"], job.get("setup") or ""]:
        n, b = names_in(src)
        names |= n
        bases |= b
    return frozenset(names), frozenset(bases)


def _is_floats(x) -> bool:
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)) and x:
        return all(isinstance(i, float) for i in x)
    return False


def _close(a, b, atol: float) -> bool:
    """numpy's isclose(a, b, rtol=1e-7, atol) for one number; bools and non-numbers never match a float."""
    if type(a) not in (int, float) or type(b) not in (int, float):
        return False
    if math.isinf(a) or math.isinf(b) or math.isnan(a) or math.isnan(b):
        return a == b
    return abs(a - b) <= atol + 1e-7 * abs(b)


def outputs_match(out, exp, atol: float) -> bool:
    """EvalPlus's rule: exact equality, or closeness (rtol=1e-7, atol) when the expected value is float(s) and
    the output has the same type (evalplus asserts `type(out) == type(exp)` first). No broadcasting: a float expected needs a number, a sequence of floats a sequence of the same length
    (an empty list is not close to 2.5, as it is under np.allclose)."""
    if atol == 0 and _is_floats(exp):
        atol = 1e-6
    try:
        if bool(out == exp):  # evalplus's exact check: plain ==, as Python says
            return True
    except Exception:  # noqa: BLE001 - e.g. an array compared elementwise
        pass
    if not atol or not _is_floats(exp) or type(out) is not type(exp):  # evalplus checks the type first: a
        return False  # tuple is not close to a list of floats, nor an int to a float
    if isinstance(exp, float):
        return _close(out, exp, atol)
    return len(out) == len(exp) and all(_close(a, b, atol) for a, b in zip(out, exp))


def _call_each(chan: Channel, entries: list, job: dict, on_value) -> list[tuple]:
    ep = job["entry_point"]
    # the entry point comes from the job (trusted), not the hello: the candidate resolves it, or answers NameError
    fn = Remote(chan, ("n", ep), "function") if isinstance(ep, str) and ep.isidentifier() else None
    results = []
    for i, args in enumerate(job["inputs"]):
        try:
            if fn is None:
                raise NameError(f"name '{ep}' is not defined by the program as a function")
            value = fn(*copy.deepcopy(list(args)))
            results.append(on_value(i, value))
        except CandidateGone as e:
            results.append(classify(e))
            results += [("error", "EarlyExit", "not run")] * (len(job["inputs"]) - i - 1)
            break
        except BaseException as e:  # noqa: BLE001
            results.append(classify(e))
    return results


def run_io(chan: Channel, entries: list, job: dict) -> dict:
    def check(i, value):
        if isinstance(value, Remote):
            return ("failed", "NotPlainData", f"input {i}: returned a {value._type} object")
        if outputs_match(value, job["expected"][i], float(job.get("atol") or 0)):
            return ("passed", None, "")
        return ("failed", "AssertionError", f"input {i}: wrong output")
    results = _call_each(chan, entries, job, check)
    status, etype, msg = _first_failure(results)
    if not job["inputs"]:
        status, etype, msg = "failed", "NoAssertion", "no inputs to compare"
    return {"status": status, "error_type": etype, "message": msg,
            "tests_passed": sum(r[0] == "passed" for r in results)}


def run_calls(chan: Channel, entries: list, job: dict) -> dict:
    outputs: list = [None] * len(job["inputs"])

    def keep(i, value):
        if isinstance(value, Remote):
            return ("error", "NotPlainData", f"returned a {value._type} object")
        try:  # an object inside (or a structure deeper than the wire carries) cannot be an expected output
            wire.to_plain(value)
        except wire.WireError as e:
            return ("error", "NotPlainData", f"returned {e}")
        outputs[i] = value
        return ("passed", None, "")

    results = _call_each(chan, entries, job, keep)
    errors = [None if status == "passed" else f"{etype}: {msg}" for status, etype, msg in results]
    return {"status": "ok", "outputs": outputs, "errors": errors,
            "tests_passed": sum(e is None for e in errors)}


MODES = {"tests": run_tests, "io": run_io, "call": run_calls}


def judge(sock_fd: int, payload_fd: int, max_bytes: int, cand_stat: int = -1) -> bytes:
    """One job in the judge: read the tests, wait for the program to load, run the mode; returns the record.
    `cand_stat`: an fd of the program's /proc/PID/stat (-1: none), for its CPU time under time limits."""
    started = time.monotonic()
    job = pickle.loads(frames.recv(payload_fd, 1 << 30))  # written by the parent: trusted
    if job["mode"] == "stdio" and (job.get("stdio") or {}).get("capture"):  # return stdout, judge nothing
        return wire.dumps(stdio_capture.judge(sock_fd, max_bytes))
    if job["mode"] == "stdio":  # no RPC: the program's stdout comes over the socket (stdio_judge.py)
        return wire.dumps(stdio_judge.judge(sock_fd, job, max_bytes))
    chan = Channel(sock_fd, max_bytes)
    try:
        first = chan.recv()
    except CandidateGone as e:
        result = {"status": "error", "error_type": "EarlyExit", "message": f"program ended while loading ({e})"}
    else:
        try:
            kind, body = grammar.parse_hello(first)
        except wire.WireError as e:
            kind, body = "malformed", str(e)
        if kind == "load_error":
            etype, msg = body
            status = {"SyntaxError": "syntax_error", "IndentationError": "syntax_error",
                      "TabError": "syntax_error", "MemoryError": "memory",
                      "_TimeLimit": "timeout"}.get(etype, "error")  # (the soft CPU limit hit while loading)
            result = {"status": status, "error_type": etype, "message": msg[:300]}
        elif kind == "loaded":
            result = run_tests(chan, body, job, cand_stat, started) if job["mode"] == "tests" else MODES[job["mode"]](chan, body, job)
        else:
            result = {"status": "error", "error_type": "ProtocolError", "message": body}
    result.setdefault("tests_passed", 0)
    return wire.dumps(result)
