"""Studies as Ray Jobs on a cluster: the job-server client (``client``), what a job gets (``env``)
and turning a study file into a submission (``submit``). The job's driver is ``harness.cli.job``
(jobs/entrypoint.py); the commands are ``harness submit`` and ``harness jobs``.
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "JobServer",
    "build_runtime_env",
    "plan_submission",
]

__getattr__, __dir__ = face(__name__, {
    "build_runtime_env": "env",
    "JobServer": "client",
    "plan_submission": "submit",
})
