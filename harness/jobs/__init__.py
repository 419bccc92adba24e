"""Studies as Ray Jobs on a cluster, every part of them: the job-server client (``client``), what a
job gets (``env``), turning a study file into a submission (``submit``) and the job's own driver
(``driver``, which jobs/entrypoint.py runs). The commands are ``harness submit`` and ``harness jobs``
(harness/cli/jobs.py); the files a cluster needs (entrypoint, runtime_env, KubeRay manifest, image)
are in the top-level jobs/ folder.
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
