"""Optuna samplers as Ray Tune pickles them. Tune pickles the searcher (with its sampler) into its
experiment state, to checkpoint and resume; Optuna 5's NSGAIISampler holds a ``threading.Lock``,
which no pickler takes, so every nsga2 search failed at ``tune.Tuner``. Its pickled state leaves
the lock out and an unpickled sampler gets a fresh one (a lock guards one process's threads, and
holds nothing a resumed search needs). Imported by ``_searchers.make_searcher`` only: it imports
optuna."""

from __future__ import annotations

import threading
from typing import Any

import optuna


class NSGAIISampler(optuna.samplers.NSGAIISampler):
    """optuna.samplers.NSGAIISampler that pickles (module docstring)."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_thread_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._thread_lock = threading.Lock()


def sampler_class(name: str) -> type:
    """The sampler class of Optuna's ``name`` (TPESampler, ...), picklable."""
    return NSGAIISampler if name == "NSGAIISampler" else getattr(optuna.samplers, name)
