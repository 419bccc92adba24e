"""The results-exchange format (docs/exchange.md, "Long results CSV"): a long CSV with columns config, seed, metric, value and
optional query and collection columns.

A metric is a harness key (map, mrr_10 ...) or ir-measures' canonical name (AP, RR@10 ...; the two
name one metric, metrics.METRIC_TABLE). A row without a query (or with an empty query cell) is a
per-run value; a row with one is a per-query value. Either or both may be given for a run; per-run values alone support the across-seeds test only.
The baseline is ``baseline`` when given, else the first configuration in the file. A name cell
guarded against spreadsheet formulas by the harness's CSV writers (``'=x``: textfile.csv_cell) is
read without its guard (textfile.csv_text), so an exported name reads back as itself.

    config,seed,metric,value
    random,1,map,0.7142
    #turns,1,map,0.7220

A ``collection`` column splits the rows into collections (a study over several collections,
docs/concepts.md): each collection's rows are validated as a table of their own, and
``read_long_collections`` returns them as an ordered mapping collection -> StudyResults, in the
order the collections first appear. Without the column (or with every cell of it empty) the file is
one collection, named ``""``; a file mixing empty and named collection cells is refused.

``read_long_frame`` reads the same table from a pandas DataFrame through the same validation, and
``long_rows`` writes a ``StudyResults`` back in this format (``collection_rows``: several).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import DataError, shown
from harness.metrics.measures import METRIC_KEYS, metric_key
from harness.results.stored import COMBINED, SEED_ROW_NAMES, RunRecord, StudyResults
from harness.textfile import csv_text, read_utf8, unprintable

REQUIRED = ("config", "seed", "metric", "value")
# A decimal number as a CSV carries one: no "0_5" (Python's digit separator), "inf", "nan" or hex.
# ASCII digits only: \d would take full-width and other scripts' digits, which float() reads too.
NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# The harness's metrics (MAP, MRR, nDCG, P@1, R-Prec) are fractions; any other measure is bounded so
# that its sums and squares (means, variances) stay finite.
UNIT_RANGE = frozenset(METRIC_KEYS)
MAX_MAGNITUDE = 1e12
# A seed in digits is a number (the tables order seeds by it): one longer is no seed a generator
# takes, and past 4300 digits Python reads it as no number at all.
MAX_SEED_DIGITS = 100


def strict_value(text: str, metric: str, where: str) -> float:
    """The value cell ``text`` of ``metric`` as a number, refused in one line (naming ``where``)
    unless it is a plain decimal number in the metric's range: [0, 1] for the harness's metrics,
    within +-MAX_MAGNITUDE for others.

    >>> strict_value("0.25", "map", "f.csv:2")
    0.25
    >>> strict_value("0_5", "map", "f.csv:3")
    Traceback (most recent call last):
    ...
    harness.errors.DataError: f.csv:3: value '0_5' is not a decimal number
    """
    if not NUMBER.fullmatch(text):
        if text.strip().lstrip("+-").lower() in ("inf", "infinity", "nan"):
            raise DataError(f"{where}: value {text} is not finite")
        if not any(ch.isdigit() for ch in text):
            raise DataError(f"{where}: value {text!r} is not a number")
        raise DataError(f"{where}: value {text!r} is not a decimal number")  # 0_5, hex, ...
    value = float(text)
    if metric in UNIT_RANGE and not 0.0 <= value <= 1.0:
        raise DataError(f"{where}: value {text} of {metric} is outside its range [0, 1]")
    if not abs(value) <= MAX_MAGNITUDE:
        raise DataError(f"{where}: value {text} of {metric} is beyond +-{MAX_MAGNITUDE:.0e} (its means and "
                        "variances would overflow); rescale it")
    return value
COLUMNS = (*REQUIRED, "query")
COLLECTION = "collection"
COLLECTION_COLUMNS = (*COLUMNS, COLLECTION)
ONE = ""  # the collection of a file without a collection column


def _located(reader: csv.DictReader, path: Path) -> Iterable[tuple[str, Mapping[str, Any]]]:
    """Each record with ``FILE:LINE`` of the line it starts on; a quoted field that runs past its
    line's end (an unmatched quote swallows the lines after it; a quoted line break, \\n or \\r,
    which would break a Markdown table's row) is refused there, as is a record with more fields
    than the header (csv.DictReader would keep the extra ones under the key None, unread)."""
    end = reader.line_num
    for row in reader:
        start, end = end + 1, reader.line_num
        if any(isinstance(v, str) and ("\n" in v or "\r" in v) for v in row.values()):
            raise DataError(f"{path}:{start}: a quoted field runs past the end of its line (an unmatched "
                            "'\"'?); a long results CSV has one record per line")
        if None in row:
            columns = len(reader.fieldnames or ())
            raise DataError(f"{path}:{start}: {columns + len(row[None])} fields, but the header (line 1) has {columns} "
                            f"columns; a value with a decimal comma (0,5) or a name with a comma must be "
                            f"quoted, or written 0.5")
        yield f"{path}:{start}", row


def read_long_csv(path: str | Path, *, baseline: str | None = None) -> StudyResults:
    """Read and validate a long results CSV of one collection (module docstring); a file with
    several collections is refused, naming them (``read_long_collections`` reads it)."""
    return _one(read_long_collections(path, baseline=baseline), str(path))


def _one(collections: Mapping[str, StudyResults], source: str) -> StudyResults:
    if len(collections) > 1:
        raise DataError(f"{source} has {len(collections)} collections ({', '.join(collections)}); "
                        "read it per collection (harness table --from reads them all)")
    return next(iter(collections.values()))


def read_long_collections(path: str | Path, *, baseline: str | None = None) -> dict[str, StudyResults]:
    """Read and validate a long results CSV, collection by collection (module docstring)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise DataError(f"{path}: no such file")
    # a byte-order mark (spreadsheet programs write one) is not part of the first column's name
    text = read_utf8(path, "results CSV")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = [h.strip() for h in reader.fieldnames or []]
    except csv.Error as exc:
        raise DataError(f"{path}:1: malformed CSV: {exc}") from None
    reader.fieldnames = header
    rows = _located(reader, path)
    try:
        return _read_rows(header, rows, source=str(path), kind="CSV", baseline=baseline)
    except csv.Error as exc:
        raise DataError(f"{path}:{reader.line_num}: malformed CSV: {exc}") from None


