"""Renderers: a ``Table`` to Markdown, LaTeX, CSV or HTML text. They format; they compute nothing.

- ``md``: a GitHub pipe table under a bold title, the footnote below it.
- ``latex``: a ``table`` float per table that labels itself: ``\\caption`` with the metric and the
  test (``caption``: "MAP: mean over 3 seeds; crossed test against BERT, Holm over 6 comparisons"),
  a ``\\label`` (``latex_label``: tab:harness-seeds-map; with 8 hex digits more where two tables of
  one text would share one, ``unique_labels``), a booktabs ``tabular`` (no vertical rules,
  names escaped, bold by ``\\textbf``, markers as math superscripts ``$^{\\dagger}$``) and a
  one-line ``\\footnotesize`` legend under it (``legend``: the markers, the test, the correction and
  the family size m; a study that did not finish, its INCOMPLETE sentence on a line below), so the
  PDF says what each table is; the full footnote follows the float as a
  comment block (``% Note: ...``), in the source a paper ``\\input``s but not in its PDF. It needs
  ``\\usepackage{booktabs}`` (and ``\\usepackage[T1]{fontenc}`` for ``<`` and ``>``, and for letters
  only T1 fonts have, ð, þ, «), which its first comment line says, with the characters pdflatex
  cannot set at all where its text holds some (``latex_needs``).
- ``csv``: one line per cell with its numbers (value, sd; for tested cells the direction, mean
  difference, its confidence interval, d_z, p-value, adjusted p-value and family size), so the
  footnote's facts are columns; a per-seed tally goes into the marker column. Then two columns
  name the cell's metric both ways, whatever names the table shows: ``metric`` (the harness key,
  map) and ``measure`` (ir-measures' canonical name, AP); the last, ``note``, holds each table's
  full footnote on its first line and is empty on the others.
- ``html``: a ``<table>`` with the footnote in its ``<tfoot>``.

The summary form's interval cells show "[low, high]".

Per-seed tallies (significantly better in k of S seeds) follow the value: md and CSV "†2/3",
LaTeX ``$^{\\dagger\\,2/3}$``, HTML ``<sup>``.
"""

from __future__ import annotations

import csv
import html
import io
import re
import textwrap
from collections.abc import Callable, Sequence

from harness.metrics.measures import canonical_name
from harness.present.table import Cell, Notes, Table
from harness.registry import Registry
from harness.stats.significance import Tally
from harness.textfile import csv_cell

RENDERERS: Registry[Callable[[Table], str]] = Registry("evaluation.format")

# Unicode marker -> LaTeX math symbol (core LaTeX, no extra package).
LATEX_SYMBOLS = {"\u2020": r"\dagger", "\u2021": r"\ddagger", "\u00a7": r"\S", "\u2193": r"\downarrow",
                 "\u21d3": r"\Downarrow", "\u21ca": r"\downarrow\downarrow", "*": r"*"}
_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}", "<": r"\textless{}", ">": r"\textgreater{}",
                  # "|" as it stands is an em dash in the OT1 fonts that booktabs alone leaves
                  "|": r"\textbar{}",
                  "\u00b1": r"$\pm$", "\u00d7": r"$\times$", "\u0394": r"$\Delta$"}
_MD_SPECIAL = "\\|*_`<>[]"  # escaped in names
_MD_TEXT_SPECIAL = "\\*_`>"    # escaped in the footnote; "<" too where it could open a tag (_MD_TAG)
# "<" before a letter, "/", "!" or "?" opens raw HTML or an autolink in Markdown ("<script>", "<!--");
# "p < 0.05" is text as it stands.
_MD_TAG = re.compile(r"<(?=[A-Za-z/!?])")
DASH = "\u2013"


def md_escape(s: str) -> str:
    """A name (title, header, row label) as Markdown text."""
    return "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in s)


def md_escape_text(s: str) -> str:
    """Footnote words as Markdown text (brackets and bars left alone): a name in the footnote (the
    baseline, a configuration missing queries) never becomes raw HTML.

    >>> md_escape_text("the baseline <script>x</script>; p < 0.05")
    'the baseline \\\\<script\\\\>x\\\\</script\\\\>; p < 0.05'
    """
    return _MD_TAG.sub(r"\\<", "".join("\\" + ch if ch in _MD_TEXT_SPECIAL else ch for ch in s))


