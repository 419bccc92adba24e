"""Evaluation: per-query metrics (ir_measures, pessimistic ties), paired significance tests against
the seeded baseline, multiple-comparison corrections, and the significance tables.

validate -> execute -> render:
    results = StudyResults.build(records)  or  read_long_csv(path)  or  read_experiment(name)
    analysis = analyse(results, AnalysisOptions(...))       # significance.py
    text = render(build_tables(analysis, "seeds"), "latex")  # table.py, render.py
End of a study: ``report.study_report(results, options)``; figures: ``plots.write_plots``.
"""
