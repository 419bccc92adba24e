"""The table of a study over several collections as an object: its data (one row per collection,
configuration and metric, and one per configuration and metric for the combined verdict, as
records or a pandas DataFrame) and its renderings (Markdown, LaTeX, HTML, CSV: the collections
renderers of ``collections_render``). ``harness table`` and ``CollectionsStudy.table()`` both
render through it, so what Python holds is what the command prints.

The rows are the one-collection table's (``significance_table.COLUMNS``) with a ``collection``
column first: each collection's rows come from its own executed analysis, whose adjusted p-values,
family sizes and markers are already the whole table's family's (harness.stats.across). After the
collections, one row per candidate and metric with ``collection`` = ``combined``: the combined
difference across the collections (``delta``, its interval, ``p_value``, ``p_adjusted`` in the
same family, ``comparisons``, ``direction``, ``marker``); ``n_seeds``, ``mean`` and ``sd`` are
missing there, as no run holds a combined value.

>>> from harness.results.stored import RunRecord, StudyResults
>>> from harness.stats.across import analyse_collections
>>> def results(shift):
...     return StudyResults.build([RunRecord(config=c, seed=str(s), values={"map": v + shift * (c == "bert") + s / 100})
...                                for c, v in (("bm25", 0.30), ("bert", 0.33)) for s in (1, 2, 3)])
>>> table = CollectionsSignificanceTable.build(analyse_collections({"A": results(0.0), "B": results(0.02)}))
>>> table
CollectionsSignificanceTable(form='configs', collections=('A', 'B'), test='across-seeds', correction='holm', baseline='bm25', configs=2, metrics=('map',))
>>> [(r["collection"], r["config"]) for r in table.rows()]
[('A', 'bm25'), ('A', 'bert'), ('B', 'bm25'), ('B', 'bert'), ('combined', 'bert')]
>>> table.to_markdown() == str(table) == table.render("md")
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.errors import UnknownName
from harness.metrics.measures import canonical_name
from harness.present.collections_render import COLLECTION_RENDERERS, render_collections
from harness.present.collections_table import CollectionsTable, build_collection_tables
from harness.present.frames import NULLABLE_INT, TEXT, typed_frame
from harness.present.significance_table import SCHEMA as ONE_COLLECTION_SCHEMA
from harness.present.significance_table import Renderings, SignificanceTable, _number
from harness.present.table import AUTO_FORM
from harness.stats.across import COMBINED, CollectionsAnalysis

if TYPE_CHECKING:
    import pandas as pd
else:  # a name the annotations resolve to at run time (typing.get_type_hints), pandas imported then
    from harness.present.frames import lazy_pandas as pd

__all__ = ["COLUMNS", "SCHEMA", "CollectionsSignificanceTable"]

# The one-collection table's columns and types after ``collection``; ``n_seeds`` is nullable here,
# as a combined verdict's row is over no run's seeds
SCHEMA = {"collection": TEXT, **ONE_COLLECTION_SCHEMA, "n_seeds": NULLABLE_INT}
COLUMNS = tuple(SCHEMA)

Row = dict[str, Any]


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class CollectionsSignificanceTable(Renderings):
    """The tables of one form of an executed ``CollectionsAnalysis`` (``tables``: one in the configs
    and summary forms, one per metric in the seeds form): ``rows()``/``to_frame()``/``frame`` are
    their data, ``to_markdown()``, ``to_latex()``, ``to_html()`` and ``to_csv()`` their text
    (``render(format)`` by name). ``str()`` is the Markdown; a notebook shows the HTML. Made by
    ``CollectionsStudy.table()`` or ``build``."""

    analysis: CollectionsAnalysis
    form: str  # configs, summary or seeds (``auto`` resolved)
    tables: tuple[CollectionsTable, ...]

    @classmethod
    def build(cls, analysis: CollectionsAnalysis, form: str = AUTO_FORM, decimals: int = 4,
              names: str = "label") -> CollectionsSignificanceTable:
        tables = tuple(build_collection_tables(analysis, form, decimals, names))
        return cls(analysis=analysis, form=tables[0].form, tables=tables)

    # -- data -------------------------------------------------------------------------------------

    def rows(self) -> list[Row]:
        """The table's data, one dict per row (module docstring); missing values are None."""
        out: list[Row] = []
        for name, analysis in self.analysis.analyses.items():
            one = SignificanceTable.build(analysis, "configs")
            out += [{"collection": name, **row} for row in one.rows()]
        options = self.analysis.options
        for comb in self.analysis.combined:
            r = comb.result
            row: Row = dict.fromkeys(COLUMNS)
            row.update(collection=COMBINED, metric=comb.metric, measure=canonical_name(comb.metric),
                       config=comb.config, role="candidate", delta=_number(r.estimate),
                       ci_low=_number(comb.interval[0]), ci_high=_number(comb.interval[1]), p_value=_number(r.p_value),
                       p_adjusted=_number(comb.p_adjusted), comparisons=comb.family_size,
                       direction=comb.direction, marker=self.analysis.marker(comb), test=self.analysis.test,
                       correction=options.correction)
            out.append(row)
        return out

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
        """The INCOMPLETE sentence of a study that did not finish (``SignificanceTable.incomplete``;
        the collections of one study share it), empty when it finished."""
        return next((a.results.incomplete for a in self.analysis.analyses.values() if a.results.incomplete), "")

    @property
    def dropped(self) -> dict[str, tuple[str, ...]]:
        """Per collection, the queries left out of its tests because some of its runs lack them."""
        return {name: tuple(a.results.dropped) for name, a in self.analysis.analyses.items()}

    def to_dict(self) -> dict[str, Any]:
        """The table's data as plain values (JSON-ready), as ``SignificanceTable.to_dict`` with the
        ``collections`` and ``dropped_queries`` per collection."""
        a = self.analysis
        return {"form": self.form, "test": a.test, "correction": a.options.correction,
                "confidence": a.options.confidence, "family": a.family, "baseline": a.baseline,
                "collections": list(a.collections), "configs": list(a.configs), "metrics": list(a.metrics),
                "incomplete": self.incomplete or None,
                "dropped_queries": {name: list(qids) for name, qids in self.dropped.items()},
                "rows": self.rows()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    # -- renderings -------------------------------------------------------------------------------

    def render(self, format: str = "md") -> str:
        """The tables as ``format`` (md, latex, csv, html), as `harness table --format` prints them;
        an unknown format is refused naming the argument (``format``)."""
        if format not in COLLECTION_RENDERERS:
            raise UnknownName("format", format, COLLECTION_RENDERERS.names())
        return render_collections(self.tables, format)

    def __repr__(self) -> str:
        a = self.analysis
        return (f"CollectionsSignificanceTable(form={self.form!r}, collections={a.collections!r}, "
                f"test={a.test!r}, correction={a.options.correction!r}, baseline={a.baseline!r}, "
                f"configs={len(a.configs)}, metrics={a.metrics!r}{', incomplete=True' if self.incomplete else ''})")