def render(tables: Sequence[Table], fmt: str) -> str:
    """Every table in one text; CSV shares one header, and no two LaTeX floats share a label."""
    fn = RENDERERS.get(fmt)
    if fmt == "csv":
        return fn(tables[0]) + "".join(_csv_rows(t) for t in tables[1:])
    if fmt == "latex":  # one document: each table's \label its own (unique_labels)
        return "\n".join(latex(t, label) for t, label in zip(tables, unique_labels(
            [(latex_label(t), (t.form, *t.metrics, t.title)) for t in tables]), strict=True))
    return "\n".join(fn(t) for t in tables)


def the_baseline(name: str) -> str:
    """``the baseline NAME``, or ``the baseline`` for a baseline named so (never "baseline baseline")."""
    return "the baseline" if name == "baseline" else f"the baseline {name}"


def _stopped(n: int) -> str:
    if not n:
        return ""
    which = "a configuration" if n == 1 else f"{n} configurations"
    return f", including those of {which} stopped early, each counted with p = 1"


def footnote(notes: Notes, text: Callable[[str], str], mark: Callable[[str], str]) -> str:
    """The footnote in words: test, units, levels and markers, correction, tie rule, versions."""
    def levels(symbols: tuple[str, ...]) -> str:
        return ", ".join(f"{mark(s)}{text(f' p < {a:g}')}" for s, a in zip(symbols, notes.levels))

    if notes.untested:
        parts = [text(f"{notes.untested}. Cells show the values over {notes.units[4:]} against "
                      f"{the_baseline(notes.baseline)}. ")]
        parts += [text(f"{r.rstrip('.')}. ") for r in notes.remarks]  # a note may end its own sentence
        parts.append(text(f"{_sd_sentence(notes)}. {notes.tie_rule}. {notes.versions}."))
        return "".join(parts)
    parts = [
        text(f"{notes.test_description[0].upper()}{notes.test_description[1:]} ({notes.units}) "
             f"against {the_baseline(notes.baseline)}; {notes.placement}. Significantly better: "),
        levels(notes.better), text("; significantly worse: "), levels(notes.worse),
        text(f". {notes.correction[0].upper()}{notes.correction[1:]}, family: {notes.family} "
             f"(m = {notes.comparisons} comparisons{_stopped(notes.stopped)}). "),
    ]
    if notes.per_run_metrics:
        lacking = ", ".join(notes.per_run_metrics)
        parts.append(text(f"{lacking} {'has' if len(notes.per_run_metrics) == 1 else 'have'} per-run values "
                          "only, so every metric of this table takes the across-seeds test, the one test "
                          "they all allow (--metric with the others alone tests those over their queries). "))
    elif notes.per_run_only:
        parts.append(text("Only per-run values are available, so the across-seeds test is the only "
                          "test possible. "))
    if notes.tally_seeds is not None:
        n = notes.tally_seeds
        parts += [text(f"Counts of significant seeds (p < {notes.levels[0]:g}): "), mark(notes.better[0]),
                  text(f"k/{n} better in k of the {n} seeds, "), mark(notes.worse[0]), text(f"k/{n} worse. ")]
    parts += [text(f"{r.rstrip('.')}. ") for r in notes.remarks]  # a note may end its own sentence
    if notes.effect_note:
        parts.append(text(f"{notes.effect_note} (CSV and MLflow). "))
    parts.append(text(f"{_sd_sentence(notes)}. {notes.tie_rule}. {notes.versions}."))
    return "".join(parts)


def _one_seed(notes: Notes) -> bool:
    """Every configuration has one seed, so no cell has an SD (one run has no sample standard
    deviation), whatever test ran (--one-seed-test query tests over the queries)."""
    return re.fullmatch(r"1 seeds?", notes.seeds_text) is not None


