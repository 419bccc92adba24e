"""``harness report``: the one-page study report (harness.present.html_report) of an MLflow
study, written to a self-contained HTML file.

    harness report --experiment NAME --to FILE [--tracking-uri URI] [--baseline NAME]
                   [--phase auto|confirmatory|exploratory] [--metric M]

The page is the one a study logs as report.html on its study run, read back as `harness table
--experiment` reads the study (the same runs, phase and tests).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.textfile import write_atomic
from harness.tracking.store import DEFAULT_STORE


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "report", help="the one-page HTML report of a study",
        description="Write a study's report as one self-contained HTML page: what the study decided, "
        "the significance table, a forest plot of the differences to the baseline, the dev curves "
        "per configuration and the power curve.")
    p.add_argument("--experiment", metavar="NAME", required=True, help="MLflow experiment (the study name)")
    p.add_argument("--to", metavar="FILE", type=Path, required=True, help="the HTML file to write")
    p.add_argument("--tracking-uri", metavar="URI",
                   help=f"MLflow store (default: {DEFAULT_STORE})")
    p.add_argument("--baseline", metavar="NAME", help="baseline configuration (default: harness.role=baseline)")
    p.add_argument("--phase", default="auto", choices=["auto", "confirmatory", "exploratory"],
                   help="a study with a confirmation phase: its confirmatory report (auto's choice) or "
                        "the exploratory one of the runs that picked")
    p.add_argument("--metric", metavar="M", help="the dev curves' metric (default: the study's objective)")
    p.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    from harness.cli import finished_exit
    from harness.metrics.measures import metric_key
    from harness.present.html_report import report_html, study_ended
    from harness.present.report import study_report
    from harness.results.mlflow_reader import (
        incomplete_note,
        one_read,
        read_experiment,
        read_experiment_collections,
        with_note,
    )
    from harness.results.study_record import read_study_record

    metric = metric_key(args.metric) if args.metric else None
    with one_read():  # the results, the record and the note read the runs once
        collections = read_experiment_collections(args.experiment, tracking_uri=args.tracking_uri,
                                                  baseline=args.baseline, phase=args.phase)
        if len(collections) == 1:
            results = read_experiment(args.experiment, tracking_uri=args.tracking_uri, baseline=args.baseline,
                                      phase=args.phase)
            # The record first: a --metric without dev curves is refused before the tests run.
            record = read_study_record(args.experiment, results, tracking_uri=args.tracking_uri, metric=metric)
            ended = study_ended(args.experiment, tracking_uri=args.tracking_uri)  # the footer's time
        # As `harness table`: the page of a study that is not finished says so, and the exit is 3.
        incomplete = incomplete_note(args.experiment, tracking_uri=args.tracking_uri)
    collections = {name: with_note(res, incomplete) for name, res in collections.items()}
    if len(collections) == 1:
        results = with_note(results, incomplete)
    if len(collections) > 1:  # a study over several collections: its whole table (its report.html)
        if metric is not None:
            from harness.errors import ConfigError

            raise ConfigError(f"--metric {args.metric}: the report of a study over several collections "
                              f"({', '.join(collections)}) is its whole table, with no dev curves to choose "
                              "a metric for; leave out --metric")
        page = _collections_page(args.experiment, collections)
    else:
        page = report_html(study_report(results, formats=("html",)), record, title=args.experiment, ended=ended)
    write_atomic(args.to, page, "report")
    print(f"wrote {args.to}", file=sys.stderr)
    return finished_exit(incomplete)


def _collections_page(study: str, collections: dict) -> str:  # type: ignore[type-arg]
    """The page a study over several collections logs as its report.html (the whole table and the
    per-seed blocks, harness.driver._collections_report)."""
    from harness.analysis import CollectionsStudy
    from harness.present.collections_render import collections_page
    from harness.present.collections_significance import CollectionsSignificanceTable

    analysis = CollectionsStudy(collections=collections).analyse()
    return collections_page(study, CollectionsSignificanceTable.build(analysis, "configs").to_html(),
                            CollectionsSignificanceTable.build(analysis, "seeds").to_html())
