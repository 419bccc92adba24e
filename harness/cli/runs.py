"""``harness runs export``: a study's TREC run files, qrels and per-query values from MLflow into a
folder.

    harness runs export [--experiment NAME] [--tracking-uri URI] --to DIR

Layout of DIR: evaluation/trec_export.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli import finished_exit
from harness.tracking.store import DEFAULT_STORE


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    runs = subparsers.add_parser("runs", help="TREC run files and qrels of a study",
                                 description="The TREC run files every seed run holds (its best-dev "
                                 "checkpoint on dev and test) and the study's qrels.")
    runs.set_defaults(func=lambda _args: (runs.print_help(), 2)[1])
    sub = runs.add_subparsers(dest="runs_command", metavar="ACTION")
    p = sub.add_parser(
        "export", help="copy every run file and the qrels of a study into a folder",
        description="Copy runs/dev.trec and runs/test.trec of every finished seed run and the study "
        "run's qrels/dev.qrels and qrels/test.qrels into DIR: DIR/qrels/<split>.qrels, "
        "DIR/runs/<split>/<config>.seed<seed>.trec, DIR/manifest.csv (config, config_id, seed, "
        "split, file, run_id) and DIR/per_query.csv, every seed run's per-query test values (config, seed, "
        "metric, value, query, measure, split, config_id, run_id: a long results CSV that `harness table "
        "--from` reads). trec_eval and ir_measures on the run files give the harness's numbers.")
    p.add_argument("--experiment", metavar="NAME",
                   help="MLflow experiment (the study name; default: the store's only study)")
    p.add_argument("--tracking-uri", metavar="URI",
                   help=f"MLflow store (default: {DEFAULT_STORE})")
    p.add_argument("--to", required=True, metavar="DIR", type=Path, help="folder to write into")
    p.add_argument("--baseline", metavar="NAME",
                   help="baseline configuration, as `harness table` takes it (default: harness.role=baseline; "
                   "an experiment of `harness train` has none: name its configuration)")
    p.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    """Exits 3 (harness.cli.finished_exit), with the export written, when the study is not finished."""
    from harness.results.trec_export import export_runs

    result = export_runs(args.to, experiment=args.experiment, tracking_uri=args.tracking_uri,
                         baseline=args.baseline)
    for note in result.skipped:
        print(f"harness: note: {note}; skipped", file=sys.stderr)
    print(result.summary())
    return finished_exit(result.incomplete)
