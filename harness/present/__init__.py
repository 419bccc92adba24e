"""Presentation: the significance table model (``table``), one renderer per format (``render``:
Markdown, LaTeX, CSV, HTML), the power analysis as text (``power_text``), what a finished study
puts on its runs (``report``), the one-page HTML report (``html_report``) and the figures
(``plots``). Renderers format; they compute nothing.

    text = render(build_tables(analysis, "seeds"), "latex")
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "build_tables",
    "render",
    "render_power",
    "report_html",
    "study_report",
]

__getattr__, __dir__ = face(__name__, {
    "build_tables": "table",
    "render": "render",
    "render_power": "power_text",
    "report_html": "html_report",
    "study_report": "report",
})
