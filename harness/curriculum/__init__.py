"""Curriculum learning, pure math (no torch, Ray or MLflow): scoring functions that order the
training set and pacing functions that decide how much of it a step may sample (Penha & Hauff 2020),
difficulty heuristics and the loss-weight schedule (MacAvaney et al. 2020), and the pacing-aware
sampler. Each family is a ``Registry``: adding a variant is one decorated function.
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "HEURISTICS",
    "PACING",
    "SCORING",
    "PacedSampler",
    "curriculum_weight",
    "difficulties",
    "score_queries",
]

__getattr__, __dir__ = face(__name__, {
    "curriculum_weight": "weights",
    "difficulties": "heuristics",
    "HEURISTICS": "heuristics",
    "PacedSampler": "sampler",
    "PACING": "pacing",
    "score_queries": "scoring",
    "SCORING": "scoring",
})
