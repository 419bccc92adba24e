"""Statistics on stored results: paired tests against the seeded baseline (``paired``; by default
the crossed seeds x queries test, ``crossed``), multiple-comparison corrections (``corrections``,
``maxt``), the whole table's verdicts (``significance``), seeds added in rounds (``sequential``)
and the power analysis (``power``). Pure computation: no MLflow, no rendering.

    analysis = analyse(results, AnalysisOptions(...))
    power = power_analysis(results, PowerOptions(...))
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "CORRECTIONS",
    "TESTS",
    "AnalysisOptions",
    "PowerOptions",
    "analyse",
    "power_analysis",
]

__getattr__, __dir__ = face(__name__, {
    "analyse": "significance",
    "AnalysisOptions": "significance",
    "CORRECTIONS": "corrections",
    "power_analysis": "power",
    "PowerOptions": "power",
    "TESTS": "significance",
})
