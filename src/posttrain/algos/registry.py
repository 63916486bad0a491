"""Name -> function registries. Config values are the canonical names of ALGORITHMS.md."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """A named table of functions of one kind, with aliases.

    >>> ADV = Registry("advantage estimator")
    >>> @ADV.register("grpo")
    ... def grpo(...): ...
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._table: dict[str, F] = {}
        self._canonical: dict[str, str] = {}

    def register(self, name: str, *aliases: str) -> Callable[[F], F]:
        def decorate(fn: F) -> F:
            for key in (name, *aliases):
                if key in self._table:
                    raise ValueError(f"{self.kind} {key!r} is already registered")
                self._table[key] = fn
                self._canonical[key] = name
            return fn

        return decorate

    def get(self, name: str) -> F:
        try:
            return self._table[name]
        except KeyError:
            raise KeyError(
                f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}"
            ) from None

    def canonical(self, name: str) -> str:
        self.get(name)
        return self._canonical[name]

    def names(self) -> list[str]:
        """Every accepted name, aliases included, sorted."""
        return sorted(self._table)

    def __contains__(self, name: object) -> bool:
        return name in self._table
