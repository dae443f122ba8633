"""A tiny name -> function registry, verl-style, with one shared signature per registry.

    ADVANTAGES = Registry("advantage estimator", ("rewards", "group_ids", "cfg"))

    @ADVANTAGES.register("grpo")
    def grpo(rewards, group_ids, cfg): ...

    ADVANTAGES["grpo"]     # the function; an unknown name raises UnknownNameError listing the valid names

Registration checks that the function's parameter names are exactly the registry's, so every entry can be
called the same way and the caller never special-cases a name. Registering a name twice is refused.
"""
from __future__ import annotations

import inspect
from typing import Callable, Generic, Iterator, TypeVar

from codechat import CodechatError

F = TypeVar("F", bound=Callable)


class UnknownNameError(CodechatError, KeyError):
    """A config named something no registry entry has; the message lists the valid names."""

    __str__ = Exception.__str__  # KeyError would print the message in quotes


class Registry(Generic[F]):
    def __init__(self, kind: str, params: tuple[str, ...]):
        self.kind = kind
        """What the entries are, for messages: 'advantage estimator', 'policy loss', ..."""
        self.params = params
        """The parameter names every entry must have, in order (keyword-only ones included)."""
        self._fns: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def deco(fn: F) -> F:
            if name in self._fns:
                old = self._fns[name]
                raise ValueError(f"{self.kind} {name!r} is already registered ({old.__module__}.{old.__qualname__})")
            got = tuple(inspect.signature(fn).parameters)
            if got != self.params:
                raise TypeError(f"{self.kind} {name!r}: parameters {got} differ from the registry's {self.params}")
            self._fns[name] = fn
            return fn

        return deco

    def __getitem__(self, name: str) -> F:
        try:
            return self._fns[name]
        except KeyError:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; valid: {', '.join(self.names())}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._fns

    def __iter__(self) -> Iterator[str]:
        return iter(self._fns)

    def __len__(self) -> int:
        return len(self._fns)

    def names(self) -> list[str]:
        return sorted(self._fns)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self.names())})"
