"""The driver: runs a study on Ray Tune (the only package that imports ray.tune). Orchestration
(_orchestrate.py: the lease, MLflow's study run, data preparation, Ray, the phases), the
trainable that runs in Ray workers (_trainable.py), the one MLflow writer (_callback.py), Optuna
searchers (_searchers.py), early stopping in Tune (_early_stop_ray.py), seed rounds and the
confirmation phase (_rounds.py, _confirm.py), the end-of-study report (_final_report.py), one
driver per study (lease.py: one lease, two holders), where trial state lives (_storage.py), and
the reaper that ends a process's children once it is gone (_reaper.py).
"""

from __future__ import annotations

from harness._face import face

__all__ = ["TrialHooks", "interrupts", "run_study", "start_reaper"]

__getattr__, __dir__ = face(__name__, {
    "run_study": "runner",
    "start_reaper": "_reaper",
    "TrialHooks": "runner",
    "interrupts": "_signals",  # stop signals as Ctrl-C: harness train's too
})
