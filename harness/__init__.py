"""harness: hyperparameter studies for neural rankers (Ray Tune trials, Optuna searchers, seeded
baselines, MLflow records, paired significance tests).

The packages, bottom to top (each imports only those before it; nothing imports ``harness.cli``):
``records`` and the ground floor (``errors``, ``registry``, ``suggest``, ``heap``); ``curriculum``,
``losses`` (pure math) and ``tracking`` (MLflow records); ``metrics``; ``results``; ``stats``;
``present``; ``analysis``; ``data``; ``config`` (``TrialConfig``); ``model``; ``training``;
``study`` (a study as data); ``driver`` (the Ray runtime); ``jobs``; ``cli``. Each package's
``__all__`` is its public face; modules named ``_x`` are internal to their package.

From Python, a study's analysis in one call (harness.analysis; docs/python-api.md):
``harness.load_study(name)`` (its MLflow experiment) or ``harness.compare(path_or_dataframe)`` (a
long results table), then ``.table(format="md")``, ``.power()``, ``.runs()``. The names are
resolved on first use, so ``import harness`` imports no MLflow, torch or Ray.
"""

from __future__ import annotations

from harness._face import face

__version__ = "0.1.0"

__all__ = ["TrialConfig", "__version__", "compare", "load_study"]

__getattr__, __dir__ = face(__name__, {
    "TrialConfig": "config",
    "compare": "analysis",
    "load_study": "analysis",
})
