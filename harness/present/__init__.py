"""Presentation: the significance table model (``table``), one renderer per format (``render``:
Markdown, LaTeX, CSV, HTML), the table as an object holding its data and renderings
(``significance_table``; ``collections_significance`` for a study over several collections,
built by ``collections_table`` and formatted by ``collections_render``), the power analysis as an object and as text (``power_text``), what a
finished study puts on its runs (``report``), the one-page HTML report (``html_report``) and the
figures (``plots``); ``frames`` fixes the DataFrames' column types. Renderers format; they compute nothing.

    table = SignificanceTable.build(analysis, "seeds")
    table.to_frame(), table.to_latex()
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "CollectionsSignificanceTable",
    "PowerReport",
    "SignificanceTable",
    "build_tables",
    "render",
    "render_power",
    "report_html",
    "study_report",
]

__getattr__, __dir__ = face(__name__, {
    "CollectionsSignificanceTable": "collections_significance",
    "PowerReport": "power_text",
    "SignificanceTable": "significance_table",
    "build_tables": "table",
    "render": "render",
    "render_power": "power_text",
    "report_html": "html_report",
    "study_report": "report",
})
