"""A package's public face, loaded on first use.

Each package's ``__init__`` lists its public names in ``__all__`` and where each is defined; a name
is imported from its module the first time it is read (PEP 562), so ``import harness.data.config``
does not import the rest of ``harness.data`` (numba, torch, MLflow stay out until used)::

    __all__ = ["load_splits", "DataConfig"]
    __getattr__, __dir__ = face(__name__, {"load_splits": "load", "DataConfig": "config"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def face(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: each name of ``where`` (name -> module of the
    package) resolves to that module's attribute of the same name, cached on the package."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__