def _sd_sentence(notes: Notes) -> str:
    """What SD is, or with one seed that there is none (not "the SD over 1 seeds")."""
    return "No SD: one seed has no sample standard deviation" if _one_seed(notes) else notes.sd_note


def legend(notes: Notes, text: Callable[[str], str], mark: Callable[[str], str]) -> str:
    """The markers in one line, with the test, the correction and the family size m:
    "† p < 0.05, ‡ p < 0.01 better than BERT; ↓, ⇓ worse; crossed test, Holm, m = 6". Where no
    marker can appear, as the footnote of an untested table has no legend, it says so instead of
    describing markers: no test ran (one seed), or no configuration is compared with the baseline
    (a table of the baseline alone, m = 0)."""
    if notes.untested:
        return text(f"No significance markers: one seed, no test against {the_baseline(notes.baseline)}")
    if not notes.comparisons:
        return text(f"No significance markers: no configuration is compared with {the_baseline(notes.baseline)}")

    def levels(symbols: tuple[str, ...]) -> str:
        return ", ".join(f"{mark(s)}{text(f' p < {a:g}')}" for s, a in zip(symbols, notes.levels))

    worse = ", ".join(mark(s) for s in notes.worse[:len(notes.levels)])
    correction = CORRECTION_NAMES.get(notes.correction_name, notes.correction_name)
    parts = [levels(notes.better), text(f" better than {the_baseline(notes.baseline)}; "), worse,
             text(" worse")]
    if notes.tally_seeds is not None:
        parts += [text("; "), mark(notes.better[0]), text(f"k/{notes.tally_seeds}: in k of the "
                                                             f"{notes.tally_seeds} seeds")]
    parts.append(text(f"; {notes.test} test, {correction}, m = {notes.comparisons}"))
    return "".join(parts)


def _number(value: float | None, decimals: int) -> str | None:
    return None if value is None else f"{value:.{decimals}f}"


def _interval(c: Cell, decimals: int) -> str | None:
    """A confidence interval's cell text, "[-0.0040, 0.0280]"; None for any other cell."""
    if c.interval is None:
        return None
    return f"[{_number(c.interval[0], decimals)}, {_number(c.interval[1], decimals)}]"


CORRECTION_NAMES = {"none": "no correction", "bonferroni": "Bonferroni", "holm": "Holm",
                     "bh": "Benjamini-Hochberg", "maxt": "max-|t|"}
_FORM_CONTENTS = {
    "seeds": "per seed, mean (AVG) and SD over {seeds}",
    "configs": "mean \u00b1 SD over {seeds}",
    "summary": "mean and SD over {seeds}, difference to the baseline and its {level} interval",
    "summary per-seed": "mean and SD over {seeds}, difference to the baseline",
}
# One seed: no SD in any cell (_one_seed).
_ONE_SEED_CONTENTS = {
    "seeds": "per seed and mean (AVG) over 1 seed, no SD",
    "configs": "mean over 1 seed, no SD",
    "summary": "mean over 1 seed (no SD), difference to the baseline and its {level} interval",
    "summary per-seed": "mean over 1 seed (no SD), difference to the baseline",
}


def caption(table: Table) -> str:
    """What a table is, in one line: its metric(s), what the cells are, the test and the correction:
    "MAP: mean \u00b1 SD over 3 seeds; crossed test against BERT, Holm over 6 comparisons"."""
    n = table.notes
    # no interval column under the per-seed test, nor where no test ran
    key = ("summary per-seed" if table.form == "summary" and (n.test == "per-seed" or n.untested)
           else table.form)
    contents = (_ONE_SEED_CONTENTS if _one_seed(n) else _FORM_CONTENTS)[key].format(
        seeds=n.seeds_text or "the seeds", level=f"{n.confidence:.0%}")
    correction = CORRECTION_NAMES.get(n.correction_name, n.correction_name)
    family = (f"{correction} over {n.comparisons} comparison{'s' if n.comparisons != 1 else ''}"
              if n.correction_name != "none" else f"no correction ({n.comparisons} comparisons)")
    baseline = "the baseline" if n.baseline == "baseline" else n.baseline
    if n.untested:
        return f"{table.title}: {contents}; against {baseline}, no significance test (one seed)"
    if not n.comparisons:
        return f"{table.title}: {contents}; {baseline} only, no comparison"
    return f"{table.title}: {contents}; {n.test} test against {baseline}, {family}"


