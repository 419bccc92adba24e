"""The results-exchange format (docs/exchange.md, "Long results CSV"): a long CSV with columns config, seed, metric, value and
an optional query column.

A metric is a harness key (map, mrr_10 ...) or ir-measures' canonical name (AP, RR@10 ...; the two
name one metric, metrics.METRIC_TABLE). A row without a query (or with an empty query cell) is a
per-run value; a row with one is a per-query value. Either or both may be given for a run; per-run values alone support the across-seeds test only.
The baseline is ``baseline`` when given, else the first configuration in the file.

    config,seed,metric,value
    random,1,map,0.7142
    #turns,1,map,0.7220
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from harness.errors import DataError
from harness.evaluation.metrics import METRIC_KEYS, metric_key
from harness.evaluation.results import RunRecord, StudyResults

REQUIRED = ("config", "seed", "metric", "value")


def read_long_csv(path: str | Path, *, baseline: str | None = None) -> StudyResults:
    """Read and validate a long results CSV (module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    values: dict[tuple[str, str], dict[str, float]] = {}
    per_query: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in reader.fieldnames or []]
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise DataError(f"{path}: missing column(s) {', '.join(missing)}; a long results CSV has "
                            f"columns config, seed, metric, value and optionally query")
        reader.fieldnames = header
        has_query = "query" in header
        for line, row in enumerate(reader, start=2):
            config, seed, metric = (str(row.get(k) or "").strip() for k in ("config", "seed", "metric"))
            if not (config and seed and metric):
                raise DataError(f"{path}:{line}: config, seed and metric must be non-empty")
            metric = metric_key(metric)  # ir-measures' names (AP, RR@10 ...) are the harness's keys
            try:
                value = float(str(row.get("value") or "").strip())
            except ValueError:
                raise DataError(f"{path}:{line}: value {row.get('value')!r} is not a number") from None
            if not math.isfinite(value):
                raise DataError(f"{path}:{line}: value {value} is not finite")
            query = str(row.get("query") or "").strip() if has_query else ""
            key = (config, seed)
            if query:
                bucket = per_query.setdefault(key, {}).setdefault(metric, {})
                if query in bucket:
                    raise DataError(f"{path}:{line}: duplicate value for {config!r} seed {seed} "
                                    f"{metric} query {query!r}")
                bucket[query] = value
            else:
                if metric in values.setdefault(key, {}):
                    raise DataError(f"{path}:{line}: duplicate value for {config!r} seed {seed} {metric}")
                values[key][metric] = value
            per_query.setdefault(key, {})
    if not per_query:
        raise DataError(f"{path}: no result rows")
    records = [RunRecord(config=c, seed=s, values=values.get((c, s), {}), per_query=per_query[(c, s)])
               for c, s in per_query]
    return StudyResults.build(records, baseline=baseline, source=str(path), metric_order=METRIC_KEYS)
