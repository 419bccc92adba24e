"""The ranker: a Hugging Face encoder with one classifier per exit, its pair collator and candidate
scoring, cascade inference with per-exit drop ratios and its cost (Soldaini & Moschitti 2020), and
exports (a sequence-classification folder, MLflow models, a PyTerrier re-ranker), and the one
reader of trainer checkpoints (plain data only, nothing in them runs).
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "ExportedRanker",
    "HarnessReRanker",
    "build_model",
    "cascade_metrics",
    "cost_table",
    "export_run",
    "load_encoder",
    "load_tokenizer",
    "read_checkpoint",
    "sweep",
]

__getattr__, __dir__ = face(__name__, {
    "build_model": "factory",
    "cascade_metrics": "cascade_eval",
    "cost_table": "cascade_cost",
    "export_run": "export",
    "ExportedRanker": "pyfunc_ranker",
    "HarnessReRanker": "pyterrier_ranker",
    "load_encoder": "encoder",
    "load_tokenizer": "encoder",
    "read_checkpoint": "checkpoint",
    "sweep": "cascade_eval",
})
