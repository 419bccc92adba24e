"""Metrics: per-query ranking metrics through ir_measures with a deterministic, pessimistic tie rule
(``measures``), and TREC run files and qrels written so that trec_eval and ir_measures reproduce
them (``trec``). What a trial measures; no statistics, no MLflow.
"""

from __future__ import annotations

from harness._face import face

__all__ = ["evaluate", "label_of", "metric_key"]

__getattr__, __dir__ = face(__name__, {
    "evaluate": "measures",
    "label_of": "measures",
    "metric_key": "measures",
})
