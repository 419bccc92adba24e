"""Studies: the study file (``load_study``, one validation for validate, run and submit), the trial
protocol (ticket in, outcome out; no Ray), one way to run a trial (``run_trial``), and the Ray Tune
glue in small internal modules (the only ones that import ray.tune): trainable, driver callback,
searchers, orchestration, leases, storage, early stopping; ``start_reaper`` ends a process's
children once it is gone, however it died (its local Ray; `harness ui`'s MLflow server).
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "StudySpec",
    "TrialOutcome",
    "TrialTicket",
    "load_study",
    "run_study",
    "run_trial",
    "start_reaper",
    "validate_study",
]

__getattr__, __dir__ = face(__name__, {
    "load_study": "spec",
    "run_study": "runner",
    "run_trial": "trial",
    "start_reaper": "_reaper",
    "StudySpec": "spec",
    "TrialOutcome": "protocol",
    "TrialTicket": "protocol",
    "validate_study": "validate",
})
