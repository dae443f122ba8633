"""Objects of the task's classes cross the boundary (each honest shape has a wrong
twin that fails). The program's instances of a setup- or test-defined class are rebuilt in the judge as the
task's class from plain data; the tests' functions, classes and instances given to the program stay in the
judge and are used by callback, nested in containers too. Forged objects and callback floods are judged safely."""
import io
import os
import pickle
import socket
import threading

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from codechat.config import VerifierConfig
from codechat.sandbox import frames, judge, modes, wire
from codechat.tasks import Task
from codechat.verifier.verify import Verifier
from test_verify_protocol import frame, run_judge

POINT = "from dataclasses import dataclass\n@dataclass\nclass Point:\n    x: int\n    y: int\n"
PAIR = "from typing import NamedTuple\nclass Pair(NamedTuple):\n    a: int\n    b: int\n"
MONEY = ("class Money:\n    def __init__(self, cents):\n        self.cents = cents\n"
         "    def __eq__(self, other):\n        return type(other) is Money and other.cents == self.cents\n")
SLOTTED = "class V:\n    __slots__ = ('a', 'b')\n    def __eq__(self, o):\n        return (self.a, self.b) == (o.a, o.b)\n"
LISTNODE = ("class ListNode:\n    def __init__(self, val=0, next=None):\n        self.val, self.next = val, next\n\n"
            "def to_list(n):\n    out = []\n    while n is not None:\n        out.append(n.val)\n        n = n.next\n"
            "    return out\n\n")
TREE_TEST = ("class Node:\n    def __init__(self, v, left=None, right=None):\n        self.v, self.left, self.right = v, left, right\n"
             "def shape(n):\n    return None if n is None else (n.v, shape(n.left), shape(n.right))\n")