# The phases a title may end with, " (confirmatory)" (harness.present.table._phase_title; the
# phases of harness.results.mlflow_reader.PHASES but auto).
_PHASE_SUFFIX = re.compile(r" \((confirmatory|exploratory)\)\Z")


def latex_label(table: Table) -> str:
    """A ``\\label`` key of the table's form, metrics and phase: tab:harness-seeds-map. The phase is
    read from the title's end only where it is one: a metric's own name may end in ")" ("score)",
    "f(x)"), and a title's last "(" is not always a phase's."""
    phase = _PHASE_SUFFIX.search(table.title)
    words = [table.form, *table.metrics, *([phase.group(1)] if phase else [])]
    return "tab:harness-" + "-".join(label_word(w) for w in words)


def unique_labels(labels: Sequence[tuple[str, tuple[str, ...]]]) -> list[str]:
    """The ``\\label`` keys of the tables of one document, each its own: ``labels`` holds each
    table's key and the words it was made of. Keys that several tables share (metrics a-b, a_b and
    "A b" all give tab:harness-summary-a-b; pdflatex warns "multiply defined" and every \\ref goes to
    the last) each get 8 hex digits of the SHA-256 of their words, so a table's key does not hang on
    the order of the tables; a key no other table of the document shares stays as it is.

    >>> unique_labels([("tab:x-a-b", ("x", "a-b")), ("tab:x-a-b", ("x", "a_b")), ("tab:x-c", ("x", "c"))])
    ['tab:x-a-b-949adf47', 'tab:x-a-b-44a8d47c', 'tab:x-c']
    """
    import hashlib
    from collections import Counter

    counts = Counter(key for key, _ in labels)
    keys = [key if counts[key] == 1 else
            f"{key}-{hashlib.sha256(chr(0).join(words).encode()).hexdigest()[:8]}" for key, words in labels]
    # Two tables of the same words (or a key that is another's with its digits) keep their order.
    seen: Counter[str] = Counter()
    out = []
    for key in keys:
        seen[key] += 1
        out.append(key if seen[key] == 1 else f"{key}-{seen[key]}")
    return out


def label_word(word: str) -> str:
    """``word`` in a ``\\label`` key: its ASCII letters and digits, lower case, runs of anything else
    one ``-``; a word with other letters (non-ASCII: 精度, 召回) gets 8 hex digits of its SHA-256
    besides, as its ASCII part alone would be empty, or the same for other words.

    >>> label_word("mrr_10"), label_word("精度"), label_word("召回"), label_word("P精度")
    ('mrr-10', '408ce7a7', '3e493076', 'p-aa128321')
    """
    slug = re.sub(r"[^A-Za-z0-9]+", "-", word).strip("-").lower()
    if word.isascii() and slug:
        return slug
    import hashlib

    digest = hashlib.sha256(word.encode()).hexdigest()[:8]
    return f"{slug}-{digest}" if slug else digest


def latex_row_label(label: str) -> str:
    """A row's name as the first cell of a LaTeX table row, after the previous row's ``\\\\``: one
    starting with ``[`` or ``*`` (spaces before them skipped) would be read as ``\\\\``'s optional
    ``[length]`` or its star form, and lose its first character, so it is put after ``{}``."""
    escaped = latex_escape(label)
    return "{}" + escaped if escaped.lstrip().startswith(("[", "*")) else escaped


def _tally_text(c: Cell) -> str:
    """Per-seed counts after the value: " \u20202/3" (better in 2 of 3 seeds), both counts spaced."""
    return "".join(f" {t.text}" for t in c.tally)