def read_long_frame(frame: Any, *, baseline: str | None = None, source: str = "DataFrame") -> StudyResults:
    """Read and validate a long results table held in a pandas DataFrame: the CSV's columns and
    rules (module docstring), each cell read as the CSV reader reads its text, a missing cell (None,
    NaN) as an empty one. Errors name the row by its index label.

    >>> import pandas as pd
    >>> frame = pd.DataFrame({"config": ["a", "b", "a", "b"], "seed": [1, 1, 2, 2],
    ...                       "metric": "AP", "value": [0.50, 0.55, 0.52, 0.58]})
    >>> results = read_long_frame(frame)
    >>> results.baseline, results.seeds, results.metrics
    ('a', ('1', '2'), ('map',))
    >>> read_long_frame(frame.drop(columns="seed"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    harness.errors.DataError: DataFrame: missing column(s) seed; a long results DataFrame has columns ...
    """
    return _one(read_frame_collections(frame, baseline=baseline, source=source), source)


def read_frame_collections(frame: Any, *, baseline: str | None = None, source: str = "DataFrame"
                           ) -> dict[str, StudyResults]:
    """``read_long_frame`` collection by collection: a DataFrame with an optional ``collection``
    column, as ``read_long_collections`` reads a CSV."""
    import pandas as pd

    header = [str(c).strip() for c in frame.columns]

    def text(value: Any, where: str, column: str) -> str:
        if value is None or (pd.api.types.is_scalar(value) and pd.isna(value)):
            return ""
        if column == "seed" and pd.api.types.is_float(value):
            # a seed column pandas made float (a missing cell, a float cast): 1.0 is seed 1, as a
            # CSV's "1", so the runs pair; a fraction is no seed
            if not float(value).is_integer():
                raise DataError(f"{where}: seed {value!r} is not a whole number; seeds are integers or labels")
            return str(int(value))
        if isinstance(value, int) and value.bit_length() > 4 * MAX_SEED_DIGITS:
            # no seed or value this long; and past 4300 digits str() raises (Python's limit)
            raise DataError(f"{where}: {column} is an integer of {value.bit_length()} bits; no seed or value "
                            "is that long")
        return str(value)

    rows = ((f"{source} row {label}", {c: text(v, f"{source} row {label}", c)
                                       for c, v in zip(header, values, strict=True)})
            for label, values in zip(frame.index, frame.itertuples(index=False, name=None), strict=True))
    return _read_rows(header, rows, source=source, kind="DataFrame", baseline=baseline)


