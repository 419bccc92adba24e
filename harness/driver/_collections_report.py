"""End of a study over several collections: the whole table (a column group per collection, the
combined verdict across them, one family) onto the study run, and each configuration's verdicts
onto its config runs (docs/statistics.md, "Across collections").

Read back exactly as `harness table --experiment` reads it (``read_experiment_collections``), so
the figures in MLflow and the exported ones are the same:
- the study run: tables/collections-configs.{md,tex,csv,html} (rows = configurations) and
  tables/collections-seeds.{md,tex,csv,html} (Penha & Hauff 2020 Table 5's per-seed blocks), and
  report.html (the configs table and the per-seed tables on one page);
- each config run (one per configuration and collection): <metric>_delta and <metric>_p (its
  collection's comparison, p adjusted over the whole table), combined_<metric>_delta,
  combined_<metric>_p (adjusted), combined_<metric>_i2, and as its description the one-line
  verdict on the study's objective metric on its collection and across the collections.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.study.spec import StudySpec
from harness.tracking.conventions import TAG_NOTE
from harness.tracking.records import StudyRecords

_FORMATS = {"md": "md", "latex": "tex", "csv": "csv", "html": "html"}


def report_collections(spec: StudySpec, records: StudyRecords, ids: set[str] | None,
                       log: Callable[[str], None]) -> dict[str, Any]:
    """The report of a study over several collections (module docstring); returns per
    "config@collection" its logged metrics."""
    from harness.analysis import CollectionsStudy
    from harness.present.collections_render import collections_page
    from harness.present.collections_significance import CollectionsSignificanceTable
    from harness.results.mlflow_reader import read_experiment_collections

    collections = read_experiment_collections(spec.name, tracking_uri=records.store.uri, config_ids=ids)
    analysis = CollectionsStudy(collections=collections).analyse()
    texts: dict[str, str] = {}
    for form in ("configs", "seeds"):
        table = CollectionsSignificanceTable.build(analysis, form)
        for fmt, ext in _FORMATS.items():
            texts[f"tables/collections-{form}.{ext}"] = table.render(fmt)
    texts["report.html"] = collections_page(spec.name, texts["tables/collections-configs.html"],
                                            texts["tables/collections-seeds.html"])
    records.study_artifacts(texts)
    out: dict[str, Any] = {}
    metric = spec.metric if spec.metric in analysis.metrics else analysis.metrics[0]
    for name, a in analysis.analyses.items():
        res = a.results
        for config in res.configs:
            cid = res.config_ids.get(config)
            if cid is None:
                continue
            metrics: dict[str, float] = {}
            for m in analysis.metrics:
                comp = a.get(config, m)
                if comp is not None:
                    metrics[f"{m}_delta"] = comp.result.mean_diff
                    metrics[f"{m}_p"] = comp.p_adjusted
                comb = analysis.get_combined(config, m)
                if comb is not None:
                    metrics[f"combined_{m}_delta"] = comb.result.estimate
                    metrics[f"combined_{m}_p"] = comb.p_adjusted
                    metrics[f"combined_{m}_i2"] = comb.result.i2
            tags = {TAG_NOTE: _verdict(analysis, name, config, metric)}
            if records.config_report(cid, metrics, tags):
                out[f"{config}@{name}"] = metrics
    log("\n" + texts["tables/collections-configs.md"].strip())
    page = records.verdict_view(spec.metric)
    records.end()
    log(f"study {spec.name}: finished; the table over {len(analysis.collections)} collections logged to "
        f"study run {records.study_run}")
    log(f"each configuration's verdict: MLflow runs page {page} (`harness ui` prints its address)")
    return out


def _verdict(analysis: Any, collection: str, config: str, metric: str) -> str:
    """One line: the configuration on its collection and across the collections."""
    if config == analysis.baseline:
        return f"baseline on {collection}"
    a = analysis.analyses[collection]
    comp = a.get(config, metric)
    parts = []
    if comp is not None:
        mark = analysis.marker(comp) or "n.s."
        parts.append(f"{metric} on {collection}: \u0394 {comp.result.mean_diff:+.4f} "
                     f"[{comp.interval[0]:+.4f}, {comp.interval[1]:+.4f}], p_adj {comp.p_adjusted:.3g} ({mark})")
    comb = analysis.get_combined(config, metric)
    if comb is not None:
        mark = analysis.marker(comb) or "n.s."
        parts.append(f"across {len(comb.collections)} collections: \u0394 {comb.result.estimate:+.4f}, "
                     f"p_adj {comb.p_adjusted:.3g} ({mark}), I\u00b2 {comb.result.i2:.0%}")
    family = f"{analysis.options.correction} over the whole table (m = {analysis.comparisons})"
    return "; ".join(parts) + f"; {a.test} test, {family}"
