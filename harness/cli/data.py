"""``harness data build|stats``: build (and cache) a data set, or print its Table 4 statistics and
its first-stage (BM25 vs random) MAP and the positive's BM25 rank per split.

The data set built here is the one every study evaluates on: dev and test candidates follow
``data.protocol``; a study's ``train.sampler`` only swaps the training negatives.

Options map one-to-one onto ``data.*`` config keys and are parsed by ``TrialConfig.from_flat``,
so a bad value is reported with the key's name (``data.negatives must be >= 1, got 0``).
Progress goes to stderr as a few percent/ETA lines; results go to stdout.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.config import DataConfig, TrialConfig
from harness.data.sources import SOURCES, reads, unread_error
from harness.errors import ConfigError, DataError

# flag -> (config key, help)
_OPTIONS: dict[str, tuple[str, str]] = {
    "--source": ("data.source", "; ".join(f"{s}: {SOURCES.get(s).help}" for s in SOURCES)
                 + " (default chitchat)"),
    "--path": ("data.path", "data file (chitchat) or directory (msdialog, trec)"),
    "--irds-id": ("data.irds_id", ("irds: one ir_datasets id (split by data.split_seed) or "
                  "train,dev,test ids")),
    "--irds-register": ("data.irds_register", ("irds: a Python module or .py file that registers "
                        "local data sets in ir_datasets")),
    "--conversations": ("data.conversations", "seeded subset of N conversations (default: all)"),
    "--context-turns": ("data.context_turns", "keep the last N utterances of a context (default 10)"),
    "--negatives": ("data.negatives", "negatives per context (default 9)"),
    "--protocol": ("data.protocol", ("negatives of every split: response (default; sampled from "
                                     "the top DEPTH BM25 hits of the true response, as MSDialog/"
                                     "MANtIS) or context (the top BM25 hits of the context, NS_BM25)")),
    "--depth": ("data.depth", "response protocol: sample negatives from the top N hits (default 1000)"),
    "--split-seed": ("data.split_seed", "seed of the subset, the split and query caps (default 13)"),
    "--cache-dir": ("data.cache_dir", "cache folder (default $HARNESS_CACHE or ~/.cache/harness)"),
}


def _add_data_options(parser: argparse.ArgumentParser) -> None:
    for flag, (key, help_text) in _OPTIONS.items():
        parser.add_argument(flag, dest=key, metavar=flag.lstrip("-").replace("-", "_").upper(),
                            default=None, help=help_text)


def data_config(args: argparse.Namespace) -> DataConfig:
    """The DataConfig of the given options over the defaults (validated, keys named)."""
    flat: dict[str, Any] = {key: getattr(args, key) for key, _ in _OPTIONS.values()
                            if getattr(args, key, None) is not None}
    cfg = TrialConfig.from_flat(flat).data
    # An option its source does not read (--negatives of the shipped Cranfield) was given for
    # nothing, at its default value too: refused, naming the option.
    flags = {key: flag for flag, (key, _) in _OPTIONS.items()}
    for key in flat:
        if not reads(cfg.source, key):
            raise ConfigError(f"{flags[key]}: {unread_error(cfg.source, key)}", key=key)
    return cfg


def _stderr(message: str) -> None:
    print(f"harness data: {message}", file=sys.stderr, flush=True)


def _build(args: argparse.Namespace) -> int:
    from harness.data.load import load_splits

    cfg = data_config(args)
    if cfg.source == "chitchat":  # the one source it caches: its job is the cache, so first see it can be written
        from harness.cachedir import cache_problem

        # --cache-dir /etc/passwd built for 100 s before "built but not cached"; /proc/nope built on
        if problem := cache_problem(cfg.cache_dir, option="--cache-dir"):
            raise ConfigError(problem, key="data.cache_dir" if cfg.cache_dir else None)
    splits = load_splits(cfg, progress=_stderr)
    cached = None
    if cfg.source == "chitchat":
        from harness.data.cache import cache_file

        cached = cache_file(cfg, splits.fingerprint)
        if not cached.is_file():  # the build's warning above says why; the command's job was the cache
            raise DataError(f"the data was built but not cached: {cached} could not be written "
                            "(--cache-dir or HARNESS_CACHE: a folder you can write)")
    print(f"source       {cfg.source}{f' ({cfg.path})' if cfg.path else ''}")
    print(f"fingerprint  {splits.fingerprint}")
    print(f"evaluation   {splits.evaluation}")
    if cached is not None:
        print(f"cache        {cached}")
    print("queries      " + ", ".join(f"{name} {len(splits.split(name)):,}"
                                       for name in ("train", "dev", "test")))
    return 0


def _stats(args: argparse.Namespace) -> int:
    from harness.data.load import load_splits
    from harness.data.stats import data_stats, format_stats

    cfg = data_config(args)
    splits = load_splits(cfg, progress=_stderr)
    protocol = f", {cfg.protocol} protocol" if cfg.source == "chitchat" else ""
    print(format_stats(data_stats(splits), title=f"{cfg.source} data set{protocol} "
                       f"(fingerprint {splits.fingerprint[:12]}, evaluation {splits.evaluation[:12]})"))
    return 0


def register(subparsers: Any) -> None:
    """Add ``data build`` and ``data stats`` to the ``harness`` command."""
    data = subparsers.add_parser("data", help="build the embedded data set / show its statistics",
                                 description="Build, cache and describe the ranking data.")
    data.set_defaults(func=lambda _args: (data.print_help(), 2)[1])
    sub = data.add_subparsers(dest="data_command", metavar="ACTION")
    build = sub.add_parser("build", help="build the data set and cache it",
                           description="Build the data set for these options and cache it "
                           "(the embedded set); prints its fingerprint and query counts.")
    _add_data_options(build)
    build.set_defaults(func=_build)
    stats = sub.add_parser("stats", help="print the Table 4 statistics and first-stage MAP per split",
                           description="Print the statistics of Penha & Hauff (2020), Table 4, "
                           "per split, then the MAP of the first-stage BM25 ranking of the "
                           "candidates against a random order's (its exact expectation) and "
                           "where the positive ranks under BM25 (builds the data set first if it "
                           "is not cached).")
    _add_data_options(stats)
    stats.set_defaults(func=_stats)
