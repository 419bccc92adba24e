"""The entry point of a study on Ray Tune (a facade): ``run_study`` and the test hooks it takes.

The Ray glue lives in small modules, the only ones that import ray.tune: harness.driver._trainable
(worker side), harness.driver._callback (driver-side MLflow writer and progress), harness.driver._searchers
(Optuna and the seed repeater) and harness.driver._orchestrate (lease, Ray setup, phases, report). What
moves between them is the trial protocol (harness.study.protocol, no Ray).
"""

from __future__ import annotations

from harness.driver._orchestrate import init_local_ray, init_ray, run_study
from harness.driver._trainable import TrialHooks

__all__ = ["TrialHooks", "init_local_ray", "init_ray", "run_study"]
