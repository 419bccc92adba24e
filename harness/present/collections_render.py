"""Renderers of a ``CollectionsTable`` (the table of a study over several collections): Markdown,
LaTeX, CSV and HTML text. They format; they compute nothing.

- ``md``: a GitHub pipe table (one header row: a grouped column is headed "collection: metric"),
  a seeds-form block heading as a row of its own in bold, the footnote below.
- ``latex``: ONE ``table`` float per table with a ``\\caption``, a ``\\label``, a booktabs
  ``tabular`` whose column groups are ``\\multicolumn`` headings over ``\\cmidrule``s (a seeds-form
  block heading is a ``\\multicolumn`` row), and the footnote, the markers' legend included, as a
  ``\\footnotesize`` note inside the float. Needs ``\\usepackage{booktabs}`` (and
  ``\\usepackage[T1]{fontenc}`` for < and >), as its first comment line says.
- ``csv``: one line per cell, a ``collection`` column on every line (``combined`` for the combined
  verdicts) and the numbers behind each cell: value, sd, marker, direction, mean difference, its
  interval, p-value, adjusted p-value, family size m, and for a combined verdict tau^2, I^2 and k;
  the last, ``note``, holds each table's full footnote (an unfinished study's INCOMPLETE sentence,
  the queries some runs lack, the metrics counted once) on its first line and is empty on the others,
  as on one collection.
- ``html``: a ``<table>`` with a header row per level, block headings as full-width rows, and the
  footnote in its ``<tfoot>``.
"""

from __future__ import annotations

import csv
import html
import io
import textwrap
from collections.abc import Callable, Sequence

from harness.metrics.measures import canonical_name
from harness.present.collections_table import CollectionsNotes, CollectionsTable, GridCell
from harness.present.render import (
    CORRECTION_NAMES,
    DASH,
    label_word,
    latex_escape,
    latex_mark,
    latex_needs,
    latex_plain_mark,
    latex_row_label,
    latex_tally,
    md_escape,
    md_escape_text,
    the_baseline,
    unique_labels,
)
from harness.registry import Registry
from harness.textfile import csv_cell

COLLECTION_RENDERERS: Registry[Callable[[CollectionsTable], str]] = Registry("evaluation.collections_format")


def render_collections(tables: Sequence[CollectionsTable], fmt: str) -> str:
    """Every table in one text; CSV shares one header, and no two LaTeX floats share a label."""
    fn = COLLECTION_RENDERERS.get(fmt)
    if fmt == "csv":
        return fn(tables[0]) + "".join(_csv_rows(t) for t in tables[1:])
    if fmt == "latex":  # one document: each table's \label its own (render.unique_labels)
        return "\n".join(latex(t, label) for t, label in zip(tables, unique_labels(
            [(latex_label(t), (t.form, *t.metrics, t.title)) for t in tables]), strict=True))
    return "\n".join(fn(t) for t in tables)


def footnote(notes: CollectionsNotes, text: Callable[[str], str], mark: Callable[[str], str]) -> str:
    """The footnote in words: test and units per collection, markers, correction, family and m, the
    combined verdict, remarks, tie rule and versions."""
    def levels(symbols: tuple[str, ...]) -> str:
        return ", ".join(f"{mark(s)}{text(f' p < {a:g}')}" for s, a in zip(symbols, notes.levels, strict=False))

    baseline = the_baseline(notes.baseline)
    parts = [
        text(f"{notes.test_description[0].upper()}{notes.test_description[1:]} on each collection "
             f"({'; '.join(notes.units)}) against {baseline}; {notes.placement}. Significantly better: "),
        levels(notes.better), text("; significantly worse: "), levels(notes.worse),
        text(f". {notes.correction[0].upper()}{notes.correction[1:]}, family: {notes.family_words} "
             f"({_m(notes)}). {notes.combined}. "),
    ]
    parts += [text(f"{r.rstrip('.')}. ") for r in notes.remarks]
    parts.append(text(f"SD is the sample standard deviation over seeds. {notes.tie_rule}. {notes.versions}."))
    return "".join(parts)


def _m(notes: CollectionsNotes) -> str:
    """"m = 6 comparisons", or where the families differ in size "m = 4 to 6 comparisons by family"."""
    if 0 < notes.fewest < notes.comparisons:
        return f"m = {notes.fewest} to {notes.comparisons} comparisons by family"
    return f"m = {notes.comparisons} comparisons"


def caption(table: CollectionsTable) -> str:
    """One line: what the table is, the test and the correction with m."""
    n = table.notes
    correction = CORRECTION_NAMES.get(n.correction_name, n.correction_name)
    family = (f"{correction} over all {n.comparisons} comparisons" if n.family == "table"
              else f"{correction} per {n.family} (m up to {n.comparisons})")
    if n.correction_name == "none":
        family = f"no correction ({n.comparisons} comparisons)"
    baseline = "the baseline" if n.baseline == "baseline" else n.baseline
    return (f"{table.title}: {n.test} test against {baseline} on each collection, a combined verdict "
            f"across them; {family}")