CASES = {  # name: (task, honest, wrong)
    "dataclass_returned": (Task("dc", "", ["assert move(Point(0, 0)) == Point(1, 0)", "assert move(Point(2, 3)).x == 3"],
                                "move", POINT),
                           "def move(p):\n    return Point(p.x + 1, p.y)\n", "def move(p):\n    return Point(p.x, p.y + 1)\n"),
    "named_tuple_fields": (Task("nt", "", ["assert mk(1) == Pair(1, 2)", "assert mk(4).b == 5"], "mk", PAIR),
                           "def mk(a):\n    return Pair(a, a + 1)\n", "def mk(a):\n    return Pair(a + 1, a)\n"),
    "class_with_eq": (Task("eq", "", ["assert add(Money(150), Money(75)) == Money(225)"], "add", MONEY),
                      "def add(a, b):\n    return Money(a.cents + b.cents)\n", "def add(a, b):\n    return Money(a.cents)\n"),
    "slotted_class": (Task("sl", "", ["v = V()\nv.a, v.b = 1, 2\nassert swap(v) == flip()"], "swap",
                           SLOTTED + "def flip():\n    w = V()\n    w.a, w.b = 2, 1\n    return w\n"),
                      "def swap(v):\n    w = V()\n    w.a, w.b = v.b, v.a\n    return w\n",
                      "def swap(v):\n    w = V()\n    w.a, w.b = v.a, v.b\n    return w\n"),
    "nested_objects": (Task("ln", "", ["assert line(3) == [Point(0, 0), Point(1, 1), Point(2, 2)]",
                                       "assert {'end': Point(2, 2)} == ends(2)"], None, POINT),
                       "def line(n):\n    return [Point(i, i) for i in range(n)]\ndef ends(n):\n    return {'end': Point(n, n)}\n",
                       "def line(n):\n    return [Point(i, 0) for i in range(n)]\ndef ends(n):\n    return {'end': Point(0, n)}\n"),
    "linked_list_prelude": (Task("rev", LISTNODE + "def reverse(head):\n", [
        "h = ListNode(1, ListNode(2, ListNode(3)))\nassert to_list(reverse(h)) == [3, 2, 1]"], "reverse"),
        "    prev = None\n    while head:\n        head.next, prev, head = prev, head, head.next\n    return prev\n",
        "    return head\n"),
    "test_defined_class_returned": (
        Task("tdc", "", ["from dataclasses import dataclass\n@dataclass\nclass Box:\n    w: int\n    h: int\n"
                         "assert grow(Box(1, 2)).w == 2 and grow(Box(1, 2)) == Box(2, 3)"], "grow"),
        "from dataclasses import dataclass\n@dataclass\nclass Box:\n    w: int\n    h: int\n"
        "def grow(b):\n    return Box(b.w + 1, b.h + 1)\n",
        "from dataclasses import dataclass\n@dataclass\nclass Box:\n    w: int\n    h: int\n"
        "def grow(b):\n    return Box(b.w + 1, b.h)\n"),
    "test_node_read_by_program": (
        Task("tn", "", [TREE_TEST + "assert height(Node(1, Node(2, Node(3)), Node(4))) == 3"], "height"),
        "def height(n):\n    return 0 if n is None else 1 + max(height(n.left), height(n.right))\n",
        "def height(n):\n    return 1\n"),
    "test_tree_mutated_in_place": (
        Task("inv", "", [TREE_TEST + "t = Node(1, Node(2), Node(3))\ninvert(t)\nassert shape(t) == (1, (3, None, None), (2, None, None))",
                         TREE_TEST + "t = Node(1, Node(2))\nassert invert(t) is t"], "invert"),
        "def invert(n):\n    if n is not None:\n        n.left, n.right = invert(n.right), invert(n.left)\n    return n\n",
        "def invert(n):\n    return n\n"),
    "test_class_passed_and_built_by_program": (
        Task("bld", "", [TREE_TEST + "t = build(Node, [1, 2, 3])\nassert shape(t) == (2, (1, None, None), (3, None, None))"],
             "build"),
        "def build(cls, xs):\n    if not xs:\n        return None\n    m = len(xs) // 2\n"
        "    return cls(xs[m], build(cls, xs[:m]), build(cls, xs[m + 1:]))\n",
        "def build(cls, xs):\n    return cls(xs[0])\n"),
    "setup_object_mutated_in_place": (
        Task("ip", "", ["p = Point(0, 0)\nshift(p)\nassert p == Point(1, 0)",
                        "ps = [Point(0, 0), Point(1, 1)]\nq = ps[0]\nshift_all(ps)\n"
                        "assert ps == [Point(1, 0), Point(2, 1)] and ps[0] is q"], None, POINT),
        "def shift(p):\n    p.x += 1\ndef shift_all(ps):\n    for p in ps:\n        p.x += 1\n",
        "def shift(p):\n    p = Point(p.x + 1, p.y)\ndef shift_all(ps):\n    ps = [Point(p.x + 1, p.y) for p in ps]\n"),
    "linked_list_reordered_in_place": (Task("ro", LISTNODE + "def reorder(head):\n", [
        "h = ListNode(1, ListNode(2, ListNode(3, ListNode(4))))\nreorder(h)\nassert to_list(h) == [1, 4, 2, 3]"], "reorder"),
        "    nodes = []\n    while head:\n        nodes.append(head)\n        head = head.next\n"
        "    order = [nodes[k // 2] if k % 2 == 0 else nodes[-1 - k // 2] for k in range(len(nodes))]\n"
        "    for a, b in zip(order, order[1:]):\n        a.next = b\n    order[-1].next = None\n",
        "    pass\n"),
    "must_not_mutate_an_object": (Task("nm", "", ["p = Point(1, 2)\nassert norm1(p) == 3 and p == Point(1, 2)"],
                                       "norm1", POINT),
                                  "def norm1(p):\n    return abs(p.x) + abs(p.y)\n",
                                  "def norm1(p):\n    s = abs(p.x) + abs(p.y)\n    p.x = 0\n    return s\n"),
    "same_object_twice_in_a_reply": (
        Task("tw", "", ["ps = [Point(0, 0), Point(5, 5)]\nfirst = ps[0]\nr = bump_first(ps)\n"
                        "assert r == Point(1, 0) and ps == [Point(1, 0), Point(5, 5)] and ps[0] is first",
                        "assert pair(2) == [Point(2, 2), Point(2, 2)]"], None, POINT),
        "def bump_first(ps):\n    ps[0].x += 1\n    return ps[0]\ndef pair(n):\n    p = Point(n, n)\n    return [p, p]\n",
        "def bump_first(ps):\n    return Point(ps[0].x + 1, 0)\ndef pair(n):\n    return [Point(n, n)]\n"),
    "enum_member_returned": (Task("en", "", ["assert pick(1) is Color.RED and pick(2) == Color.BLUE"], "pick",
                                  "import enum\nclass Color(enum.Enum):\n    RED = 1\n    BLUE = 2\n"),
                             "def pick(x):\n    return Color(x)\n", "def pick(x):\n    return Color.RED\n"),
    "callbacks_in_containers": (
        Task("cc", "", ["assert chain([lambda v: v + 1, lambda v: v * 2], 3) == 8",
                        "def five():\n    return 5\nassert pick({'a': five, 'b': lambda: 6}, 'b') == 6",
                        "assert sort_by(['bb', 'a', 'ccc'], key=lambda s: -len(s)) == ['ccc', 'bb', 'a']"], None),
        "def chain(fs, x):\n    for f in fs:\n        x = f(x)\n    return x\ndef pick(d, k):\n    return d[k]()\n"
        "def sort_by(xs, key):\n    return sorted(xs, key=key)\n",
        "def chain(fs, x):\n    return fs[0](x)\ndef pick(d, k):\n    return d['a']()\ndef sort_by(xs, key):\n    return xs\n"),
}


