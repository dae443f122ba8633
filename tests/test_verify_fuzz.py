"""Fuzz the candidate -> judge boundary: thousands of random and mutated messages where the program's
hello and replies go. The task's tests cannot be passed by any program, so the verdict must never be `passed`
(nor any test counted as passed), and the judge, supervisor and pool must stay up for an honest program."""
import json
import struct

from hypothesis import HealthCheck, given, settings, strategies as st

from codechat.config import VerifierConfig
from codechat.tasks import Task
from codechat.verifier.verify import Verifier
from test_verify_protocol import frame, run_judge

PRELUDE = "def poly(x):\n    return 'task'\n\n\n"
IMPOSSIBLE = ["assert sorted(f(1)) == [2, 1]", "assert abs(f(2)) < 0", "x = f(3)\nassert x == 1 and x == 2",
              "assert poly(f(4)) == 'program'", "assert math.sqrt(f(5)) < 0", "r = f(6)\nassert len(r) < 0",
              "xs = [1]\nf(xs)\nassert xs == [1] and xs != [1]"]
JOB = {"prelude": PRELUDE, "tests": IMPOSSIBLE}

NAMES = st.sampled_from(["f", "poly", "sorted", "abs", "len", "math", "np", "x", "r", "xs", "__builtins__",
                         "__import__", "__codechat_assert_hit__", "__name__", "tabnanny", "a" * 300, "1bad", "",
                         "f.g", "AssertionError"])
KINDS = st.sampled_from(["value", "object", "module", "function", "exec", "", "import"])
TAGS = st.sampled_from(["$t", "$h", "$d", "$s", "$fs", "$f", "$i", "$nd", "$dec", "$fr", "$r", "$c", "$b", "$dq",
                        "$od", "$ctr", "$x", "type", "ba", "dtype", "$o", "$j", "f", "t", "h"])
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40)
PLAIN = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(TAGS, inner, min_size=1, max_size=2), max_leaves=12)
ENTRY = st.lists(NAMES | PLAIN, max_size=4) | st.tuples(NAMES, KINDS, PLAIN | NAMES).map(list)
HELLO = (st.tuples(st.just("loaded"), st.lists(ENTRY, max_size=8)).map(list)
         | st.tuples(st.just("load_error"), st.text(max_size=30), st.text(max_size=30)).map(list) | PLAIN)
WB = st.lists(st.tuples(st.integers(-2, 3) | NAMES, PLAIN).map(list), max_size=3)
REPLY = (st.tuples(st.just("ok"), PLAIN).map(list)
         | st.tuples(st.sampled_from(["ok", "same"]), PLAIN | st.integers(-1, 3), WB, st.text(max_size=20)).map(list)
         | st.just(["stop"]) | st.tuples(st.just("exc"), st.text(max_size=30), st.text(max_size=30)).map(list)
         | st.just(["time"])  # the program's timer interrupted the call (time limits)
         | st.tuples(st.sampled_from(["cb", "cbget", "cbset"]), st.integers(-1, 3), PLAIN | NAMES, PLAIN).map(list)
         | st.tuples(st.sampled_from(["cbiter", "cbnext"]), st.integers(-1, 3)).map(list)
         | PLAIN)


def _mutate(data: bytes, cuts: list[int], flips: list[int]) -> bytes:
    b = bytearray(data)
    for i in flips:
        if b:
            b[i % len(b)] ^= 0xFF
    for i in cuts:
        if b:
            del b[i % len(b):]
    return bytes(b)


MESSAGES = st.tuples(HELLO, st.lists(REPLY, max_size=8)).map(lambda m: [frame(m[0])] + [frame(r) for r in m[1]])
RAW = st.lists(st.binary(max_size=40), max_size=4)
MUTATED = st.tuples(MESSAGES, st.lists(st.integers(0, 500), max_size=1), st.lists(st.integers(0, 500), max_size=3)
                    ).map(lambda m: [_mutate(b"".join(m[0]), m[1], m[2])])
LYING_LENGTH = st.tuples(HELLO, st.integers(0, 1 << 32 - 1)).map(
    lambda m: [struct.pack(">I", m[1]) + json.dumps(m[0]).encode()])
FRAMES = MESSAGES | RAW | MUTATED | LYING_LENGTH


@settings(max_examples=1200, deadline=None, suppress_health_check=list(HealthCheck))
@given(FRAMES, st.booleans())
def test_judge_never_passes_impossible_tests_whatever_the_candidate_sends(frames, timed):
    job = {**JOB, "time_limits": {"test_s": 5.0, "total_s": 10.0, "cpu": False}} if timed else JOB
    rec = run_judge(job, frames, max_bytes=1 << 16)
    assert rec["status"] != "passed" and rec.get("tests_passed", 0) == 0, (frames, rec)
    assert len(rec.get("message") or "") <= 4096 and len(rec.get("error_type") or "") <= 200


ADD = Task("add", "", ["assert add(1, 2) == 3"], "add")
HONEST = "def add(a, b):\n    return a + b\n"
_V: list[Verifier] = []


def _verifier() -> Verifier:
    if not _V:
        _V.append(Verifier(VerifierConfig(workers=2, timeout_s=2.0, memory_mb=512)))
    return _V[0]


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(FRAMES, FRAMES)
def test_program_writing_fuzz_to_the_judge_socket_never_passes_and_the_pool_stays_healthy(at_import, in_call):
    code = (f"import os\ntry:\n    os.write(3, {b''.join(at_import)!r})\nexcept OSError:\n    pass\n"
            f"def f(*a):\n    try:\n        os.write(3, {b''.join(in_call)!r})\n    except OSError:\n        pass\n"
            f"    return 0\n")
    task = Task("impossible", PRELUDE + "def f(x):\n    \"\"\"?\"\"\"\n", IMPOSSIBLE, "f")
    wrong, honest = _verifier().verify_many([(task, code), (ADD, HONEST)])
    assert not wrong.passed and wrong.tests_passed == 0, (code, wrong)
    assert honest.passed, honest


def teardown_module():
    for v in _V:
        v.close()
