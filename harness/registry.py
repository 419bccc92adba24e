"""Name -> callable registries for plug-in points (pacing, scoring, heuristics, searchers...).

A registry refuses a duplicate name, and a failed lookup lists the valid names from the registry
itself, so adding a variant is one decorated function and nothing else::

    PACING: Registry[PacingFn] = Registry("curriculum.pacing")

    @PACING.register("linear")
    def linear(s: int, *, delta: float, T: int, n: float) -> float: ...
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from harness.errors import ConfigError

F = TypeVar("F", bound=Callable[..., object])


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
            raise ConfigError(self.unknown_message(name)) from None

    def unknown_message(self, name: object) -> str:
        close = difflib.get_close_matches(str(name), list(self._items), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        return f"{self.key}: unknown name {name!r}{hint}; valid: {', '.join(sorted(self._items))}"

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)
