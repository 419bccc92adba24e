"""Name -> callable registries for plug-in points (pacing, scoring, heuristics, searchers...).

A registry refuses a duplicate name, and a failed lookup lists the valid names from the registry
itself, so adding a variant is one decorated function and nothing else::

    PACING: Registry[PacingFn] = Registry("curriculum.pacing")

    @PACING.register("linear")
    def linear(s: int, *, delta: float, T: int, n: float) -> float: ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from harness.errors import UnknownName, unknown_name

F = TypeVar("F")


class Registry(Generic[F]):
    def __init__(self, key: str) -> None:
        self.key = key
        self._items: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def decorate(fn: F) -> F:
            if name in self._items:
                raise ValueError(f"{self.key}: {name!r} is already registered")
            self._items[name] = fn
            return fn

        return decorate

    def get(self, name: str) -> F:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownName(self.key, name, self.names()) from None

    def unknown_message(self, name: object) -> str:
        return unknown_name(self.key, name, self.names())

    def names(self) -> list[str]:
        return sorted(self._items)

    def items(self) -> list[tuple[str, F]]:
        """(name, item) pairs in name order."""
        return [(name, self._items[name]) for name in sorted(self._items)]

    def values(self) -> list[F]:
        return [self._items[name] for name in sorted(self._items)]

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)