def collection_rows(collections: Mapping[str, StudyResults]) -> list[dict[str, Any]]:
    """``long_rows`` of every collection, each row with its ``collection``; one collection named
    ``""`` (ONE) gives rows whose collection is None (a file without the column reads back alike)."""
    return [{**row, COLLECTION: None if name == ONE else name}
            for name, results in collections.items() for row in long_rows(results)]


def long_rows(results: StudyResults) -> list[dict[str, Any]]:
    """``results`` in the long format (COLUMNS), for ``read_long_csv`` or ``read_long_frame`` to
    read back as the same results: for every configuration, seed and metric its per-run value
    (``StudyResults.value``: the mean of its per-query values where it has them, else the stored one) with query
    None, then its per-query values where kept, in query order.

    >>> from harness.results.stored import RunRecord
    >>> rec = RunRecord(config="a", seed="1", per_query={"map": {"q1": 0.25, "q2": 0.75}})
    >>> for row in long_rows(StudyResults.build([rec])):
    ...     print(row)
    {'config': 'a', 'seed': '1', 'metric': 'map', 'value': 0.5, 'query': None}
    {'config': 'a', 'seed': '1', 'metric': 'map', 'value': 0.25, 'query': 'q1'}
    {'config': 'a', 'seed': '1', 'metric': 'map', 'value': 0.75, 'query': 'q2'}
    """
    rows: list[dict[str, Any]] = []
    for config in results.configs:
        for seed in results.seeds_of(config):  # a seed schedule's stopped ones: the seeds they got
            per_query = results.runs[(config, seed)].per_query
            for metric in results.metrics:
                rows.append({"config": config, "seed": seed, "metric": metric,
                             "value": results.value(config, seed, metric), "query": None})
                values = per_query.get(metric, {})
                rows += [{"config": config, "seed": seed, "metric": metric, "value": float(values[q]),
                          "query": q} for q in (results.qids or ()) if q in values]
    return rows


def _read_rows(header: Sequence[str], rows: Iterable[tuple[str, Mapping[str, Any]]], *, source: str,
               kind: str, baseline: str | None) -> dict[str, StudyResults]:
    """The one validation of the long format: ``rows`` are (where, row), ``where`` naming the row
    in errors (``FILE:LINE``); split by collection, each validated alone."""
    twice = [c for c in COLLECTION_COLUMNS if header.count(c) > 1]
    if twice:  # a reader keeps one of them without a word
        raise DataError(f"{source}{':1' if kind == 'CSV' else ''}: column(s) {', '.join(twice)} given "
                        "more than once in the header; keep one of each")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise DataError(f"{source}{':1' if kind == 'CSV' else ''}: missing column(s) {', '.join(missing)}; "
                        f"a long results {kind} has "
                        f"columns config, seed, metric, value and optionally query and collection")
    if COLLECTION not in header:
        return {ONE: _read_collection(header, rows, source=source, baseline=baseline)}
    groups: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    first: dict[str, str] = {}
    for where, row in rows:
        name = _cell(row, COLLECTION, where)
        if name.casefold() == COMBINED:  # the tables' columns of the combined verdicts
            raise DataError(f"{where}: collection {name!r} is the name of the combined verdicts' columns; "
                            "name the collection otherwise")
        groups.setdefault(name, []).append((where, row))
        first.setdefault(name, where)
    if not groups:
        raise DataError(f"{source}: no result rows")
    if ONE in groups and len(groups) > 1:
        named = next(n for n in groups if n != ONE)
        raise DataError(f"{first[ONE]}: empty collection cell, but {first[named]} names collection "
                        f"{named!r}; every row names its collection, or none does")
    out = {}
    for name, group in groups.items():
        where = source if name == ONE else f"{source} collection {name!r}"
        out[name] = _read_collection(header, group, source=where, baseline=baseline)
    return out


