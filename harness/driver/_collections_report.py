"""End of a study over several collections: the whole table (a column group per collection, the
combined verdict across them, one family) onto the study run, and each configuration's verdicts
onto its config runs (docs/statistics.md, "Across collections").

Read back exactly as `harness table --experiment` reads it (``read_experiment_collections``), so
the figures in MLflow and the exported ones are the same:
- the study run: tables/collections-configs.{md,tex,csv,html} (rows = configurations) and
  tables/collections-seeds.{md,tex,csv,html} (Penha & Hauff 2020 Table 5's per-seed blocks), and
  report.html (the configs table and the per-seed tables on one page);
- the study run also holds plots/<collection>/<metric>.png (harness.present.plots, what
  `harness table --plots DIR` writes);
- each config run (one per configuration and collection): <metric>_delta and <metric>_p (its
  collection's comparison, p adjusted over the whole table), combined_<metric>_delta,
  combined_<metric>_p (adjusted), combined_<metric>_i2 (where defined), and as its description the one-line
  verdict on the study's objective metric on its collection and across the collections.

A study with a confirmation phase (harness.driver._confirm), as on one collection
(harness.driver._final_report): the tables, plots and report.html above are the confirmatory
table's (the confirmation's runs only), and exploratory/tables/collections-*.{md,tex,csv,html} the
exploratory one's (the runs that picked, over the whole table of their own), whose config runs get
their verdicts too, prefixed "exploratory: ".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from harness.study.spec import StudySpec
from harness.tracking.conventions import TAG_NOTE
from harness.tracking.records import StudyRecords

if TYPE_CHECKING:
    from harness.results.stored import StudyResults
    from harness.stats.across import CollectionsAnalysis

_FORMATS = {"md": "md", "latex": "tex", "csv": "csv", "html": "html"}


def report_collections(spec: StudySpec, records: StudyRecords, ids: set[str] | None,
                       log: Callable[[str], None]) -> dict[str, Any]:
    """The report of a study over several collections (module docstring); returns per
    "config@collection" its logged metrics."""
    from harness.present.collections_render import collections_page
    from harness.results.mlflow_reader import read_experiment_collections

    collections = read_experiment_collections(spec.name, tracking_uri=records.store.uri, config_ids=ids)
    if any(res.phase == "confirmatory" for res in collections.values()):
        # The runs that picked: their table beside the confirmatory one, their verdicts on their runs.
        exploratory = _analyse(read_experiment_collections(spec.name, tracking_uri=records.store.uri,
                                                           config_ids=ids, phase="exploratory"))
        records.study_artifacts({f"exploratory/{path}": text for path, text in _tables(exploratory).items()})
        _config_reports(spec, records, exploratory, note="exploratory: ")
    analysis = _analyse(collections)
    texts = _tables(analysis)
    texts["report.html"] = collections_page(spec.name, texts["tables/collections-configs.html"],
                                            texts["tables/collections-seeds.html"])
    records.study_artifacts(texts)
    _log_plots(records, analysis)
    out = _config_reports(spec, records, analysis)
    log("\n" + texts["tables/collections-configs.md"].strip())
    page = records.verdict_view(spec.metric)
    records.end()
    log(f"study {spec.name}: finished; the table over {len(analysis.collections)} collections logged to "
        f"study run {records.study_run}")
    log(f"each configuration's verdict: MLflow runs page {page} (`harness ui` prints its address)")
    return out


def _analyse(collections: Mapping[str, StudyResults]) -> CollectionsAnalysis:
    from harness.analysis import CollectionsStudy

    return CollectionsStudy(collections=collections).analyse()


def _tables(analysis: CollectionsAnalysis) -> dict[str, str]:
    """tables/collections-{configs,seeds}.{md,tex,csv,html} of ``analysis``."""
    from harness.present.collections_significance import CollectionsSignificanceTable

    texts: dict[str, str] = {}
    for form in ("configs", "seeds"):
        table = CollectionsSignificanceTable.build(analysis, form)
        for fmt, ext in _FORMATS.items():
            texts[f"tables/collections-{form}.{ext}"] = table.render(fmt)
    return texts


def _log_plots(records: StudyRecords, analysis: CollectionsAnalysis) -> None:
    """plots/<collection>/<metric>.png onto the study run."""
    import tempfile
    from pathlib import Path

    from harness.present.plots import write_collection_plots

    with tempfile.TemporaryDirectory() as tmp:
        pngs = write_collection_plots(analysis, tmp)
        records.study_artifacts(files=[(png, f"plots/{png.parent.relative_to(Path(tmp)).as_posix()}")
                                       for png in pngs])


def _config_reports(spec: StudySpec, records: StudyRecords, analysis: CollectionsAnalysis,
                    note: str = "") -> dict[str, Any]:
    """Each config run's comparison, combined verdict and one-line verdict (``note`` before it);
    returns per "config@collection" the logged metrics."""
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
            tags = {TAG_NOTE: note + _verdict(analysis, name, config, metric)}
            if records.config_report(cid, metrics, tags):
                out[f"{config}@{name}"] = metrics
    return out


def _verdict(analysis: CollectionsAnalysis, collection: str, config: str, metric: str) -> str:
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
