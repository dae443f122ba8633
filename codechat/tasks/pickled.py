"""Untrusted base64(zlib(pickle(x))) test fields (LiveCodeBench, SandboxFusion samples) decoded under budgets.

A field is hostile until shown plain and small. In order, before each step can allocate much:
1. base64, then zlib decompressed in bounded steps: more than `MAX_DECODED` bytes out is refused (a zlib bomb
   stops there, never allocates past it);
2. the pickle's opcodes scanned once (`pickletools.genops`, no object built): more than `MAX_OPS` opcodes is
   refused, so unpickling cannot build more objects than that (each object costs at least one opcode; strings
   and numbers are literals in the stream, already within `MAX_DECODED`);
3. unpickled by `_PlainUnpickler`, which imports and calls nothing (any class, function or persistent id is
   refused);
4. walked once (`check_plain`): each object visited once however often it is referenced, its size counted as
   its consumers will see it (a list holding the same list twice, 60 levels deep, counts 2^60 values and is
   refused at the level where it passes `MAX_VALUES`, after ~60 steps), nesting at most `MAX_DEPTH`, no cycles.
Every refusal is a one-line `TaskFormatError` naming the file, record and field.
"""
from __future__ import annotations

import base64
import io
import pickle
import pickletools
import zlib
from typing import Any

from codechat.tasks.model import TaskFormatError

MAX_DECODED = 256 << 20
"""Largest decompressed test field accepted, in bytes; also the most string bytes its value may expand to."""
MAX_OPS = 2_000_000
"""Most pickle opcodes one field may hold (real fields are a pickled JSON string: a handful)."""
MAX_VALUES = 5_000_000
"""Most values (strings, numbers, containers) one decoded field may hold, a value reached twice counting twice."""
MAX_DEPTH = 100
"""Deepest nesting of containers in a decoded field."""

_ATOMS = (str, bytes, int, float, bool, type(None))
_CONTAINERS = (list, tuple, dict, set, frozenset)


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only plain values are allowed")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refusing a persistent id")


def _size(x: Any) -> int:
    """Bytes an atom stands for (strings and bytes: their length; numbers: their digits, roughly)."""
    if isinstance(x, (str, bytes)):
        return len(x)
    if type(x) is int:
        return x.bit_length() // 8 + 1
    return 8


def check_plain(value: Any, max_values: int | None = None, max_bytes: int | None = None) -> None:
    """Raise `pickle.UnpicklingError` unless `value` is plain data within the budgets (see the module's
    docstring). Iterative and memoised by identity: linear in the number of distinct objects and references."""
    max_values = MAX_VALUES if max_values is None else max_values
    max_bytes = MAX_DECODED if max_bytes is None else max_bytes
    sizes: dict[int, tuple[int, int]] = {}  # id -> (values, bytes) as expanded; objects stay alive inside `value`
    open_: set[int] = set()  # containers on the current path (a cycle comes back to one)
    stack: list[tuple[Any, int, bool]] = [(value, 0, False)]
    while stack:
        x, depth, done = stack.pop()
        key = id(x)
        if done:
            open_.discard(key)
            n, b = 1, 0
            for c in _children(x):
                cn, cb = sizes[id(c)]
                n, b = n + cn, b + cb
            sizes[key] = (n, b)
        elif key in sizes:
            continue
        elif key in open_:
            raise pickle.UnpicklingError("a container holds itself")
        elif type(x) in _ATOMS:
            n, b = 1, _size(x)
            sizes[key] = (n, b)
        elif type(x) in _CONTAINERS:
            if depth >= MAX_DEPTH:
                raise pickle.UnpicklingError(f"nested more than {MAX_DEPTH} deep")
            open_.add(key)
            stack.append((x, depth, True))
            stack.extend((c, depth + 1, False) for c in _children(x))
            continue
        else:
            raise pickle.UnpicklingError(f"not a plain value: {type(x).__name__}")
        if n > max_values:
            raise pickle.UnpicklingError(f"holds more than {max_values:,} values (counting repeats)")
        if b > max_bytes:
            raise pickle.UnpicklingError(f"holds more than {max_bytes >> 20} MiB of text (counting repeats)")


def _children(x: Any):
    if type(x) is dict:
        for k, v in x.items():
            yield k
            yield v
    elif type(x) in _CONTAINERS:
        yield from x


def restricted_unpickle(data: bytes) -> Any:
    """pickle.loads for plain values only, within `MAX_OPS` opcodes and the `check_plain` budgets."""
    ops = 0
    for _ in pickletools.genops(io.BytesIO(data)):
        ops += 1
        if ops > MAX_OPS:
            raise pickle.UnpicklingError(f"more than {MAX_OPS:,} pickle opcodes")
    value = _PlainUnpickler(io.BytesIO(data)).load()
    check_plain(value)
    return value


def decode_pickled_field(text: str, where: str, field: str = "test") -> Any:
    """base64(zlib(pickle(x))) -> x, for plain x within the budgets; else a one-line TaskFormatError."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
        d = zlib.decompressobj()
        data = d.decompress(raw, MAX_DECODED)
        if d.unconsumed_tail or d.decompress(b"", 1):  # (more input, or more output held inside zlib)
            raise TaskFormatError(f"{where}: field '{field}' decompresses to more than {MAX_DECODED >> 20} MiB")
        return restricted_unpickle(data)
    except TaskFormatError:
        raise
    except Exception as e:  # noqa: BLE001 - untrusted bytes: any failure of the decoders is a bad file
        raise TaskFormatError(f"{where}: field '{field}': cannot decode the compressed test field: "
                              f"{type(e).__name__}: {e}"[:300]) from None