@pytest.fixture(scope="module")
def verifier():
    with Verifier(VerifierConfig(workers=2, timeout_s=5.0)) as v:
        yield v


@pytest.mark.parametrize("name", list(CASES))
def test_honest_object_shape_passes_and_wrong_twin_fails(verifier, name):
    task, honest, wrong = CASES[name]
    good, bad = verifier.verify_many([(task, honest), (task, wrong)])
    assert good.passed, good
    assert not bad.passed, bad


def test_a_class_the_task_does_not_define_stays_a_handle(verifier):
    task = Task("own", "", ["r = mk()\nassert r.get() == 7 and r != mk()"], "mk")  # identity, as before
    assert verifier.verify(task, "class Own:\n    def get(self):\n        return 7\ndef mk():\n    return Own()\n").passed


# --- hostile programs, end to end: judged, bounded, the batch goes on -----------------------------------------
HOSTILE = {
    "deep_chain": "class Point:\n    pass\ndef move(p):\n    head = Point()\n    for _ in range(100000):\n"
                  "        n = Point()\n        n.x, n.y, n.next = 1, 0, head\n        head = n\n    return head\n",
    "cycle": "def move(p):\n    a, b = Point(1, 0), Point(1, 0)\n    a.y, b.y = b, a\n    return a\n",
    "huge_dict": "def move(p):\n    q = Point(1, 0)\n    for i in range(5000):\n        setattr(q, 'f%d' % i, i)\n    return q\n",
    "shared_dag": "def move(p):\n    n = Point(1, 0)\n    for _ in range(200):\n        n = Point(n, n)\n    return n\n",
    "callback_flood": "def move(p):\n    for _ in range(10 ** 6):\n        p.x\n    return Point(1, 0)\n",
    "set_test_method": "def move(p):\n    p.check = lambda: True\n    return Point(1, 0)\n",
}


def test_hostile_objects_are_judged_safely_and_the_batch_goes_on(verifier):
    task = Task("mv", "", ["class Q:\n    def __init__(self):\n        self.x, self.y = 0, 0\n"
                           "    def check(self):\n        return False\n"
                           "q = Q()\nr = move(q)\nassert q.check() and r == Point(1, 0)"], "move", POINT)
    honest = Task("mv2", "", ["assert move(Point(0, 0)) == Point(1, 0)"], "move", POINT)
    pairs = [(task, c) for c in HOSTILE.values()] + [(honest, "def move(p):\n    return Point(p.x + 1, p.y)\n")]
    *bad, good = verifier.verify_many(pairs)
    for name, v in zip(HOSTILE, bad):
        assert not v.passed, (name, v)
    assert good.passed, good
    flood = bad[list(HOSTILE).index("callback_flood")]  # ends at the count limit or the time limit
    assert flood.error_type == "CallbackLimit" or flood.status == "timeout", flood
    assert "cannot be set" in bad[list(HOSTILE).index("set_test_method")].message


