"""Evaluation: per-query metrics (ir_measures, pessimistic ties), paired significance tests against
the seeded baseline (by default the crossed seeds x queries test), multiple-comparison corrections,
the significance tables, and the power analysis (how many seeds a study needs).

validate -> execute -> render:
    results = StudyResults.build(records)  or  read_long_csv(path)  or  read_experiment(name)
    analysis = analyse(results, AnalysisOptions(...))       # significance.py
    text = render(build_tables(analysis, "seeds"), "latex")  # table.py, render.py
    power = power_analysis(results, PowerOptions(...))        # power.py; text: render_power
End of a study: ``report.study_report(results, options)``; figures: ``plots.write_plots``.
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "CORRECTIONS",
    "TESTS",
    "AnalysisOptions",
    "PowerOptions",
    "StudyResults",
    "analyse",
    "build_tables",
    "evaluate",
    "export_runs",
    "power_analysis",
    "read_experiment",
    "read_long_csv",
    "render",
    "render_power",
    "study_report",
]

__getattr__, __dir__ = face(__name__, {
    "analyse": "significance",
    "AnalysisOptions": "significance",
    "build_tables": "table",
    "CORRECTIONS": "corrections",
    "evaluate": "metrics",
    "export_runs": "trec_export",
    "power_analysis": "power",
    "PowerOptions": "power",
    "read_experiment": "mlflow_reader",
    "read_long_csv": "longcsv",
    "render": "render",
    "render_power": "power",
    "study_report": "report",
    "StudyResults": "results",
    "TESTS": "significance",
})
