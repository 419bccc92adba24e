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