def latex_label(table: CollectionsTable) -> str:
    words = ["collections", table.form, *table.metrics]
    return "tab:harness-" + "-".join(label_word(w) for w in words)


def _number(value: float | None, decimals: int, signed: bool = False) -> str | None:
    if value is None:
        return None
    return f"{value:+.{decimals}f}" if signed else f"{value:.{decimals}f}"


def _interval_text(c: GridCell, decimals: int) -> str:
    if c.interval is None:
        return ""
    return f" [{_number(c.interval[0], decimals)}, {_number(c.interval[1], decimals)}]"


@COLLECTION_RENDERERS.register("md")
def markdown(table: CollectionsTable) -> str:
    esc = md_escape

    def cell(c: GridCell) -> str:
        value = _number(c.value, table.decimals, c.signed)
        if value is None:
            return DASH
        out = f"**{value}**" if c.bold else value
        if c.sd is not None:
            out += f" \u00b1 {_number(c.sd, table.decimals)}"
        out += esc(_interval_text(c, table.decimals))
        return out + (c.marker or "") + "".join(f" {t.text}" for t in c.tally)

    headers = _flat_headers(table)
    lines = [f"**{esc(table.title)}**", "", "| " + " | ".join(esc(h) for h in (table.corner, *headers)) + " |",
             "|:--" + "|--:" * len(headers) + "|"]
    for row in table.rows:
        if row.block is not None:
            lines.append("| " + " | ".join([f"**{esc(row.block)}**", *([""] * len(headers))]) + " |")
        lines.append("| " + " | ".join([esc(row.label), *(cell(c) for c in row.cells)]) + " |")
    lines += ["", footnote(table.notes, md_escape_text, md_escape_text), ""]
    return "\n".join(lines)


def _flat_headers(table: CollectionsTable) -> list[str]:
    """One header per column: "group: column" under a group, else the column."""
    if not table.groups:
        return list(table.columns)
    out = []
    i = 0
    for label, span in table.groups:
        out += [f"{label}: {c}" for c in table.columns[i:i + span]]
        i += span
    return out


@COLLECTION_RENDERERS.register("latex")
def latex(table: CollectionsTable, label: str | None = None) -> str:
    """The table's float; ``label`` its ``\\label`` key where the document gave it one of its own
    (``render_collections``: render.unique_labels), else ``latex_label``'s."""
    def cell(c: GridCell) -> str:
        value = _number(c.value, table.decimals, c.signed)
        if value is None:
            return "--"
        out = rf"\textbf{{{value}}}" if c.bold else value
        if c.sd is not None:
            out += rf" $\pm$ {_number(c.sd, table.decimals)}"
        out += latex_escape(_interval_text(c, table.decimals))
        out += latex_mark(c.marker) if c.marker else ""
        return out + "".join(latex_tally(tally) for tally in c.tally)

    plain_mark = latex_plain_mark

    width = len(table.columns) + 1
    lines = [f"% harness table over collections: {latex_escape(table.title)} ({table.form} form); needs ",
             r"\begin{table}[tbp]", r"\centering", r"\small",
             rf"\caption{{{latex_escape(caption(table))}}}", rf"\label{{{label or latex_label(table)}}}",
             rf"\begin{{tabular}}{{l{'r' * len(table.columns)}}}", r"\toprule"]
    if table.groups:
        heads, rules, start = [""], [], 2
        for group, span in table.groups:
            heads.append(rf"\multicolumn{{{span}}}{{c}}{{{latex_escape(group)}}}")
            rules.append(rf"\cmidrule(lr){{{start}-{start + span - 1}}}")
            start += span
        lines += [" & ".join(heads) + r" \\", " ".join(rules)]
    lines += [" & ".join(latex_escape(h) for h in (table.corner, *table.columns)) + r" \\", r"\midrule"]
    for row in table.rows:
        if row.block is not None:
            if row is not table.rows[0]:
                lines.append(r"\midrule")
            lines.append(rf"\multicolumn{{{width}}}{{l}}{{\textit{{{latex_escape(row.block)}}}}} \\")
        elif row.rule_before:
            lines.append(r"\cmidrule(lr){2-" + str(width) + "}")
        lines.append(" & ".join([latex_row_label(row.label), *(cell(c) for c in row.cells)]) + r" \\")
    note = footnote(table.notes, latex_escape, plain_mark)
    lines += [r"\bottomrule", r"\end{tabular}", r"\par\smallskip", r"{\footnotesize\raggedright",
              *textwrap.wrap(note, 96, break_long_words=False, break_on_hyphens=False),
              r"\par}", r"\end{table}", ""]
    lines[0] += latex_needs(lines[1:])
    return "\n".join(lines)


