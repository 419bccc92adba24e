"""harness: hyperparameter studies for neural rankers (Ray Tune trials, Optuna searchers, seeded
baselines, MLflow records, paired significance tests).

The packages, bottom to top (each imports only those before it; nothing imports ``harness.cli``):
``records`` and the ground floor (``errors``, ``registry``, ``suggest``, ``heap``); ``curriculum``,
``losses`` (pure math) and ``tracking`` (MLflow records); ``evaluation``; ``data``; ``config``
(``TrialConfig``); ``model``; ``training``; ``study``; ``jobs``; ``cli``. Each package's
``__all__`` is its public face; modules named ``_x`` are internal to their package.
"""

from __future__ import annotations

from harness._face import face

__version__ = "0.1.0"

__all__ = ["TrialConfig", "__version__"]

__getattr__, __dir__ = face(__name__, {"TrialConfig": "config"})
