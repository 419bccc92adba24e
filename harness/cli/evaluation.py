"""``harness table``: significance tables, and ``harness power``: how many seeds a study needs; both
from an MLflow study or a long results CSV.

    harness table (--experiment NAME [--tracking-uri URI] | --from FILE) [--metric M ...]
                  [--test auto|crossed|per-seed|across-seeds|seed-averaged|randomisation|wilcoxon]
                  [--correction none|bonferroni|holm|bh|maxt] [--family table|metric|collection]
                  [--levels 0.05 0.01] [--format md|latex|csv|html] [--form auto|seeds|configs|summary]
                  [--output FILE] [--baseline NAME] [--plots DIR] [--names label|ir-measures|key]
                  [--phase auto|confirmatory|exploratory] [--one-seed-test query]
    harness power (--experiment NAME [--tracking-uri URI] | --from FILE) [--metric M ...]
                  [--alpha 0.05] [--power 0.8] [--seeds 3 5 10 20] [--queries Q] [--effect E]
                  [--family-size M]
                  [--format md|json] [--output FILE] [--baseline NAME]

--metric takes a harness key (map, mrr_10) or ir-measures' canonical name (AP, RR@10).

Parse at the edge, then validate (read the source) -> execute (``analyse``, ``power_analysis``) ->
render, through harness.analysis: the code path of ``harness.load_study`` and
``harness.compare``. The commands print the objects Python gets (``StudyAnalysis.table()``, a
``SignificanceTable``; ``StudyAnalysis.power()``, a ``PowerReport``) rendered in ``--format``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.analysis import (
    FAMILIES,
    CollectionsStudy,
    TableOptions,
    collection_power,
    form_for,
    study_of,
)
from harness.cli import finished_exit
from harness.metrics.measures import NAME_STYLES
from harness.present.power_text import PowerReport
from harness.present.render import RENDERERS
from harness.present.table import AUTO_FORM, FORMS, SUMMARY_ABOVE
from harness.results.stored import StudyResults
from harness.stats.corrections import CORRECTIONS, DEFAULT_CORRECTION
from harness.stats.power import DEFAULT_SEEDS, FORMATS, PowerOptions
from harness.stats.significance import AUTO, ONE_SEED_TESTS, TESTS
from harness.tracking.store import DEFAULT_STORE


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    register_table(subparsers)
    register_power(subparsers)


def _source(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--experiment", metavar="NAME", help="MLflow experiment (the study name)")
    src.add_argument("--from", dest="from_file", metavar="FILE", type=Path,
                     help="long CSV with columns config, seed, metric, value[, query][, collection]")
    p.add_argument("--tracking-uri", metavar="URI",
                   help=f"MLflow store (default: {DEFAULT_STORE})")
    p.add_argument("--baseline", metavar="NAME",
                   help="baseline configuration (default: harness.role=baseline, or the CSV's first)")


def register_table(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "table", help="paired significance tables against the seeded baseline",
        description="Test every configuration against the baseline with the same seeds and render "
        "the table (one row per seed plus AVG and SD, or one row per configuration).")
    _source(p)
    p.add_argument("--metric", nargs="+", metavar="M",
                   help="metrics to show, as harness keys (map, mrr_10) or ir-measures names (AP, "
                   "RR@10) (default: all found)")
    p.add_argument("--lower-better", nargs="+", metavar="M",
                   help="metrics that are lower when the ranker is better (a latency, a loss): their falls "
                   "are marked better and their least value is bold; the harness's cascade_cost is already")
    p.add_argument("--names", default="label", choices=NAME_STYLES,
                   help="how the table names metrics: label (MAP, MRR@10), ir-measures (AP, RR@10) "
                   "or key (map, mrr_10); CSV rows always carry the key and the ir-measures name")
    p.add_argument("--test", default=AUTO, choices=[AUTO, *TESTS],
                   help="auto: crossed (seeds x queries) with per-query values and 2+ seeds; with one "
                   "seed none (see --one-seed-test); with per-run values only across-seeds")
    p.add_argument("--correction", default=DEFAULT_CORRECTION, choices=CORRECTIONS.names(),
                   help="multiple-comparison correction over the family (default holm: family-wise "
                   "error control; maxt: single-step max-|t| (Dunnett), using the correlation the "
                   "shared baseline gives the comparisons, with --test seed-averaged or per-seed only; "
                   "none: each comparison at its nominal level, said in the footnote)")
    p.add_argument("--family", default="table", choices=FAMILIES,
                   help="comparisons corrected together: the whole table (every collection, metric and "
                   "combined verdict), each metric (over the collections), or each collection (the "
                   "combined verdicts then a family of their own)")
    p.add_argument("--levels", nargs="+", type=float, default=[0.05, 0.01], metavar="ALPHA",
                   help="significance levels, strictest last (default 0.05 0.01: dagger, double dagger)")
    p.add_argument("--phase", choices=["auto", "confirmatory", "exploratory"],
                   help="a study with a confirmation phase: its confirmatory table (auto, the default) or "
                        "the exploratory one of the runs that picked; --experiment only")
    p.add_argument("--one-seed-test", choices=list(ONE_SEED_TESTS),
                   help="a study with one seed gets no markers (training variance cannot be estimated "
                   "from one run); query: the paired t-test over its queries, marked * and \u2193* "
                   "(not the multi-seed symbols)")
    p.add_argument("--format", default="md", choices=list(RENDERERS))
    p.add_argument("--form", default=AUTO_FORM, choices=[AUTO_FORM, *FORMS],
                   help="seeds: row per seed + AVG/SD, one table per metric; configs: row per config, "
                   "column per metric; summary: row per config (mean, SD, difference, interval), one "
                   f"table per metric; auto (default): seeds up to {SUMMARY_ABOVE} configs, summary past that; "
                   "in LaTeX configs (one float) where it would be seeds")
    p.add_argument("--decimals", type=int, default=4)
    p.add_argument("--seed", type=int, default=0, help="seed of the randomisation test's generator")
    p.add_argument("--resamples", type=int, default=10_000, help="randomisation test resamples")
    p.add_argument("--output", metavar="FILE", type=Path, help="write here instead of stdout")
    p.add_argument("--plots", metavar="DIR", type=Path,
                   help="also write one PNG per metric here (over several collections DIR/<collection>/<metric>.png)")
    p.set_defaults(func=run_table)


def register_power(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "power", help="variance components and the seeds a study needs",
        description="From a finished study (or a pilot): the seed, query and residual variance "
        "components of every comparison against the baseline, and the minimum detectable effect of "
        "the crossed seeds x queries test per seed count.")
    _source(p)
    p.add_argument("--metric", nargs="+", metavar="M",
                   help="metrics to analyse, as harness keys or ir-measures names (default: all found)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="two-sided significance level before the correction (0.05)")
    p.add_argument("--family-size", type=int, metavar="M",
                   help="comparisons the table corrects over: the figures are at alpha / M, Holm's "
                   "first step (default: the study's candidates, stopped ones included; 1: uncorrected)")
    p.add_argument("--power", type=float, default=0.8, help="probability of detecting the effect (0.8)")
    p.add_argument("--seeds", nargs="+", type=int, default=list(DEFAULT_SEEDS), metavar="S",
                   help="seed counts to project (default 3 5 10 20; the study's own is added)")
    p.add_argument("--queries", type=int, metavar="Q", help="query count to project (default: the study's)")
    p.add_argument("--effect", type=float, metavar="E",
                   help="a mean difference: how many seeds it needs at that query count")
    p.add_argument("--collection", metavar="NAME",
                   help="a study over several collections: the collection to analyse (each has its own "
                   "variance components; the default family is then the whole table's)")
    p.add_argument("--format", default="md", choices=FORMATS)
    p.add_argument("--output", metavar="FILE", type=Path, help="write here instead of stdout")
    p.set_defaults(func=run_power)


def load_collections(args: argparse.Namespace) -> dict[str, StudyResults]:
    """The source's results per collection (one, unnamed, for a one-collection source)."""
    _check_from(args)
    if args.from_file is not None:
        from harness.results.longcsv import read_long_collections

        return read_long_collections(args.from_file, baseline=args.baseline)
    from harness.results.mlflow_reader import read_experiment_collections

    return read_experiment_collections(args.experiment, tracking_uri=args.tracking_uri, baseline=args.baseline,
                                       phase=getattr(args, "phase", None) or "auto")