@RENDERERS.register("md")
def markdown(table: Table) -> str:
    esc = md_escape

    def cell(c: Cell) -> str:
        value = _number(c.value, table.decimals)
        if value is None:
            return _interval(c, table.decimals) or DASH
        out = f"**{value}**" if c.bold else value
        if c.sd is not None:
            out += f" \u00b1 {_number(c.sd, table.decimals)}"
        return out + (c.marker or "") + _tally_text(c)

    lines = [f"**{esc(table.title)}**", "",
             "| " + " | ".join(esc(h) for h in (table.corner, *table.columns)) + " |",
             "|:--" + "|--:" * len(table.columns) + "|"]
    lines += ["| " + " | ".join([esc(r.label), *(cell(c) for c in r.cells)]) + " |" for r in table.rows]
    lines += ["", footnote(table.notes, md_escape_text, md_escape_text), ""]
    return "\n".join(lines)


def _code_points(ranges: str) -> frozenset[str]:
    """The characters of ``ranges``, "00A0-0125 0192 ..." (hex U+ numbers)."""
    out: set[str] = set()
    for item in ranges.split():
        low, _, high = item.partition("-")
        out.update(map(chr, range(int(low, 16), int(high or low, 16) + 1)))
    return frozenset(out)


# What pdflatex sets from UTF-8 input with \usepackage[T1]{fontenc} and its default fonts (EC, TC)
# beyond printable ASCII: found by typesetting each character U+00A0 to U+FFFF alone (TeX Live 2022;
# tests/present/test_render_pdflatex.py compiles a sample). Any other stops it, "Unicode character
# ... not set up for use with LaTeX": Greek, Cyrillic, CJK, but also Latin letters such as Ħ, ĸ, ŉ
# and ſ, while €, —, “ and ” are set (the kernel's textcomp).
_PDFLATEX_SETS = _code_points(
    "00A0-0125 0128-0137 0139-013E 0141-0148 014A-0165 0168-017E 0192 01C4-01D4 01E2-01E3 01E6-01EB 01F0 "
    "01F4-01F5 0218-021B 0232-0233 0237 02C6-02C7 02D8-02D9 02DB-02DD 0E3F 1E02-1E03 1E0D 1E1E-1E21 1E25 "
    "1E30-1E31 1E37 1E43 1E45 1E47 1E5B 1E63 1E6D 1E8E-1E91 1E9E 1EF2-1EF3 200C 2010-2016 2018-201A "
    "201C-201E 2020-2022 2026 2030-2031 2039-203B 203D 2044 204E 2052 20A1 20A4 20A6 20A9 20AB-20AC 20B1 "
    "2103 2116-2117 211E 2120 2122 2126-2127 212E 2190-2193 2329-232A 2422-2423 25E6 25EF 266A 27E8-27E9 "
    "3008-3009 FB00-FB06 FEFF")
# Of those, the ones only T1 fonts have: without \usepackage[T1]{fontenc} (OT1) each stops pdflatex.
_T1_ONLY = frozenset("\u00ab\u00bb\u00d0\u00de\u00f0\u00fe\u0104\u0105\u0110\u0111\u0118\u0119\u012e\u012f"
                     "\u014a\u014b\u0172\u0173\u01ea\u01eb\u02db\u201a\u201e\u2039\u203a")
LATEX_NEEDS = r"\usepackage{booktabs} (and \usepackage[T1]{fontenc} for < and >)"


def _pdflatex_sets(ch: str) -> bool:
    return " " <= ch <= "~" or ch == "\t" or ch in _PDFLATEX_SETS


def _shown(chars: Sequence[str]) -> str:
    """Characters for the comment line: the first 8, one that prints nothing as its U+ number."""
    said = "".join(ch if ch.isprintable() and not ch.isspace() else f" U+{ord(ch):04X} " for ch in chars[:8])
    return said.strip() + ("..." if len(chars) > 8 else "")