def test_program_cannot_read_a_tests_globals_through_its_function(verifier):
    task = Task("gl", "", ["SECRET = 41\ndef cb():\n    return 1\nassert peek(cb) == 42"], "peek")
    v = verifier.verify(task, "def peek(cb):\n    return cb.__globals__['SECRET'] + 1\n")
    assert not v.passed and v.error_type == "AttributeError", v


def test_deeply_nested_callbacks_are_limited(verifier):
    task = Task("nest", "", ["def back(n):\n    return ping(n - 1, back) if n else 0\nassert ping(200, back) == 0"], "ping")
    v = verifier.verify(task, "def ping(n, cb):\n    return cb(n)\n")
    assert not v.passed and v.error_type == "CallbackLimit", v


# --- forged objects, in process: the judge rebuilds only what the task's class allows --------------------------
JOB = {"setup": POINT.replace("    y: int\n", "    y: int\n    def check(self):\n        return False\n") + PAIR
       + "class V:\n    __slots__ = ('a',)\n",
       "tests": ["p = f(1)\nassert type(p) is Point and p.check()",
                 "p = f(2)\nassert type(p) is Point and p == Point(1, 2) and p == Point(3, 4)",
                 "p = f(3)\nassert type(p) is Point and 'check' in vars(p)",
                 "p = f(4)\nassert type(p) is V and hasattr(p, 'extra')",
                 "t = f(5)\nassert type(t) is Pair and len(t) != 2",
                 "p = f(6)\nassert type(p) in (dict, object, type, Exception)"]}
NAMES = st.sampled_from(["Point", "V", "Pair", "dict", "object", "type", "Exception", "Remote", "dataclass",
                         "__class__", "a" * 300, "", "1x"])
FIELDS = st.sampled_from(["x", "y", "a", "b", "check", "extra", "__dict__", "__class__", "__eq__", "_p", "", "1"])
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10)
HANDLE = st.builds(lambda h: {"$h": h, "type": "function"}, st.integers(0, 3))


def _obj(children):
    inst = st.builds(lambda n, h, f: {"$o": n, "h": h, "f": f}, NAMES, st.integers(0, 3) | st.text(max_size=3),
                     st.lists(st.tuples(FIELDS, children).map(list), max_size=5))
    tup = st.builds(lambda n, t: {"$o": n, "t": t}, NAMES, st.lists(children, max_size=4))
    return inst | tup | st.lists(children, max_size=3)


VALUES = st.recursive(SCALARS | HANDLE, _obj, max_leaves=15)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(VALUES, min_size=6, max_size=6), st.integers(0, 3))
def test_forged_objects_never_pass_and_never_break_the_judge(values, deep):
    for _ in range(deep):  # deep nesting of forged objects around one of them
        values[0] = {"$o": "Point", "h": 1, "f": [["x", values[0]], ["y", 0]]}
    frames = [frame(["loaded", [["f", "object", "function"]]])] + [frame(["ok", v]) for v in values]
    rec = run_judge(JOB, frames)
    assert rec["status"] != "passed" and rec["tests_passed"] == 0, (rec, values)


def test_forged_object_fields_cannot_shadow_the_tasks_methods():
    forged = {"$o": "Point", "h": 1, "f": [["x", 0], ["y", 0], ["check", {"$h": 2, "type": "function"}]]}
    frames = [frame(["loaded", [["f", "object", "function"]]]), frame(["ok", forged]), frame(["ok", True])]
    rec = run_judge({"setup": JOB["setup"], "tests": ["p = f(1)\nassert p.check()"]}, frames)
    assert rec["status"] != "passed", rec
    honest = {"$o": "Point", "h": 1, "f": [["x", 0], ["y", 5]]}
    rec = run_judge({"setup": JOB["setup"], "tests": ["p = f(1)\nassert p == Point(0, 5) and not p.check()"]},
                    [frame(["loaded", [["f", "object", "function"]]]), frame(["ok", honest])])
    assert rec["status"] == "passed", rec




class _Refs(pickle.Unpickler):
    """Reads a judge request as the candidate would, keeping the ids of the tests' objects it references."""
    refs: list

    def persistent_load(self, pid):
        self.refs.append(pid[1])
        return None