def _check_from(args: argparse.Namespace) -> None:
    """Refuse what ``--from FILE`` would silently get wrong: ``--output`` naming the file read (the
    results replaced by the table), ``--phase`` (a long CSV records no phases; it was ignored) and
    ``--tracking-uri`` (no store is read; it was ignored too)."""
    from harness.errors import ConfigError

    source = args.from_file
    if source is None:
        return
    if getattr(args, "phase", None) is not None:
        raise ConfigError(f"--phase {args.phase}: a long results CSV ({source}) records no phases; --phase "
                          "picks a confirmation phase's runs of an MLflow study (--experiment); leave it out")
    if getattr(args, "tracking_uri", None) is not None:
        raise ConfigError(f"--tracking-uri {args.tracking_uri}: --from {source} reads a long results CSV, "
                          "no MLflow store; the store is read with --experiment NAME; leave one out")
    output = args.output
    if output is not None and (output.absolute() == source.absolute() or (
            output.exists() and source.exists() and output.samefile(source))):
        raise ConfigError(f"--output {output} is the --from file: writing there would replace the results "
                          "it reads; give another file")


def _check_plots(directory: Path) -> None:
    """Refuse a ``--plots`` folder that cannot be made or written before the source is read: a
    file there (or /dev/null) ran the whole analysis and wrote ``--output``, then failed on the
    first PNG ("map.png: cannot write the plot: ...: File exists"), naming neither the option nor
    the cause."""
    from harness.errors import ConfigError
    from harness.textfile import unwritable_dir

    problem = unwritable_dir(directory)
    if problem:
        raise ConfigError(f"--plots {directory}: {problem}; --plots names a folder to write one PNG per "
                          "metric into (made if missing)")