def latex_needs(lines: Sequence[str]) -> str:
    """What the table's LaTeX ``lines`` need, for its first comment line: the packages (T1 fonts
    also for the letters only they have, ð, þ, «), and an engine beyond pdflatex where the typeset
    lines (not the ``%`` comments) hold characters pdflatex cannot set (a configuration named 精度).

    >>> latex_needs(["a & b"]) == LATEX_NEEDS
    True
    >>> latex_needs(["ð & €"]).endswith("fontenc} for <, > and ð)")  # €: T1 or not
    True
    >>> latex_needs(["Ħ"]).endswith("holds Ħ, which pdflatex cannot set: compile with lualatex or xelatex "
    ...                           "and a font that has them")
    True
    """
    typeset = {ch for line in lines if not line.startswith("%") for ch in line}
    t1 = sorted(typeset & _T1_ONLY)
    needs = LATEX_NEEDS if not t1 else LATEX_NEEDS.replace("for < and >", f"for <, > and {_shown(t1)}")
    beyond = sorted(ch for ch in typeset if not _pdflatex_sets(ch))
    if not beyond:
        return needs
    return (f"{needs}; its text holds {_shown(beyond)}, which pdflatex cannot set: compile with lualatex or "
            "xelatex and a font that has them")


def latex_escape(s: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in s)


# The sentence that marks a table of a study that did not finish (harness.results.mlflow_reader
# incomplete_note, the first of its remarks): the float shows it, not only the note's comments.
_INCOMPLETE = "INCOMPLETE study:"
_CODE = re.compile(r"`([^`]+)`")


def latex_text(s: str) -> str:
    """Sentences as LaTeX text: escaped, a `command` in typewriter type, and "--" as two hyphens
    (``harness run STUDY --resume``; as written, TeX makes ` an opening quote and -- a dash).

    >>> latex_text("(`harness run STUDY --resume` finishes it; or --resume_1)")
    '(\\\\texttt{harness run STUDY -{}-resume} finishes it; or -{}-resume\\\\_1)'
    """
    parts = _CODE.split(s)  # text, code, text, ...
    return "".join((rf"\texttt{{{latex_escape(part)}}}" if i % 2 else latex_escape(part)).replace("--", "-{}-")
                   for i, part in enumerate(parts))


def latex_mark(symbol: str) -> str:
    if symbol in LATEX_SYMBOLS:
        return f"$^{{{LATEX_SYMBOLS[symbol]}}}$"
    if all(ch in LATEX_SYMBOLS for ch in symbol):  # the query-only "\u2193*": one superscript
        return "$^{" + "".join(LATEX_SYMBOLS[ch] for ch in symbol) + "}$"
    return latex_escape(symbol)


def latex_tally(t: Tally) -> str:
    """A per-seed tally ("\u20202/3") as a LaTeX superscript."""
    symbol = LATEX_SYMBOLS.get(t.symbol)
    return f"$^{{{symbol}\\,{t.count}/{t.total}}}$" if symbol else latex_escape(f" {t.text}")


def latex_plain_mark(symbol: str) -> str:
    """A marker on the line (the legend), not as a superscript."""
    if symbol and all(ch in LATEX_SYMBOLS for ch in symbol):
        return "$" + "".join(LATEX_SYMBOLS[ch] for ch in symbol) + "$"
    return latex_escape(symbol)


@RENDERERS.register("latex")
def latex(table: Table, label: str | None = None) -> str:
    """The table's float; ``label`` its ``\\label`` key where the document gave it one of its own
    (``render``: unique_labels), else ``latex_label``'s."""
    def cell(c: Cell) -> str:
        value = _number(c.value, table.decimals)
        if value is None:
            return _interval(c, table.decimals) or "--"
        out = rf"\textbf{{{value}}}" if c.bold else value
        if c.sd is not None:
            out += rf" $\pm$ {_number(c.sd, table.decimals)}"
        out += latex_mark(c.marker) if c.marker else ""
        return out + "".join(latex_tally(tally) for tally in c.tally)

    plain_mark = latex_plain_mark

    lines = [f"% harness significance table: {latex_escape(table.title)} ({table.form} form); needs ",
             r"\begin{table}[tbp]", r"\centering",
             rf"\caption{{{latex_escape(caption(table))}}}", rf"\label{{{label or latex_label(table)}}}",
             rf"\begin{{tabular}}{{l{'r' * len(table.columns)}}}", r"\toprule",
             " & ".join(latex_escape(h) for h in (table.corner, *table.columns)) + r" \\", r"\midrule"]
    for row in table.rows:
        if row.rule_before:
            lines.append(r"\midrule")
        lines.append(" & ".join([latex_row_label(row.label), *(cell(c) for c in row.cells)]) + r" \\")
    # A paper's float carries the one-line legend, and an unfinished study's mark under it; the full
    # note stays in the source as comments (and in the CSV's note column), where \input does not print it.
    note = footnote(table.notes, str, str)
    lines += [r"\bottomrule", r"\end{tabular}", r"\par\smallskip",
              rf"{{\footnotesize {legend(table.notes, latex_escape, plain_mark)}\par}}",
              *(rf"{{\footnotesize\textbf{{{_INCOMPLETE}}}{latex_text(r[len(_INCOMPLETE):])}\par}}"
                for r in table.notes.remarks if r.startswith(_INCOMPLETE)), r"\end{table}",
              "% Note:", *(f"% {ln}" for ln in textwrap.wrap(note, 96, break_long_words=False,
                                                            break_on_hyphens=False)), ""]
    lines[0] += latex_needs(lines[1:])
    return "\n".join(lines)


