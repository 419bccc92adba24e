"""The significance table as an object: its data (one row per configuration and metric, as records
or a pandas DataFrame) and its renderings (Markdown, LaTeX, HTML, CSV). ``harness table``, the
study's end-of-run report and ``StudyAnalysis.table()`` all render through it, so what Python holds is
what the commands print.

The data come from the executed ``Analysis`` (the numbers the tests produced, unrounded); the
renderings from the table model (``table.build_tables``) through one renderer per format
(``render``). Nothing is read back from rendered text.

Rows (``COLUMNS``), metric by metric, configuration by configuration in the study's order (the
baseline first):

- one row per configuration and metric over all its seeds (``seed`` missing): ``mean`` and ``sd``
  (sample SD, missing for one seed) over ``n_seeds`` seeds; for a candidate ``delta`` (the mean
  difference to the baseline), the interval ``ci_low``/``ci_high`` (the simultaneous one under
  maxt), ``d_z``, ``p_value``, ``p_adjusted`` (after the correction over a family of
  ``comparisons``), ``direction`` and ``marker`` (missing where not significant). Under the per-seed
  test the row carries ``delta`` and, as ``marker``, the count of significant seeds ("\u20202/3");
- after it, in the seeds form or under the per-seed test, one row per seed: that seed's value as
  ``mean`` and, under the per-seed test, that seed's own test.

``metric`` is the harness key, ``measure`` ir-measures' canonical name; ``test`` and ``correction``
repeat on every row, so frames of several analyses concatenate. The renderers never read these
rows, so a further dimension (a study's collections) is a further column, not a new renderer.

>>> from harness.results.stored import RunRecord, StudyResults
>>> from harness.stats.significance import analyse
>>> runs = [RunRecord(config=c, seed=str(s), values={"map": v + s / 100 + (c == "bert") * s * s / 1000})
...         for c, v in (("bm25", 0.30), ("bert", 0.36)) for s in (1, 2, 3)]
>>> table = SignificanceTable.build(analyse(StudyResults.build(runs)), "configs")
>>> table
SignificanceTable(form='configs', test='across-seeds', correction='holm', baseline='bm25', configs=2, metrics=('map',))
>>> row = table.rows()[1]
>>> row["config"], round(row["delta"], 4), row["marker"]
('bert', 0.0647, '\u2021')
>>> table.to_markdown() == render_text(table.tables, "md") == str(table)
True
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.errors import UnknownName
from harness.metrics.measures import canonical_name
from harness.present.frames import FLOAT, INT, NULLABLE_INT, TEXT, typed_frame
from harness.present.render import RENDERERS
from harness.present.render import render as render_text
from harness.present.table import AUTO_FORM, Table, build_tables, resolve_form
from harness.results.stored import seed_summary
from harness.stats.significance import Analysis, Comparison

if TYPE_CHECKING:
    import pandas as pd
else:  # a name the annotations resolve to at run time (typing.get_type_hints), pandas imported then
    from harness.present.frames import lazy_pandas as pd

# The rows' columns, in order, and the frame's type of each (harness.present.frames), whatever the rows hold
SCHEMA = {"metric": TEXT, "measure": TEXT, "config": TEXT, "seed": TEXT, "role": TEXT, "n_seeds": INT,
          "mean": FLOAT, "sd": FLOAT, "delta": FLOAT, "ci_low": FLOAT, "ci_high": FLOAT, "d_z": FLOAT,
          "p_value": FLOAT, "p_adjusted": FLOAT, "comparisons": NULLABLE_INT, "direction": TEXT,
          "marker": TEXT, "test": TEXT, "correction": TEXT}
COLUMNS = tuple(SCHEMA)

Row = dict[str, Any]


class Renderings:
    """The named renderings of a table object that has ``render(format)``: ``to_markdown()``,
    ``to_latex()``, ``to_html()``, ``to_csv()``; ``str()`` is the Markdown and a notebook shows the
    HTML. Shared by the one-collection and the collections table."""

    def render(self, format: str = "md") -> str:
        raise NotImplementedError

    def to_markdown(self) -> str:
        return self.render("md")

    def to_latex(self) -> str:
        return self.render("latex")

    def to_html(self) -> str:
        return self.render("html")

    def to_csv(self) -> str:
        return self.render("csv")

    def __str__(self) -> str:
        return self.to_markdown()

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def _repr_html_(self) -> str:
        return self.to_html()


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class SignificanceTable(Renderings):
    """The tables of one form of an executed ``analysis`` (``tables``: one per metric in the seeds
    and summary forms, one in all in the configs form): ``rows()``/``to_frame()`` are their data,
    ``to_markdown()``, ``to_latex()``, ``to_html()`` and ``to_csv()`` their text (``render(format)``
    by the format's name: md, latex, html, csv). ``str()`` is the Markdown; a notebook shows the
    HTML. Made by ``StudyAnalysis.table()`` or ``build``."""

    analysis: Analysis
    form: str  # seeds, configs or summary (``auto`` resolved)
    tables: tuple[Table, ...]

    @classmethod
    def build(cls, analysis: Analysis, form: str = AUTO_FORM, decimals: int = 4,
              names: str = "label") -> SignificanceTable:
        """The tables of ``form`` (``auto``: by the number of configurations, table.resolve_form)
        with ``decimals`` and the metrics named in the ``names`` style."""
        return cls(analysis=analysis, form=resolve_form(form, len(analysis.results.configs)),
                   tables=tuple(build_tables(analysis, form, decimals, names)))

    # -- data -------------------------------------------------------------------------------------

    def rows(self) -> list[Row]:
        """The table's data, one dict per row (module docstring); missing values are None."""
        analysis, res = self.analysis, self.analysis.results
        per_seed = analysis.test == "per-seed"
        out: list[Row] = []
        for metric in analysis.metrics:
            for config in res.configs:
                candidate = config != res.baseline
                values = res.seed_values(config, metric)
                mean, sd = seed_summary(values)
                row = self._row(metric, config, None, mean, sd, len(values))
                if candidate and per_seed:
                    paired = res.seed_values(res.baseline, metric, res.seeds_of(config))
                    row["delta"] = _number(mean - float(paired.mean()))
                    row["marker"] = " ".join(t.text for t in analysis.tallies(config, metric)) or None
                elif candidate:
                    row.update(_tested(analysis, analysis.get(config, metric)))
                out.append(row)
                if self.form != "seeds" and not per_seed:
                    continue
                for seed in res.seeds_of(config):
                    seed_row = self._row(metric, config, seed, res.value(config, seed, metric), math.nan, 1)
                    if candidate and per_seed:
                        seed_row.update(_tested(analysis, analysis.get(config, metric, seed)))
                    out.append(seed_row)
        return out

    def _row(self, metric: str, config: str, seed: str | None, mean: float, sd: float, n: int) -> Row:
        row: Row = dict.fromkeys(COLUMNS)
        row.update(metric=metric, measure=canonical_name(metric), config=config, seed=seed,
                   role="baseline" if config == self.analysis.results.baseline else "candidate",
                   n_seeds=n, mean=_number(mean), sd=_number(sd),
                   test=self.analysis.test, correction=self.analysis.options.correction)
        return row

    def to_frame(self) -> pd.DataFrame:
        """``rows()`` as a pandas DataFrame with the columns ``COLUMNS`` of the types ``SCHEMA``
        (missing: ``isna()``), the same for every study (harness.present.frames)."""
        return typed_frame(self.rows(), SCHEMA)

    @property
    def frame(self) -> pd.DataFrame:
        """``to_frame()``: a new DataFrame on each read."""
        return self.to_frame()

    @property
    def incomplete(self) -> str:
        """The INCOMPLETE sentence of a study that did not finish (harness.results.mlflow_reader.
        incomplete_note; empty when it finished): the rendered tables' note says it, and a table
        taken as data must too, or its rows pass for a finished study's."""
        return self.analysis.results.incomplete

    @property
    def dropped(self) -> tuple[str, ...]:
        """The queries left out of every test because some runs lack them (the footnote counts them)."""
        return tuple(self.analysis.results.dropped)

    def to_dict(self) -> dict[str, Any]:
        """The table's data as plain values (JSON-ready): the form, test, correction, confidence
        level, baseline, configurations and metrics, ``incomplete`` (the sentence of an unfinished
        study, None when it finished, as a power report's JSON), ``dropped_queries`` and ``rows``."""
        res = self.analysis.results
        return {"form": self.form, "test": self.analysis.test,
                "correction": self.analysis.options.correction,
                "confidence": self.analysis.options.confidence, "baseline": res.baseline,
                "configs": list(res.configs), "metrics": list(self.analysis.metrics),
                "incomplete": self.incomplete or None, "dropped_queries": list(self.dropped),
                "rows": self.rows()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    # -- renderings -------------------------------------------------------------------------------

    def render(self, format: str = "md") -> str:
        """The tables as ``format`` (md, latex, csv, html: the renderers of harness.present.render),
        as `harness table --format` prints them. An unknown format is refused naming the argument
        (``format``), not the study file's key the renderers' registry is named after."""
        if format not in RENDERERS:
            raise UnknownName("format", format, RENDERERS.names())
        return render_text(self.tables, format)

    def __repr__(self) -> str:
        a = self.analysis
        return (f"SignificanceTable(form={self.form!r}, test={a.test!r}, correction={a.options.correction!r}, "
                f"baseline={a.results.baseline!r}, configs={len(a.results.configs)}, metrics={a.metrics!r}"
                f"{', incomplete=True' if self.incomplete else ''})")


def _tested(analysis: Analysis, comp: Comparison | None) -> Row:
    """A comparison's columns; none where no test was made."""
    if comp is None:
        return {}
    low, high = comp.interval
    return {"delta": _number(comp.result.mean_diff), "ci_low": _number(low), "ci_high": _number(high),
            "d_z": _number(comp.result.d_z), "p_value": _number(comp.result.p_value),
            "p_adjusted": _number(comp.p_adjusted), "comparisons": comp.family_size,
            "direction": comp.direction, "marker": analysis.marker(comp)}


def _number(value: float) -> float | None:
    """A float, or None where undefined (NaN), so that ``to_dict`` is JSON and a frame's cell isna."""
    value = float(value)
    return None if math.isnan(value) else value
