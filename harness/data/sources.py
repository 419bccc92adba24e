"""The data sources (``data.source``): one registry, read by the config check, ``load_splits``, the
``harness data`` options and ``harness validate``.

A ``Source`` says how to load its ``Splits`` and what it needs: ``needs_path`` (``data.path`` must
be set), ``own_candidates`` (its data brings the candidates, so ``train.sampler`` must be
``dataset``; ``why`` says so in the error) and ``check`` (a cheap ``harness validate`` check of
what it reads, before any study starts). Adding a source is one ``SOURCES.register`` call here;
importing this module imports no reader (each loader imports its own on first use).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.data.config import DataConfig
from harness.errors import ConfigError, DataError, HarnessError, refuse, require
from harness.registry import Registry

if TYPE_CHECKING:
    from harness.data._progress import Progress
    from harness.records import Splits

Loader = Callable[["DataConfig", str, "Progress | None"], "Splits"]


@dataclass(frozen=True, kw_only=True)
class Source:
    """One ``data.source``: ``load(cfg, train_sampler, progress)`` gives its splits, uncapped."""

    name: str
    help: str
    load: Loader
    needs_path: bool = False
    own_candidates: bool = False
    why: str = ""
    check: Callable[[DataConfig], None] | None = None
    # The data.* keys its loader reads besides COMMON_KEYS (``unread``: the others do nothing).
    reads: frozenset[str] = frozenset()

    def __call__(self, cfg: DataConfig, train_sampler: str, progress: Progress | None) -> Splits:
        return self.load(cfg, train_sampler, progress)


SOURCES: Registry[Source] = Registry("data.source")
# The data.* keys every source reads: which source, the collection's name, the cache folder, the
# query caps and the seed they (and every seeded split) draw with.
COMMON_KEYS = frozenset({"source", "collection", "cache_dir", "split_seed", "max_train_queries",
                         "max_dev_queries", "max_test_queries"})


def add(source: Source) -> Source:
    return SOURCES.register(source.name)(source)


def get(name: str) -> Source:
    """The source named ``name``; an unknown name is a ``ConfigError`` listing the valid ones."""
    return SOURCES.get(name)


def check(cfg: DataConfig, train_sampler: str) -> None:
    """What ``cfg.source`` needs of the rest of the trial: a known name, ``data.path`` where the
    source reads a directory, and ``train.sampler: dataset`` where its data brings the candidates.
    ``TrialConfig`` and ``load_splits`` call it; every message names its key."""
    require(cfg.source in SOURCES, "data.source", f"one of {', '.join(SOURCES)}", cfg.source)
    source = SOURCES.get(cfg.source)
    require(not source.needs_path or bool(cfg.path), "data.path", f"set for data.source={cfg.source}",
            cfg.path)
    if source.own_candidates and train_sampler != "dataset":
        raise ConfigError(f"train.sampler must be dataset for data.source={cfg.source} "
                          f"({source.why}), got {train_sampler!r}", key="train.sampler")


def reads(source: str, key: str) -> bool:
    """Whether data source ``source`` reads config key ``key`` (data.*); an unknown source reads
    every key (its name is refused elsewhere)."""
    return source not in SOURCES or key[5:] in COMMON_KEYS | SOURCES.get(source).reads


def unread(cfg: DataConfig) -> tuple[str, ...]:
    """The data.* keys ``cfg`` sets (to other than their default) that its source does not read:
    they change nothing of the data it loads (``--negatives`` of the shipped Cranfield).

    >>> unread(DataConfig(source="cranfield", negatives=4, depth=50))
    ('data.negatives',)
    """
    return tuple(key for key in set_keys(cfg) if not reads(cfg.source, key))


def set_keys(cfg: DataConfig) -> tuple[str, ...]:
    """The data.* keys of ``cfg`` at other than their default, in field order."""
    return tuple(f"data.{f.name}" for f in dataclasses.fields(cfg) if getattr(cfg, f.name) != f.default)


def only_read(cfg: DataConfig) -> DataConfig:
    """``cfg`` with the keys its source does not read (``unread``) at their defaults: the same
    data, as a configuration's id and records name it. A study over several collections shares
    its data section and overrides among them, each collection taking what its source reads."""
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    return dataclasses.replace(cfg, **{k[5:]: defaults[k[5:]] for k in unread(cfg)})


def read_by_none(sources: Sequence[str], key: str) -> ConfigError | None:
    """Why ``key`` is refused where none of ``sources`` (a study's collections') reads it; None
    where one does."""
    if any(reads(source, key) for source in sources):
        return None
    if len(set(sources)) == 1:
        return unread_error(sources[0], key)
    return ConfigError(f"{key}: none of the study's collections reads it ({', '.join(sorted(set(sources)))} "
                       "sources), so it would change nothing; drop it", key=key)


def unread_error(source: str, key: str) -> ConfigError:
    """Why ``key``, which data source ``source`` does not read, is refused (the error's key)."""
    own = ", ".join(f"data.{k}" for k in sorted(SOURCES.get(source).reads)) or "none"
    return ConfigError(f"{key}: data.source={source} does not read it, so it would change nothing (that "
                       f"source's own data keys: {own}); drop it", key=key)


# --- the sources -------------------------------------------------------------------------------


def _chitchat(cfg: DataConfig, train_sampler: str, progress: Progress | None) -> Splits:
    from harness.data._chitchat import load_chitchat

    return load_chitchat(cfg, train_sampler, progress)


def _check_chitchat(cfg: DataConfig) -> None:
    if cfg.path is not None:  # a chitchat-format file in place of the packaged one
        from harness.textfile import file_kind

        path = Path(str(cfg.path)).expanduser()
        kind = file_kind(path)  # a directory, FIFO, device, socket or symlink loop, named as such
        if kind or not path.is_file():
            raise refuse("data.path", cfg.path, "a chitchat-format file for data.source=chitchat",
                          why=f"it is {kind}" if kind else "no such file")
        return
    try:
        import chitchat_dataset  # noqa: F401
    except ImportError:
        raise HarnessError("data.source=chitchat needs the data package: pip install chitchat-dataset") from None


def _directory_reader(name: str) -> Loader:
    def load(cfg: DataConfig, train_sampler: str, progress: Progress | None) -> Splits:
        from harness.data import _readers as readers

        if progress:
            progress(f"reading {name} data from {cfg.path}")
        reader = readers.read_msdialog if name == "msdialog" else readers.read_trec
        return reader(Path(str(cfg.path)).expanduser().resolve())

    return load


def _check_path(cfg: DataConfig) -> None:
    from harness.textfile import file_kind

    path = Path(str(cfg.path))
    kind = file_kind(path)
    if kind in ("a symlink loop", "a FIFO (named pipe)", "a device", "a socket"):
        raise DataError(f"data.path: {path} is {kind}, not a data file or folder")
    if not path.exists():
        raise DataError(f"data.path: {path} does not exist")


def _irds(cfg: DataConfig, train_sampler: str, progress: Progress | None) -> Splits:
    from harness.data._irds import read_irds

    return read_irds(cfg, progress)


def _check_irds(cfg: DataConfig) -> None:
    from harness.data._irds import check_irds

    check_irds(cfg)


def _cranfield(cfg: DataConfig, train_sampler: str, progress: Progress | None) -> Splits:
    from harness.data._cranfield import load_cranfield

    return load_cranfield(cfg, progress)


def _check_cranfield(cfg: DataConfig) -> None:
    from harness.data._cranfield import FILES, shipped_dir

    missing = [name for name in FILES if not (shipped_dir() / name).is_file()]
    if missing:
        raise HarnessError(f"data.source=cranfield: the shipped file(s) {', '.join(missing)} are "
                           f"missing from {shipped_dir()}; reinstall harness")


_FILES = "its files bring their own candidates and no corpus to sample from"

add(Source(name="chitchat", help="the embedded set (data.path: a chitchat-format file, default "
           "the packaged one)", load=_chitchat, check=_check_chitchat,
           reads=frozenset({"path", "conversations", "context_turns", "negatives", "protocol", "depth",
                            "dev_fraction", "test_fraction"})))
add(Source(name="msdialog", help="MSDialog/MANtIS TSV directory (data.path)",
           load=_directory_reader("msdialog"), needs_path=True, own_candidates=True, why=_FILES,
           check=_check_path, reads=frozenset({"path"})))
add(Source(name="trec", help="TREC-style directory: queries, docs, qrels, run (data.path)",
           load=_directory_reader("trec"), needs_path=True, own_candidates=True, why=_FILES,
           check=_check_path, reads=frozenset({"path"})))
add(Source(name="cranfield", help="the shipped Cranfield collection (1,400 abstracts, 225 queries), "
           "candidates the top data.depth BM25 hits", load=_cranfield, own_candidates=True,
           why="its candidates are its BM25 run's", check=_check_cranfield,
           reads=frozenset({"depth", "dev_fraction", "test_fraction"})))
add(Source(name="irds", help="an ir_datasets data set (data.irds_id; data.irds_register for a "
           "local one)", load=_irds, own_candidates=True,
           why="its first-stage run (scoreddocs) brings the candidates", check=_check_irds,
           reads=frozenset({"irds_id", "irds_register", "depth", "dev_fraction", "test_fraction"})))