_CSV_HEADER = ("table", "row", "column", "value", "sd", "bold", "marker", "direction", "mean_diff",
               "ci_low", "ci_high", "d_z", "p_value", "p_adjusted", "comparisons", "test", "correction",
               "metric", "measure", "note")


def _csv_rows(table: Table) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    note = footnote(table.notes, str, str)  # the full note, once per table: on its first line
    for i, row in enumerate(table.rows):
        for j, (column, c) in enumerate(zip(table.columns, row.cells, strict=True)):
            metric = (table.metrics[0] if len(table.metrics) == 1 else
                      table.metrics[j] if len(table.metrics) == len(table.columns) else "")
            comp = c.comparison
            tested = ([comp.direction, *(repr(float(v)) for v in (
                comp.result.mean_diff, *comp.interval, comp.result.d_z,
                comp.result.p_value, comp.p_adjusted)), comp.family_size] if comp else [""] * 8)
            # Names come from the user (configuration names, titles, a CSV's metrics): never a
            # spreadsheet formula, in any column (numbers stay as they are).
            writer.writerow([csv_cell(v) for v in (
                table.title, row.label, column, "" if c.value is None else repr(c.value),
                "" if c.sd is None else repr(c.sd), int(c.bold),
                (c.marker or "") + " ".join(t.text for t in c.tally), *tested,
                table.notes.test, table.notes.correction_name, metric, canonical_name(metric),
                note if i == 0 and j == 0 else "")])
    return buf.getvalue()


@RENDERERS.register("csv")
def csv_text(table: Table) -> str:
    return ",".join(_CSV_HEADER) + "\n" + _csv_rows(table)


@RENDERERS.register("html")
def html_table(table: Table) -> str:
    def cell(c: Cell) -> str:
        value = _number(c.value, table.decimals)
        if value is None:
            return _interval(c, table.decimals) or "&ndash;"
        out = f"<strong>{value}</strong>" if c.bold else value
        if c.sd is not None:
            out += f" &plusmn; {_number(c.sd, table.decimals)}"
        out += f"<sup>{html.escape(c.marker)}</sup>" if c.marker else ""
        return out + "".join(f" <sup>{html.escape(t.text)}</sup>" for t in c.tally)

    width = len(table.columns) + 1
    head = "".join(f"<th>{html.escape(h)}</th>" for h in (table.corner, *table.columns))
    lines = ['<table class="harness-table">', f"<caption>{html.escape(table.title)}</caption>",
             f"<thead><tr>{head}</tr></thead>", "<tbody>"]
    for row in table.rows:
        style = ' style="border-top: 1px solid"' if row.rule_before else ""
        cells = "".join(f'<td align="right">{cell(c)}</td>' for c in row.cells)
        lines.append(f"<tr{style}><th>{html.escape(row.label)}</th>{cells}</tr>")
    note = footnote(table.notes, html.escape, html.escape)
    lines += ["</tbody>", f'<tfoot><tr><td colspan="{width}">{note}</td></tr></tfoot>', "</table>", ""]
    return "\n".join(lines)
