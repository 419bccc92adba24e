"""MLflow, the one layer that shapes its records: the names (``conventions``), the store, and the
study's records (study run > config run > seed run), written by the driver and read back by the
tables. It only logs: summaries and tests come from its callers.
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "SeedRun",
    "StudyRecords",
    "TrackingStore",
    "default_tracking_uri",
    "iter_runs",
    "read_per_query",
]

__getattr__, __dir__ = face(__name__, {
    "default_tracking_uri": "store",
    "iter_runs": "records",
    "read_per_query": "records",
    "SeedRun": "records",
    "StudyRecords": "records",
    "TrackingStore": "store",
})
