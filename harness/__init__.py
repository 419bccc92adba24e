"""harness: a hyperparameter-study harness for neural rankers (Ray Tune + Optuna + MLflow)."""

from __future__ import annotations

__version__ = "0.1.0"
