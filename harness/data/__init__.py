"""Data: the data section of a trial (``DataConfig``), its sources (the embedded chitchat set,
MSDialog/MANtIS TSV, TREC files, ir_datasets), BM25 and the negative samplers that keep their
scores, the on-disk cache keyed by content fingerprint, and the first-stage references.
``load_splits`` is the one entry point.
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "SOURCES",
    "DataConfig",
    "data_stats",
    "load_splits",
    "reference_maps",
]

__getattr__, __dir__ = face(__name__, {
    "data_stats": "stats",
    "DataConfig": "config",
    "load_splits": "load",
    "reference_maps": "first_stage",
    "SOURCES": "sources",
})
