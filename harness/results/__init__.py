"""Results: a study's stored values, checked once (``StudyResults``, ``stored``), and the readers
that build them: the study's MLflow experiment (``mlflow_reader``, ``study_record``), the long
results CSV or DataFrame (``longcsv``), and every TREC run file of a study (``trec_export``).
Read only; the statistics are in harness.stats, the tables in harness.present.
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "StudyResults",
    "export_runs",
    "read_experiment",
    "read_long_csv",
    "read_long_frame",
    "read_study_record",
]

__getattr__, __dir__ = face(__name__, {
    "export_runs": "trec_export",
    "read_experiment": "mlflow_reader",
    "read_long_csv": "longcsv",
    "read_long_frame": "longcsv",
    "read_study_record": "study_record",
    "StudyResults": "stored",
})
