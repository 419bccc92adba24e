"""A quiet terminal: what ``harness`` (without ``-v``) and a submitted study's job driver set so that
the harness's own progress and results are the output, not the libraries' INFO lines and bars."""

from __future__ import annotations

import os

# What a quiet terminal sets where the user has not (``harness -v`` sets none of it): the harness's
# progress and results are the output, not the libraries' INFO lines and bars around them. Ray's
# workers inherit the environment, so their transformers and tqdm are quiet too.
QUIET_ENV = {
    "MLFLOW_LOGGING_LEVEL": "WARNING",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TQDM_DISABLE": "1",
    "RAY_AIR_NEW_OUTPUT": "0",  # the legacy reporter, silent at Tune's verbose=0: no config box
    "RAY_DEDUP_LOGS": "1",
    # Tune logs each failed trial's whole traceback (Ray's, for a killed worker); the driver's one
    # line per failed trial says why instead (harness.driver._callback.ray_cause).
    "TUNE_PRINT_ALL_TRIAL_ERRORS": "0",
    # ... and the raylet's own report of a worker it lost (printed on the driver's stdout whatever
    # log_to_driver says), for the same reason.
    "RAY_DEDUP_LOGS_SKIP_REGEX": "A worker died or was killed|killed due to (the node running low on memory|memory pressure)",
}

# Whether quiet_libraries ran in this process: a library that sets its own level when first
# imported (Optuna: INFO, "A new study created in memory" at each search phase) is quieted where the
# harness imports it (``quiet_optuna``).
_QUIET = False

# Loggers whose warnings only restate what the harness says in its own line (set to ERROR)
QUIET_LOGGERS = ("mlflow.utils.databricks_utils",)


def quiet_libraries() -> None:
    """The environment of ``QUIET_ENV`` (defaults only), and the loggers of libraries already
    imported (an in-process caller's MLflow) at WARNING."""
    import logging

    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    global _QUIET
    _QUIET = True
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # MLflow's Databricks client warns that it falls back to its legacy authentication; where that
    # fails too the harness's one-line error says so, and where it works the warning says nothing
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def quiet_optuna() -> None:
    """Optuna's logger at WARNING where the terminal is quiet (``quiet_libraries`` ran): Optuna sets
    its own INFO level when imported, after ``quiet_libraries``."""
    if _QUIET:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
