"""Evaluation: per-query metrics (ir_measures, pessimistic ties), paired significance tests against
the seeded baseline (by default the crossed seeds x queries test), multiple-comparison corrections,
the significance tables, and the power analysis (how many seeds a study needs).

In one call (analysis.py; ``harness.load_study`` and ``harness.compare``), what `harness table` and
`harness power` print:
    analysis = load_study(name)  or  compare(path_or_dataframe)
    analysis.table(format="md"), analysis.power(), analysis.runs()

Step by step, validate -> execute -> render:
    results = StudyResults.build(records)  or  read_long_csv(path)  or  read_long_frame(dataframe)
              or  read_experiment(name)
    analysis = analyse(results, AnalysisOptions(...))       # significance.py
    text = render(build_tables(analysis, "seeds"), "latex")  # table.py, render.py
    power = power_analysis(results, PowerOptions(...))        # power.py; text: render_power
End of a study: ``report.study_report(results, options)``; figures: ``plots.write_plots``; the
one-page HTML report (`harness report`): ``report_html(report, read_study_record(name, results))``.
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "CORRECTIONS",
    "TESTS",
    "AnalysisOptions",
    "PowerOptions",
    "StudyAnalysis",
    "StudyResults",
    "TableOptions",
    "analyse",
    "build_tables",
    "compare",
    "evaluate",
    "export_runs",
    "load_study",
    "power_analysis",
    "read_experiment",
    "read_long_csv",
    "read_long_frame",
    "read_study_record",
    "render",
    "render_power",
    "report_html",
    "study_report",
]

__getattr__, __dir__ = face(__name__, {
    "analyse": "significance",
    "AnalysisOptions": "significance",
    "build_tables": "table",
    "compare": "analysis",
    "CORRECTIONS": "corrections",
    "evaluate": "metrics",
    "export_runs": "trec_export",
    "load_study": "analysis",
    "power_analysis": "power",
    "PowerOptions": "power",
    "read_experiment": "mlflow_reader",
    "read_long_csv": "longcsv",
    "read_long_frame": "longcsv",
    "read_study_record": "study_record",
    "render": "render",
    "render_power": "power",
    "report_html": "html_report",
    "study_report": "report",
    "StudyAnalysis": "analysis",
    "StudyResults": "results",
    "TableOptions": "analysis",
    "TESTS": "significance",
})