CSV_HEADER = ("table", "collection", "row", "column", "metric", "measure", "value", "sd", "bold", "marker",
              "direction", "mean_diff", "ci_low", "ci_high", "p_value", "p_adjusted", "comparisons",
              "test", "correction", "family", "tau2", "i2", "k", "note")


def _csv_rows(table: CollectionsTable) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    headers = _flat_headers(table)
    n = table.notes
    note = footnote(n, str, str)  # the full note, once per table: on its first line
    for i, row in enumerate(table.rows):
        for j, (header, c) in enumerate(zip(headers, row.cells, strict=True)):
            tested: list[object] = [""] * 6
            extra: list[object] = [""] * 3
            if c.comparison is not None:
                r = c.comparison.result
                tested = [c.comparison.direction, repr(r.mean_diff), *(repr(float(v)) for v in c.comparison.interval),
                          repr(r.p_value), repr(c.comparison.p_adjusted)]
                m: object = c.comparison.family_size
            elif c.combined is not None:
                r2 = c.combined.result
                tested = [c.combined.direction, repr(r2.estimate), *(repr(float(v)) for v in c.combined.interval),
                          repr(r2.p_value), repr(c.combined.p_adjusted)]
                extra = [repr(r2.tau2), repr(r2.i2), r2.k]
                m = c.combined.family_size
            else:
                m = ""
            # Names come from the user (titles, collections, configurations, metrics): never a
            # spreadsheet formula, in any column (numbers stay as they are: textfile.csv_cell).
            writer.writerow([csv_cell(v) for v in (
                table.title, c.collection, row.label, header, c.metric, canonical_name(c.metric),
                "" if c.value is None else repr(c.value), "" if c.sd is None else repr(c.sd), int(c.bold),
                (c.marker or "") + " ".join(t.text for t in c.tally), *tested[:1], *tested[1:], m,
                n.test, n.correction_name, n.family, *extra, note if i == 0 and j == 0 else "")])
    return buf.getvalue()


@COLLECTION_RENDERERS.register("csv")
def csv_text(table: CollectionsTable) -> str:
    return ",".join(CSV_HEADER) + "\n" + _csv_rows(table)


@COLLECTION_RENDERERS.register("html")
def html_table(table: CollectionsTable) -> str:
    def cell(c: GridCell) -> str:
        value = _number(c.value, table.decimals, c.signed)
        if value is None:
            return "&ndash;"
        out = f"<strong>{value}</strong>" if c.bold else value
        if c.sd is not None:
            out += f" &plusmn; {_number(c.sd, table.decimals)}"
        out += html.escape(_interval_text(c, table.decimals))
        out += f"<sup>{html.escape(c.marker)}</sup>" if c.marker else ""
        return out + "".join(f" <sup>{html.escape(t.text)}</sup>" for t in c.tally)

    width = len(table.columns) + 1
    head = []
    if table.groups:
        groups = "".join(f'<th colspan="{span}" scope="colgroup">{html.escape(label)}</th>'
                         for label, span in table.groups)
        head.append(f"<tr><th></th>{groups}</tr>")
    head.append("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in (table.corner, *table.columns)) + "</tr>")
    lines = ['<table class="harness-table harness-collections">', f"<caption>{html.escape(table.title)}</caption>",
             f"<thead>{''.join(head)}</thead>", "<tbody>"]
    for row in table.rows:
        if row.block is not None:
            lines.append(f'<tr class="block"><th colspan="{width}">{html.escape(row.block)}</th></tr>')
        style = ' style="border-top: 1px solid"' if row.rule_before else ""
        cells = "".join(f'<td align="right" data-collection="{html.escape(c.collection)}">{cell(c)}</td>'
                        for c in row.cells)
        lines.append(f"<tr{style}><th>{html.escape(row.label)}</th>{cells}</tr>")
    note = footnote(table.notes, html.escape, html.escape)
    lines += ["</tbody>", f'<tfoot><tr><td colspan="{width}">{note}</td></tr></tfoot>', "</table>", ""]
    return "\n".join(lines)


def collections_page(study: str, configs_html: str, seeds_html: str) -> str:
    """A self-contained page (the study's report.html): the whole table, then the per-seed tables."""
    title = html.escape(f"{study}: the table over collections")
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + title + "</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
            "td,th{padding:.2em .6em}thead th{border-bottom:1px solid #888}tr.block th{text-align:left;"
            "font-style:italic}caption{font-weight:bold;text-align:left}tfoot td{font-size:small;"
            "max-width:60em}</style></head><body>\n<h1>" + title + "</h1>\n<section id=\"collections\">"
            + configs_html + "</section>\n<h2>Per seed</h2>\n<section id=\"per-seed\">" + seeds_html
            + "</section>\n</body></html>\n")
