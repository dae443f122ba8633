"""Judge-side proxies for the program's objects: `Remote` forwards calls, attributes, items, iteration, `str()`,
`isinstance` and ordering/arithmetic between two of the program's objects to the candidate over the judge's
`Channel`; every answer is hostile data and type-checked. Equality and hashing stay identity, so no program object
decides a comparison with the tests' values."""
from __future__ import annotations


class IsRemote(Exception):
    """Raised when a proxy is pickled without the proxy-aware pickler (`Channel.request` then uses it)."""


class Remote:
    """A judge-side proxy for an object living in the candidate. Equality and hashing are by identity."""
    __slots__ = ("_chan", "_ref", "_type")

    def __reduce_ex__(self, protocol):
        raise IsRemote

    def __init__(self, chan, ref: tuple, type_name: str):  # chan: the judge's Channel (judge.py)
        object.__setattr__(self, "_chan", chan)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_type", type_name)

    def __call__(self, *args, **kwargs):
        return self._chan.request("call", self._ref, *args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._chan.request("getattr", self._ref, name)

    def __setattr__(self, name: str, value) -> None:
        self._chan.request("setattr", self._ref, name, value)

    def __getitem__(self, key):
        return self._chan.request("getitem", self._ref, key)

    def __len__(self) -> int:
        n = self._chan.request("len", self._ref)
        if type(n) is not int:
            raise TypeError("len() of a sandboxed object did not return an int")
        return n

    def __bool__(self) -> bool:
        # truth of a program-made object (e.g. a re.Match) is the program's to decide, as in a plain run
        b = self._chan.request("bool", self._ref)
        if type(b) is not bool:
            raise TypeError("bool() of a sandboxed object did not return a bool")
        return b

    def __iter__(self):
        it = self._chan.request("iter", self._ref)
        if type(it) is not Remote:
            raise TypeError("the program's iterator is not an object")
        return _RemoteIterator(it)

    def __next__(self):  # next() on a generator the program returned
        return self._chan.request("next", self._ref)

    def __str__(self) -> str:  # the program's class prints itself as the program says (`str(m) == '$1.50'`)
        s = _ask(self, "__str__")
        if type(s) is not str:
            raise TypeError("str() of a sandboxed object did not return a str")
        return s

    def __instancecheck__(self, obj) -> bool:  # `isinstance(x, TheirClass)`: the program's class answers
        b = _ask(self, "__instancecheck__", obj)
        if type(b) is not bool:
            raise TypeError("isinstance() against a sandboxed class did not return a bool")
        return b

    __lt__ = lambda self, o: _order(self, "__lt__", o)  # noqa: E731 - one line per operator
    __le__ = lambda self, o: _order(self, "__le__", o)  # noqa: E731
    __gt__ = lambda self, o: _order(self, "__gt__", o)  # noqa: E731
    __ge__ = lambda self, o: _order(self, "__ge__", o)  # noqa: E731
    __add__ = lambda self, o: _arith(self, "__add__", o)  # noqa: E731
    __sub__ = lambda self, o: _arith(self, "__sub__", o)  # noqa: E731
    __mul__ = lambda self, o: _arith(self, "__mul__", o)  # noqa: E731

    def __eq__(self, other) -> bool:
        return self is other

    def __ne__(self, other) -> bool:
        return self is not other

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<sandboxed {self._type} object>"


def _ask(r: Remote, name: str, *args):
    """The program's own `obj.name(*args)`, run where the object lives; the result is hostile data. (Module
    functions, not methods: a method name would hide the program's attribute of that name.)"""
    method = r._chan.request("getattr", r._ref, name)
    if type(method) is not Remote:
        raise TypeError(f"{name} of a sandboxed object is not a method")
    return method(*args)


def _order(r: Remote, name: str, other):
    # only between the program's own objects: a relation to the tests' values (`f() < 5`) is never the
    # program's to decide, as `==` never is
    if type(other) is not Remote:
        return NotImplemented
    b = _ask(r, name, other)
    return b if type(b) is bool else NotImplemented


def _arith(r: Remote, name: str, other):
    return _ask(r, name, other) if type(other) is Remote else NotImplemented


class _RemoteIterator:
    def __init__(self, it: Remote):
        self.it = it

    def __iter__(self):
        return self

    def __next__(self):
        return self.it._chan.request("next", self.it._ref)