def _collections_and_note(args: argparse.Namespace) -> tuple[dict[str, StudyResults], str]:
    """``load_collections`` and, for an MLflow study, ``incomplete_note``'s sentence ("" when it is
    finished, and for a CSV), both from one read of its runs: `harness table`'s and `power`'s."""
    if args.experiment is None:
        return load_collections(args), ""
    from harness.results.mlflow_reader import incomplete_note, one_read

    with one_read():
        return load_collections(args), incomplete_note(args.experiment, tracking_uri=args.tracking_uri)


def run_table(args: argparse.Namespace) -> int:
    """Exits 3 (harness.cli.finished_exit), with the table written and marked, when the study is not
    finished (``incomplete_note``: interrupted, failed or still running; docs/reliability.md)."""
    # The options are refused before the source is read; the rest is harness.load_study's path.
    options = TableOptions(metric=tuple(args.metric) if args.metric else None, test=args.test,
                           correction=args.correction, family=args.family, levels=tuple(args.levels),
                           seed=args.seed, resamples=args.resamples, one_seed_test=args.one_seed_test,
                           lower_better=tuple(args.lower_better or ()))
    if args.plots is not None:
        _check_plots(args.plots)
    collections, incomplete = _collections_and_note(args)
    if incomplete:
        from harness.results.mlflow_reader import with_note

        collections = {name: with_note(res, incomplete) for name, res in collections.items()}
    study = study_of(collections, options)
    if isinstance(study, CollectionsStudy):
        many = study.table(form=args.form, decimals=args.decimals, names=args.names)
        _write(many.render(args.format), args.output)
        if args.plots is not None:
            from harness.present.plots import write_collection_plots

            for path in write_collection_plots(many.analysis, args.plots):
                print(f"wrote {path}", file=sys.stderr)
    else:
        table = study.table(form=form_for(args.form, args.format, len(study.results.configs)),
                            decimals=args.decimals, names=args.names)
        _write(table.render(args.format), args.output)
        if args.plots is not None:
            from harness.present.plots import write_plots

            for path in write_plots(table.analysis, args.plots):
                print(f"wrote {path}", file=sys.stderr)
    return finished_exit(incomplete)


def run_power(args: argparse.Namespace) -> int:
    """Exits 3 with the analysis written and marked (``PowerReport.note``), as ``harness table``
    does, when the study is not finished: its variance components and family are those of the
    finished seed runs only."""
    options = PowerOptions(metrics=tuple(args.metric) if args.metric else None, alpha=args.alpha,
                           power=args.power, seeds=tuple(args.seeds), queries=args.queries,
                           effect=args.effect, family_size=args.family_size)
    collections, incomplete = _collections_and_note(args)
    chosen = getattr(args, "collection", None)
    if len(collections) == 1 and chosen is None:
        report = PowerReport.build(next(iter(collections.values())), options)
    else:
        from harness.errors import ConfigError

        source = args.experiment or args.from_file
        if chosen is None:
            raise ConfigError(f"{source} holds collections {', '.join(collections)}: a power analysis is of one "
                              "collection's variance components; name one with --collection")
        report = collection_power(collections, chosen, options, str(source), asked_as="--collection")
    if incomplete:  # marked in every format, as the table is (its footnote): not only stderr's warning
        from dataclasses import replace

        report = replace(report, note=incomplete)
    _write(report.render(args.format), args.output)
    return finished_exit(incomplete)


def _write(text: str, output: Path | None) -> None:
    """``text`` to ``output`` whole or not at all (harness.textfile.write_atomic), else to stdout
    (a full device there is one line too: harness.cli.dispatch)."""
    if output is not None:
        from harness.textfile import write_atomic

        write_atomic(output, text, "output")
    else:
        sys.stdout.write(text)