def test_callbacks_past_the_count_limit_end_the_program(monkeypatch):
    monkeypatch.setattr(judge, "MAX_CALLBACKS", 50)
    j, c = socket.socketpair()
    r, w = os.pipe()
    frames.send(w, pickle.dumps({"mode": "tests", "prelude": "", "setup": "", "entry_point": "f", "inputs": [],
                               "expected": [], "atol": 0.0, "tests": ["def cb():\n    return 1\nassert f(cb) == 1"]}))

    def program():  # reads an attribute of the test's function 60 times, then answers
        c.sendall(frame(["loaded", [["f", "object", "function"]]]))
        u = _Refs(io.BytesIO(frames.recv(c.fileno())[1:]))
        u.refs = []
        u.load()
        try:
            for _ in range(60):
                c.sendall(frame(["cbget", u.refs[0], "x"]))
                frames.recv(c.fileno())
        except wire.WireError:  # the judge ended the program: its end is closed
            return
        c.sendall(frame(["ok", 1]))

    t = threading.Thread(target=program, daemon=True)
    t.start()
    try:
        rec = wire.loads(modes.judge(j.fileno(), r, 1 << 20))
    finally:
        j.close()
        t.join(5)
        c.close()
        os.close(r)
        os.close(w)
    assert rec["status"] == "error" and rec["error_type"] == "CallbackLimit", rec


# --- hostile callbacks, in process: any call, read or write on the tests' objects, with any arguments ---------
CB_JOB = {"tests": ["class T:\n    def __init__(self):\n        self.v = 1\n    def m(self, *a, **k):\n        return len(a)\n"
                    "def cb(*a, **k):\n    return len(a) + len(k)\nt = T()\nr = f(cb, t, [cb, T], {'k': t})\n"
                    "assert t.m(1) == 1 and cb(1, 2) == 2 and type(r) is int and r < r"]}
CB_NAMES = st.sampled_from(["v", "m", "__globals__", "__class__", "__dict__", "__init__", "x", "func", "", "1"])
KINDS = st.sampled_from(["cb", "cbget", "cbset", "cbiter", "cbnext", "cbx"])
CALLS = st.lists(st.tuples(KINDS, st.integers(0, 5), CB_NAMES,
                           st.lists(VALUES, max_size=3), st.lists(st.tuples(CB_NAMES, VALUES).map(list), max_size=2)),
                 max_size=8)


def _program(c: socket.socket, calls: list, final) -> None:
    """The candidate side: the hello, then the calls back on the ids the judge handed out, then answers."""
    refs: list = []

    def read():
        u = _Refs(io.BytesIO(frames.recv(c.fileno())[1:]))
        u.refs = refs
        u.load()

    try:
        c.sendall(frame(["loaded", [["f", "object", "function"]]]))
        read()
        for kind, i, name, args, kwargs in calls:
            jid = refs[i % len(refs)] if refs else i
            msg = {"cb": ["cb", jid, args, kwargs], "cbget": ["cbget", jid, name],
                   "cbset": ["cbset", jid, name, args[0] if args else 0]}.get(kind, [kind, jid])
            c.sendall(frame(msg))
            read()
        while True:
            c.sendall(frame(["ok", final]))
            read()
    except (wire.WireError, OSError, pickle.UnpicklingError, EOFError):
        return


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(CALLS, VALUES)
def test_hostile_callbacks_never_pass_and_never_break_the_judge(calls, final):
    j, c = socket.socketpair()
    r, w = os.pipe()
    frames.send(w, pickle.dumps({"mode": "tests", "prelude": "", "setup": "", "entry_point": "f", "inputs": [],
                               "expected": [], "atol": 0.0, **CB_JOB}))
    t = threading.Thread(target=_program, args=(c, calls, final), daemon=True)
    t.start()
    try:
        rec = wire.loads(modes.judge(j.fileno(), r, 1 << 20))
    finally:
        j.shutdown(socket.SHUT_RDWR)
        t.join(10)
        for s in (j, c):
            s.close()
        os.close(r)
        os.close(w)
    assert rec["status"] != "passed" and rec["tests_passed"] == 0, (rec, calls)