def _read_collection(header: Sequence[str], rows: Iterable[tuple[str, Mapping[str, Any]]], *, source: str,
                     baseline: str | None) -> StudyResults:
    has_query = "query" in header
    values: dict[tuple[str, str], dict[str, float]] = {}
    per_query: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    spelled: dict[str, tuple[str, str]] = {}  # a seed's number -> its first spelling and line
    for where, row in rows:
        config, seed, metric = (_cell(row, k, where) for k in ("config", "seed", "metric"))
        if not (config and seed and metric):
            raise DataError(f"{where}: config, seed and metric must be non-empty")
        if seed.upper() in SEED_ROW_NAMES:
            raise DataError(f"{where}: seed {seed!r} is the name of a table's mean or SD row; name the "
                            "seed otherwise (1, 2, ...)")
        digits = seed.lstrip("+-")
        if digits.isdigit() and len(digits) > MAX_SEED_DIGITS:  # int() reads no more than 4300
            raise DataError(f"{where}: seed {shown(seed)} has {len(digits)} digits; a seed has at most "
                            f"{MAX_SEED_DIGITS}")
        number = (seed.lstrip("0") or "0") if seed.isascii() and seed.isdigit() else seed
        first = spelled.setdefault(number, (seed, where))
        if first[0] != seed:  # 1 and 01: two seeds in the tables, one seed's runs
            raise DataError(f"{where}: seed {seed!r} is seed {first[0]!r} ({first[1]}) written otherwise; "
                            "write each seed one way")
        metric = metric_key(metric)  # ir-measures' names (AP, RR@10 ...) are the harness's keys
        value = strict_value(str(row.get("value") or "").strip(), metric, where)
        query = _cell(row, "query", where) if has_query else ""
        key = (config, seed)
        if query:
            bucket = per_query.setdefault(key, {}).setdefault(metric, {})
            if query in bucket:
                raise DataError(f"{where}: duplicate value for {config!r} seed {seed} "
                                f"{metric} query {query!r}")
            bucket[query] = value
        else:
            if metric in values.setdefault(key, {}):
                raise DataError(f"{where}: duplicate value for {config!r} seed {seed} {metric}")
            values[key][metric] = value
        per_query.setdefault(key, {})
    if not per_query:
        raise DataError(f"{source}: no result rows")
    records = [RunRecord(config=c, seed=s, values=values.get((c, s), {}), per_query=per_query[(c, s)])
               for c, s in per_query]
    return StudyResults.build(records, baseline=baseline, source=source, metric_order=METRIC_KEYS)


def _cell(row: Mapping[str, Any], column: str, where: str) -> str:
    """A name cell's text: stripped, and without the ``'`` that the harness's CSV writers put
    before a name that starts like a spreadsheet formula (textfile.csv_cell), so an exported name
    reads back as itself. A line break is refused: a name is one line of a table; so is any other
    control character (NUL, tab, escape ...), which a table would show as nothing or as a space (two
    names that read alike) or pass to a terminal, and a NUL no file or MLflow tag holds."""
    text = csv_text(str(row.get(column) or "").strip())
    bad = unprintable(text)
    if bad:
        rule = "a name is one line" if bad == "a line break" else "a name is printable text"
        raise DataError(f"{where}: {column} {shown(text)} holds {bad}; {rule}")
    return text
