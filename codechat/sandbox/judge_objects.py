"""Judge side: objects of the task's own classes crossing the boundary, in both directions.

- Program -> judge (`rebuild`): a program returns an instance of a class the task's setup, prelude or tests
  define (`move(p) == Point(1, 0)`). The candidate sends the instance's fields as plain data with its class's
  name; the judge builds an instance of *its own* class of that name from those fields, without running any
  program code and without calling the class's `__init__`/`__setattr__`: `object.__new__` (`tuple.__new__`
  for named tuples), then the fields set directly. The test then compares with the task's `__eq__`, on values
  that are plain data. Rebuilt only when the class is the task's: defined in the judge's namespace (module
  `__sandbox__`), created by plain `type` (no metaclass: no enums, no ABCs), and every field is allowed:
  a plain identifier (never a dunder) that is not a method, property or other descriptor of the class (a
  forged field cannot replace `is_valid()` by a proxy that answers True), a slot for slotted classes, and
  exactly as many values as a named tuple has fields; an enum member is looked up by name among the task's
  enum's members. Otherwise the value is what it was before: an opaque handle (a named tuple: a plain tuple).
- Judge -> program (`is_judge_object`): a test's functions, lambdas, methods, generators, and instances or
  classes the tests define (which the program's process does not have) are handed to the program as
  references to the judge's objects: calls, attribute reads and writes, iter() and next() on them come back
  here (judge.py `Channel._callback`). Instances of the setup's and prelude's classes (which the program's
  process also defines) are copied, as before.

Protects against: forged objects claiming a task class (hostile fields, unknown names, too many fields, method
shadowing, deep nesting: the wire caps each and decoding never runs program code). Does not protect against:
a task class whose own `__eq__` trusts its fields blindly (task code is trusted); it sees plain data only.
"""
from __future__ import annotations

import enum
import functools
import types
from typing import Any

from codechat.sandbox import wire

MODULE = "__sandbox__"
"""The module name the task's code and the tests run under (judge side) and the program runs under."""
CALLBACKS = (types.FunctionType, types.MethodType, types.LambdaType, functools.partial, types.GeneratorType)
"""A test's callables the program gets as references (builtins travel by name: the program has its own)."""
_MISSING = object()


def task_class(ns: dict | None, name: str) -> type | None:
    """The judge's class `name` when the task defined it (setup, prelude, or a test so far), else None."""
    cls = ns.get(name) if ns is not None and wire.plain_name(name) else None
    if type(cls) is not type or cls.__dict__.get("__module__") != MODULE:
        return None
    return cls


def _slots(cls: type) -> frozenset:
    names = set()
    for k in cls.__mro__:
        s = k.__dict__.get("__slots__", ())
        names.update((s,) if isinstance(s, str) else s)
    return frozenset(names)


def _shadows(cls: type, name: str) -> bool:
    """Whether an instance attribute `name` would hide a method, property or other descriptor of `cls`."""
    for k in cls.__mro__:
        a = k.__dict__.get(name, _MISSING)
        if a is not _MISSING:
            return callable(a) or hasattr(type(a), "__get__")
    return False


def rebuild(cls: type | None, fields: list[tuple[str, Any]]) -> Any:
    """An instance of the task's class `cls` with `fields` (decoded plain data), or None when not allowed."""
    if cls is None or issubclass(cls, tuple) or issubclass(cls, BaseException):
        return None
    try:
        obj = object.__new__(cls)  # never the class's __init__, never program code
    except TypeError:  # a builtin base other than object (a list subclass, ...): stays a handle
        return None
    slots = _slots(cls)
    d = getattr(obj, "__dict__", None)
    for name, value in fields:
        if name in slots:
            descr = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
            if type(descr) is not types.MemberDescriptorType:
                return None
            descr.__set__(obj, value)
        elif type(d) is dict and not _shadows(cls, name):
            d[name] = value
        else:
            return None
    return obj


def enum_member(ns: dict | None, name: str, fields: list[tuple[str, Any]]) -> Any:
    """The task's enum member the program's member names (`Color.RED` by its `_name_`), or None: a lookup of
    the judge's own member, nothing built."""
    cls = ns.get(name) if ns is not None and wire.plain_name(name) else None
    if not isinstance(cls, enum.EnumMeta) or cls.__dict__.get("__module__") != MODULE:
        return None
    member = dict(fields).get("_name_")
    return cls.__members__.get(member) if type(member) is str else None


def rebuild_tuple(cls: type | None, values: list) -> Any:
    """An instance of the task's named tuple `cls` holding `values`, or None when not allowed."""
    if cls is None or not issubclass(cls, tuple) or type(cls.__dict__.get("_fields")) is not tuple \
            or len(cls._fields) != len(values):
        return None
    return tuple.__new__(cls, values)


def is_judge_object(obj: Any, shared: frozenset) -> bool:
    """Whether `obj` goes to the program as a reference to this process's object (see the module docstring):
    a test's callable, or a class (or instance of one) the task defined that the program's process lacks."""
    t = type(obj)
    if t in CALLBACKS:
        return True
    if t is type:
        return obj.__dict__.get("__module__") == MODULE and obj not in shared
    return type(t) is type and t.__dict__.get("__module__") == MODULE and t not in shared



def settable(obj: Any, name: str) -> bool:
    """Whether the program may set attribute `name` of the tests' object `obj`: only on an instance of a task
    class, and never one that hides a method, property or other descriptor (a program cannot replace the
    tests' `check()` by its own); functions and classes are read-only to it."""
    t = type(obj)
    return type(t) is type and t.__dict__.get("__module__") == MODULE and wire.plain_name(name) \
        and not _shadows(t, name)


def is_task_instance(obj: Any) -> bool:
    """Whether `obj` is an instance of a class the task's code defined (not a named tuple)."""
    t = type(obj)
    return type(t) is type and t.__dict__.get("__module__") == MODULE and not isinstance(obj, tuple)


def copy_state(old: Any, new: Any) -> None:
    """In-place write-back: the test's instance `old` takes the attributes of `new`, the program's copy of it
    after a call, rebuilt here (so its fields already passed `rebuild`'s checks)."""
    d_old, d_new = getattr(old, "__dict__", None), getattr(new, "__dict__", None)
    if type(d_old) is dict and type(d_new) is dict:
        d_old.clear()
        d_old.update(d_new)
    t = type(old)
    for name in _slots(t):
        descr = next((k.__dict__[name] for k in t.__mro__ if name in k.__dict__), None)
        if type(descr) is types.MemberDescriptorType:
            try:
                descr.__set__(old, descr.__get__(new, t))
            except AttributeError:  # unset in the program's copy
                pass
