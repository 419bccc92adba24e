"""Studies, as data: the study file (``load_spec``; spec.py), one validation for validate, run and
submit (validate.py), the search space (space.py), early stopping's rule (early_stop.py), seed
rounds (rounds.py), the data/model variants a study touches (variants.py), the trial protocol
(ticket in, outcome out; protocol.py) and one way to run a trial (``run_trial``; trial.py). No
Ray: the runtime that runs a study on Ray Tune is harness.driver.
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "StudySpec",
    "TrialOutcome",
    "TrialTicket",
    "load_spec",
    "run_trial",
    "validate_study",
]

__getattr__, __dir__ = face(__name__, {
    "load_spec": "spec",
    "run_trial": "trial",
    "StudySpec": "spec",
    "TrialOutcome": "protocol",
    "TrialTicket": "protocol",
    "validate_study": "validate",
})
