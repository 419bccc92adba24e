"""Study files: YAML validated into a frozen ``StudySpec``. Errors name the file, the line and the key.

A study file::

    name: quickstart                 # MLflow experiment name and Ray Tune experiment name
    defaults:                        # flat dotted keys (or nested sections) shared by every config
      model.name: packaged
      train.steps: 120
    baseline: {}                     # overrides that make the baseline (default: the defaults)
    configs:                         # named candidate configurations (optional)
      - name: bert_pred-root_2
        set: {curriculum.scoring: bert_pred, curriculum.pacing: root_n, curriculum.n: 2}
    search:                          # optional: a searcher proposes further configurations
      searcher: tpe                  # tpe | random | nsga2 (Optuna) | grid (exhaustive)
      num_configs: 8
      objective_collection: NAME     # over several collections: optimise this one's dev objective
                                     # (default: the mean over the collections)
      space:
        curriculum.delta: {uniform: [0.1, 0.9]}
        curriculum.n: {int: [1, 10], when: {curriculum.pacing: root_n}}
    seeds: [1, 2, 3]                 # every configuration, the baseline included, runs each seed
                                     # or a schedule {start: 4, step: 2, max: 12}: seeds in rounds
    confirm: {top: 1}                # the top configurations by dev and the baseline retrained with
                                     # fresh seeds (default with a searcher; false: none)
    objective: {metric: map, mode: max}   # dev metric the searcher optimises (mean over seeds)
    resources: {cpus: 1, gpus: 0}    # per trial; a GPU fraction lets small trials share a GPU;
                                     # seeds_per_trial: k trains k seeds of a configuration in one trial
    concurrency: 2
    failure: {max_retries: 2, checkpoint_every_s: 60}   # checkpoint: first evaluation, then >= 60 s apart
    storage_path: runs               # Ray Tune experiment storage (a path or s3://...)
    models: best                     # MLflow models at the end: best (its seeds), all, none
    early_stopping:                  # optional, off by default (harness.study.early_stop)
      rungs: [0.25, 0.5]             # fractions of train.steps, or whole step counts
      reduction_factor: 2            # keep the top 1/reduction_factor of configurations at a rung
      metric: map                    # dev metric compared (default: objective.metric)
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from harness.config import (
    MAX_INT,
    MAX_SEED,
    SELECT_METRICS,
    KeyLines,
    TrialConfig,
    as_bool,
    flatten,
    read_yaml,
    text_value,
    unknown_key_message,
)
from harness.data.sources import only_read, read_by_none, set_keys, unread, unread_error
from harness.errors import ConfigError, refuse, shown
from harness.registry import Registry
from harness.results.stored import COMBINED
from harness.stats.sequential import SeedSchedule
from harness.study.early_stop import EarlyStopSettings, rung_step, rung_steps
from harness.study.space import Param, ordered, parse_param
from harness.suggest import did_you_mean
from harness.tracking.conventions import MODEL_LOGGING, name_problem

TOP_KEYS = ("name", "description", "defaults", "data", "model", "train", "curriculum", "weighting",
            "smoothing", "cascade", "baseline", "configs", "search", "seeds", "objective", "resources",
            "concurrency", "failure", "storage_path", "tracking_uri", "smoke", "early_stopping", "models",
            "confirm", "collections")
SECTION_KEYS = ("data", "model", "train", "curriculum", "weighting", "smoothing", "cascade")


@dataclass(frozen=True)
class Searcher:
    """A searcher and its rules: how many objectives it optimises (none: exhaustive grid), the
    Optuna sampler class that proposes (``None``: every combination of discrete values, once)."""

    name: str
    objectives: int
    sampler: str | None
    discrete_only: bool = False


SEARCHERS: Registry[Searcher] = Registry("search.searcher")
for _searcher in (Searcher("tpe", 1, "TPESampler"), Searcher("random", 1, "RandomSampler"),
                  Searcher("nsga2", 2, "NSGAIISampler"), Searcher("grid", 1, None, discrete_only=True)):
    SEARCHERS.register(_searcher.name)(_searcher)
METRICS = (*SELECT_METRICS, "cascade_map", "cascade_cost")
# What a URI may hold as written (RFC 3986: unreserved and reserved characters, %-escapes).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://.")  # s3://bucket/..., file:///...: a scheme first
_URI = re.compile(r"(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})+")
# The precision of Ray's resource quantities (CPUs, GPUs per trial): a trial asking for less fails
# inside Tune.
RAY_RESOURCE_STEP = 0.0001
# Data keys that change the training split only; every other data key defines the evaluation set.
TRAINING_ONLY_DATA_KEYS = ("max_train_queries", "cache_dir")
# What one study may ask for, refused before any of it is built (docs/study-file.md, "Limits"):
# seeds per configuration (listed, or a schedule's max; confirmation seeds too), rounds of a seed
# schedule, and configurations (listed, a grid's, a searcher's proposals, each counted alone).
# Each is far beyond what a study trains in practice, and keeps validate's work small.
MAX_SEEDS = 1000
MAX_ROUNDS = 100
MAX_CONFIGS = 1000
# Collections of one study: each is prepared (and `harness validate` builds its data); the papers'
# tables span 2-4.
MAX_COLLECTIONS = 20


@dataclass(frozen=True, kw_only=True)
class NamedConfig:
    name: str
    role: str
    config: TrialConfig  # seed-less (train.seed is overridden per trial)
    # How tables, the report and plots name it (configs[i].label; "": its name), kept on its
    # config run as the tag harness.label.
    label: str = ""


@dataclass(frozen=True, kw_only=True)
class SearchSpec:
    searcher: str
    num_configs: int
    space: dict[str, Param]
    objectives: tuple[tuple[str, str], ...]


@dataclass(frozen=True, kw_only=True)
class ConfirmSpec:
    """The confirmation phase (harness.driver._confirm): the ``top`` configurations by their mean dev
    objective and the baseline, retrained with ``seeds``, fresh seeds after every earlier one."""

    top: int
    seeds: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class StudySpec:
    name: str
    description: str
    path: str
    text: str
    defaults: TrialConfig
    baseline: NamedConfig
    configs: tuple[NamedConfig, ...]
    search: SearchSpec | None
    seeds: tuple[int, ...]
    metric: str
    mode: str
    cpus: float
    gpus: float
    concurrency: int
    max_retries: int
    storage_path: str
    tracking_uri: str | None
    smoke: dict[str, Any] = field(default_factory=dict)
    early_stopping: EarlyStopSettings | None = None
    models: str = "best"
    checkpoint_every_s: float = 60.0
    # Seeds added in rounds (harness.driver._rounds); ``seeds`` then lists every seed up to max.
    seed_schedule: SeedSchedule | None = None
    # The confirmation phase (harness.driver._confirm); None: the study picks nothing to confirm.
    confirm: ConfirmSpec | None = None
    # Seeds of one configuration trained in one Ray Tune trial (resources.seeds_per_trial;
    # harness.study.grouping); 1: a trial per seed.
    seeds_per_trial: int = 1
    # resources.fuse: whether a trial's seeds train as one fused model (harness.training.fused):
    # None = auto (where it pays: CUDA), True / False = always / never.
    fuse: bool | None = None
    # A study over several collections (``collections:``; with_collections): their names in the
    # file's order; () for a one-collection study. ``baseline`` is then the first collection's and
    # ``configs`` holds every other (configuration, collection), each with its data.collection.
    collections: tuple[str, ...] = ()
    # Each collection's data keys (flat, data.collection included), as ``in_collection`` applies them.
    collection_data: dict[str, dict[str, Any]] = field(default_factory=dict)
    # search.objective_collection: the collection whose dev objective the searcher optimises and the
    # confirmation ranks by (a grid's pick too); None: the mean over the collections of each one's
    # mean over seeds.
    objective_collection: str | None = None
    # The command line's ``--set`` assignments applied (harness.study.validate.load), as given: an
    # error about a key they set names the assignment, not the file's line of the key.
    assigned: tuple[str, ...] = ()

    def in_collection(self, cfg: TrialConfig, collection: str) -> TrialConfig:
        """``cfg`` on one collection of a study over several: its data keys over ``cfg``'s."""
        return TrialConfig.from_flat(self.collection_data[collection], base=cfg)

    def collection_configs(self, collection: str | None) -> tuple[NamedConfig, ...]:
        """The fixed configurations (baseline first) of one collection (None: a one-collection study)."""
        return tuple(nc for nc in self.fixed_configs() if nc.config.data.collection == collection)

    @property
    def phases(self) -> tuple[str, ...]:
        """The study's Tune experiments: ``fixed``, then ``search`` when it has a search, then
        ``confirmation`` when it confirms its pick; with a seed schedule, ``fixed`` is round 1 and
        ``round2`` ... ``round<K>`` are the further rounds."""
        rounds = tuple(f"round{k}" for k in range(2, self.seed_schedule.rounds + 1)) if self.seed_schedule else ()
        search = ("search",) if self.search else ()
        return ("fixed", *rounds, *search, *(("confirmation",) if self.confirm else ()))

    def phase_dir(self, phase: str) -> str:
        """Where Tune keeps a phase's state: ``<storage_path>/<name>-<phase>`` (a path or a URI)."""
        return f"{self.storage_path.rstrip('/')}/{self.name}-{phase}"

    def fixed_configs(self) -> tuple[NamedConfig, ...]:
        """The baseline first, then the named candidates (and an exhaustive grid's configs)."""
        return (self.baseline, *self.configs)

    def with_overrides(self, flat: dict[str, Any]) -> StudySpec:
        """Apply flat keys to every configuration (smoke mode, CLI --set); train.seed is refused:
        a study's seeds come from its ``seeds``."""
        if "train.seed" in flat:
            raise ConfigError("train.seed is set by the study's seeds (its seeds: key), not by --set or "
                              "smoke", key="train.seed")
        if self.collections:
            # Which data a collection is belongs to its entry: an override of every configuration
            # would train one collection's data under another's name.
            for key in ("data.source", "data.path", "data.irds_id", "data.irds_register"):
                if key in flat:
                    raise ConfigError(f"{key} cannot be overridden in a study over collections "
                                      f"({', '.join(self.collections)}): each collection's entry names its "
                                      "data; change the collections section", key=key)

        if "data.collection" in flat:
            raise ConfigError("data.collection is a collection's name, which the study file's collections "
                              "list gives; it cannot be overridden", key="data.collection")

        if "train.select_metric" in flat and self.metric in SELECT_METRICS and flat["train.select_metric"] != self.metric:
            raise ConfigError(_select_metric_differs(flat["train.select_metric"], self.metric),
                              key="train.select_metric")

        # A data key no configuration's source reads would change nothing; over collections, each
        # collection takes the keys its source reads.
        sources = [nc.config.data.source for nc in self.fixed_configs()]
        for key in flat:
            if key.startswith("data.") and (why := read_by_none(sources, key)) is not None:
                raise why

        def over(nc: NamedConfig) -> NamedConfig:
            cfg = TrialConfig.from_flat(flat, base=nc.config)
            return dataclasses.replace(nc, config=dataclasses.replace(cfg, data=only_read(cfg.data))
                                       if self.collections else cfg)
        out = dataclasses.replace(self, defaults=TrialConfig.from_flat(flat, base=self.defaults),
                                  baseline=over(self.baseline), configs=tuple(map(over, self.configs)))
        # The rules across configurations, as the file's own values meet them (_parse): an override of
        # every configuration can make a candidate the baseline, or a teacher's seed a study seed.
        try:
            configs = list(out.configs)
            _check_teacher_seeds(out.defaults, out.baseline, configs, out.search,
                                 [*out.seeds, *(out.confirm.seeds if out.confirm else ())])
            _check_distinct(out.baseline, configs)
            for nc in () if self.collections else out.fixed_configs():  # --set data.source=cranfield
                if ignored := unread(nc.config.data):                     # beside data.conversations
                    raise unread_error(nc.config.data.source, ignored[0])
            if out.search is not None:  # the space's proposals over the new defaults they start from
                _check_combinations(out.search.space, out.defaults)
        except ConfigError as exc:
            given = ", ".join(f"{k}={shown(v)}" for k, v in flat.items())
            given = given if len(given) <= 120 else f"{given[:117]}..."
            raise ConfigError(f"with the overrides {given}: {exc}", key=exc.key) from None
        if self.collections:
            data_keys = sorted(k for k in flat if k.startswith("data."))
            if data_keys:
                _check_distinct_data(out.fixed_configs(), self.collections,
                                     len(out.fixed_configs()) // len(self.collections),
                                     overrides=", ".join(data_keys))
        return out


# data.collection set anywhere but by a collections list (whose entries' names set it)
COLLECTION_KEY_HERE = ("data.collection is a collection's name, which the collections list gives "
                       "(collections: [{name, data}, ...]); drop it here")


def load_spec(path: str | Path) -> StudySpec:
    p = Path(path)
    raw, text, lines = read_yaml(p, "study file")
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: a study file is a mapping with at least name and seeds")
    try:
        return _parse(raw, p, text, lines)
    except ConfigError as exc:
        msg = str(exc)
        key = exc.key
        raise ConfigError(f"{p}{lines.at(key) if key else ''}: {msg}") from None


def _select_metric_differs(select: object, metric: str) -> str:
    """Why a ``train.select_metric`` other than the objective's metric is refused (the file's or an override's)."""
    return (f"train.select_metric={select!r} differs from objective.metric={metric!r}; the study's objective "
            "selects the best-dev checkpoint")


def _fail(key: str, msg: str) -> ConfigError:
    """An error about the study file's ``key`` (a dotted path in the file: configs.ls.curriculum.delta),
    which ``load_spec`` turns into the file's line."""
    return ConfigError(msg, key=key)


def _parse(raw: dict[str, Any], path: Path, text: str, lines: KeyLines) -> StudySpec:
    """The study file, one section at a time (each ``_<section>`` below reads and checks its own
    keys); the cross-section rules (one evaluation set, teacher seeds, distinct configurations)
    follow the sections they relate."""
    _check_top_keys(raw)
    name = _name(raw)
    seeds, schedule = _seeds(raw)
    metric, mode = _objective(raw)
    defaults = _defaults(raw, metric)
    baseline = _baseline(raw, defaults)
    configs = _configs(raw, defaults)
    search = _search(raw.get("search"), defaults, metric, mode)
    if search is not None and "collections" not in raw:  # over collections: with_collections
        _check_space_read(search.space, [defaults.data.source])
    configs, search = _expand_grid(search, configs, defaults)
    for i, nc in enumerate([baseline, *configs]):
        where = "baseline" if i == 0 else f"configs.{i - 1}.set"
        if nc.config.data.collection is not None:  # only the collections list names a collection
            raise _fail(where, COLLECTION_KEY_HERE)
        if metric in SELECT_METRICS and nc.config.train.select_metric != metric:
            raise _fail(f"{where}.train.select_metric", f"{where}: "
                        f"{_select_metric_differs(nc.config.train.select_metric, metric)}")
        if "collections" not in raw and (ignored := unread(nc.config.data)):
            # a data key its source does not read; over collections, with_collections decides
            at = next((p for p in (f"{where}.{ignored[0]}", ignored[0], f"defaults.{ignored[0]}") if p in lines.lines),
                      where)
            raise _fail(at, str(unread_error(nc.config.data.source, ignored[0])))
    _check_one_evaluation_set(baseline, configs, search)
    _check_cascade_objective(metric, baseline, configs, search)
    confirm = _confirm(raw, configs, search, seeds, schedule is not None)
    _check_teacher_seeds(defaults, baseline, configs, search, [*seeds, *(confirm.seeds if confirm else ())])
    _check_distinct(baseline, configs)
    resources = _resources(raw, baseline, configs)
    concurrency = _concurrency(raw)
    failure = _failure(raw)
    storage_path, tracking_uri, description = _storage_path(raw), _tracking_uri(raw), _description(raw)
    smoke = _smoke(raw, defaults)
    if schedule is not None:
        _check_schedule(metric, configs, search, raw.get("early_stopping"))
    early = _early_stopping(raw, metric, mode, baseline, configs, search)
    models = _choice(raw.get("models", "best"), "models", MODEL_LOGGING)
    spec = with_collections(raw, StudySpec(
        name=name, description=description, path=str(path.resolve()), text=text, defaults=defaults,
        baseline=baseline, configs=tuple(configs), search=search, seeds=tuple(seeds), metric=metric,
        mode=mode, concurrency=concurrency, storage_path=storage_path, tracking_uri=tracking_uri,
        smoke=smoke, early_stopping=early, models=models, seed_schedule=schedule, confirm=confirm,
        **resources, **failure))
    if smoke:  # what --smoke will apply, refused now, at its line, for what --smoke would refuse
        try:
            spec.with_overrides(smoke)
        except ConfigError as exc:
            raise _fail(f"smoke.{exc.key}" if exc.key else "smoke", f"smoke: {exc}") from None
    return spec


def _check_cascade_objective(metric: str, baseline: NamedConfig, configs: list[NamedConfig],
                             search: SearchSpec | None) -> None:
    """A cascade objective (cascade_map, cascade_cost) needs a configuration with a cascade: without
    one every configuration's cost is 1 and its cascade MAP its MAP (``TrialOutcome.from_final``),
    so the search would optimise MAP, or nothing, under the cascade's name."""
    named = [("objective.metric", metric)] + [(f"search.objectives.{i}.metric", m)
                                              for i, (m, _) in enumerate(search.objectives if search else ())]
    asked = [(key, m) for key, m in named if m.startswith("cascade_")]
    if not asked:
        return
    enabled = search.space.get("cascade.enabled") if search else None
    if any(nc.config.cascade.enabled for nc in (baseline, *configs)) or (
            enabled is not None and True in enabled.values()):
        return
    key, m = asked[0]
    raise _fail(key if key == "objective.metric" or search is None else "search.objectives",
                f"{key} {m}: no configuration of the study has a cascade (cascade.enabled: true), so there "
                f"is no {m} to optimise; enable the cascade, or optimise map")


def _check_top_keys(raw: dict[str, Any]) -> None:
    for key in raw:
        if key not in TOP_KEYS:
            hint = did_you_mean(key, TOP_KEYS, style="; ", otherwise=f"; valid: {', '.join(TOP_KEYS)}")
            raise _fail(str(key), f"unknown study key {key!r}{hint}")


def _name(raw: dict[str, Any]) -> str:
    """``name``: the MLflow and Ray Tune experiment name; it becomes directories (Tune state, MLflow
    artifacts, the lease), so a name, never a path."""
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise refuse("name", name, "a non-empty string (the MLflow experiment name)")
    if name_problem(name):
        raise _fail("name", f"name: {name_problem(name)} (the MLflow experiment and Ray Tune experiment name)")
    return name


def _seeds(raw: dict[str, Any]) -> tuple[list[int], SeedSchedule | None]:
    """``seeds``: a list of distinct integer seeds, or a seed schedule (``_seed_schedule``)."""
    seeds = raw.get("seeds")
    schedule = None
    if isinstance(seeds, dict):  # a seed schedule: {start, step, max, first}
        schedule, seeds = _seed_schedule(seeds)
    if not isinstance(seeds, list) or not seeds:
        raise _fail("seeds", "seeds must be a non-empty list of integers, e.g. [1, 2, 3], or a seed "
                    "schedule {start: 4, step: 2, max: 12}")
    if len(seeds) > MAX_SEEDS:
        raise refuse("seeds", seeds, f"a list of at most {MAX_SEEDS} seeds", why=f"this one has {len(seeds)}")
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise refuse("seeds", seeds, "a list of integers")
    for i, s in enumerate(seeds):
        if not 0 <= s <= MAX_SEED:
            raise refuse(f"seeds.{i}", s, f"a seed, an integer in [0, {MAX_SEED}]")
    counts = collections.Counter(seeds)
    dup = sorted(s for s, n in counts.items() if n > 1)
    if dup:
        raise refuse("seeds", seeds, "a list of distinct integers", why=f"duplicated: {shown(dup)}")
    return seeds, schedule


def _objective(raw: dict[str, Any]) -> tuple[str, str]:
    """``objective: {metric, mode}``: the dev metric the searcher optimises and its direction."""
    objective = _mapping(raw, "objective", ("metric", "mode"))
    metric = _choice(objective.get("metric", "map"), "objective.metric", METRICS)
    mode = _choice(objective.get("mode", "max"), "objective.mode", ("max", "min"))
    return metric, mode


def _defaults(raw: dict[str, Any], metric: str) -> TrialConfig:
    """The study's defaults from its sections (data, model, train, ...) and its ``defaults:``
    mapping; an error names the key where the file sets it (curriculum.delta, or
    defaults.curriculum.delta). The objective's metric selects every config's best-dev checkpoint."""
    flat: dict[str, Any] = {}
    origin: dict[str, str] = {}  # flat key -> its path in the study file (for the line number)
    for section in SECTION_KEYS:
        if section in raw:
            if not isinstance(raw[section], dict):
                raise refuse(section, raw[section], f"a mapping of {section}.* keys")
            part = _flat(raw[section], "", f"{section}.")
            flat.update(part)
            origin.update({k: k for k in part})
    defaults_raw = _or_empty(raw.get("defaults"), {})
    if not isinstance(defaults_raw, dict):
        raise refuse("defaults", defaults_raw, "a mapping of config keys")
    part = _flat(defaults_raw, "defaults")
    for key in part.keys() & flat.keys():  # a section and defaults: each would silently beat the other
        raise _fail(f"defaults.{key}", f"{key} is set in both the {key.split('.')[0]} section and "
                    "defaults; keep one")
    flat.update(part)
    origin.update({k: f"defaults.{k}" for k in part})
    if "data.collection" in flat:
        raise _fail(origin["data.collection"], COLLECTION_KEY_HERE)
    if "train.seed" in flat:
        raise _fail(origin["train.seed"], "train.seed is set per trial by the study's seeds; drop it here")
    if metric in SELECT_METRICS:
        # The checkpoint a trial reports is the best on the study's objective (every config alike).
        if flat.get("train.select_metric", metric) != metric:
            raise _fail(origin["train.select_metric"], _select_metric_differs(flat["train.select_metric"], metric))
        flat["train.select_metric"] = metric
    try:
        return TrialConfig.from_flat(flat)
    except ConfigError as exc:
        key = exc.key or ""
        where = origin.get(key)
        if where is None:
            where = next((p for k, p in origin.items() if k.split(".")[0] == key.split(".")[0]), "defaults")
        prefix = "defaults: " if where.startswith("defaults") else ""
        raise _fail(where, f"{prefix}{exc}") from None


def _baseline(raw: dict[str, Any], defaults: TrialConfig) -> NamedConfig:
    """``baseline``: overrides of the defaults that make the baseline (absent or {}: the defaults)."""
    base_raw = _or_empty(raw.get("baseline"), {})
    if not isinstance(base_raw, dict):
        raise refuse("baseline", base_raw, "a mapping of config keys (may be empty)")
    return NamedConfig(name="baseline", role="baseline", config=_config(_flat(base_raw, "baseline"), "baseline", defaults))


def _configs(raw: dict[str, Any], defaults: TrialConfig) -> list[NamedConfig]:
    """``configs``: named candidates, each ``{name, set}`` over the defaults; names are distinct."""
    configs: list[NamedConfig] = []
    names = {"baseline"}
    listed = _or_empty(raw.get("configs"), [])
    if not isinstance(listed, list):
        raise refuse("configs", listed, "a list of {name, set} mappings")
    if isinstance(listed, list) and len(listed) > MAX_CONFIGS:
        raise refuse("configs", listed, f"a list of at most {MAX_CONFIGS} configurations",
                     why=f"this one has {len(listed)}")
    for i, item in enumerate(listed):
        if not isinstance(item, dict) or "name" not in item:
            raise _fail(f"configs.{i}", f"configs[{i}] must be a mapping with name and set")
        unknown = set(item) - {"name", "set", "label"}
        if unknown:
            raise _fail(f"configs.{i}", f"configs[{i}]: unknown keys {sorted(unknown)}; valid: name, set, label")
        label = item.get("label", "")
        # one line: no line break of any kind (\r, \u2028 ... end a line too: str.splitlines)
        if not isinstance(label, str) or (label and (not label.strip() or label.splitlines() != [label])):
            raise _fail(f"configs.{i}.label", f"configs[{i}].label must be a one-line text (how tables "
                        f"name the configuration), got {label!r}")
        cname = item["name"]
        if isinstance(cname, int | float) and not isinstance(cname, bool):  # name: 2020
            cname = str(cname)
        if name_problem(cname):
            raise _fail(f"configs.{i}.name", f"configs[{i}].name: {name_problem(cname)}")
        if cname.casefold() in names:  # names become file names (exports, plots): unique without case
            raise _fail(f"configs.{i}", f"configs[{i}]: duplicate configuration name {cname!r} (names "
                        "differ by more than case, and baseline is the baseline's)")
        names.add(cname.casefold())
        changes = _or_empty(item.get("set"), {})
        if not isinstance(changes, dict):
            raise _fail(f"configs.{i}.set", f"configs[{i}].set must be a mapping of config keys, got {shown(changes)}")
        cfg = _config(_flat(changes, f"configs.{i}.set"), f"configs.{i}.set", defaults)
        configs.append(NamedConfig(name=cname, role="candidate", config=cfg, label=label.strip()))
    # tables name a configuration by its label (else its name): two alike would be one column twice
    shown_as = {"baseline": "the baseline"}
    for i, nc in enumerate(configs):
        text = nc.label or nc.name
        if text in shown_as:
            raise _fail(f"configs.{i}.label" if nc.label else f"configs.{i}",
                        f"configs[{i}] would be shown as {text!r}, as {shown_as[text]} is; give it another label")
        shown_as[text] = f"configuration {nc.name!r}"
    return configs


def _expand_grid(search: SearchSpec | None, configs: list[NamedConfig],
                 defaults: TrialConfig) -> tuple[list[NamedConfig], SearchSpec | None]:
    """An exhaustive grid is no search: its points join the listed configurations (grid-0, ...)."""
    if search is None or SEARCHERS.get(search.searcher).sampler is not None:
        return configs, search
    from harness.study.space import enumerate_grid, grid_bound

    # Counted before a point is built: the product of each key's values (conditions aside).
    size = grid_bound(search.space.values())
    if len(configs) + size > MAX_CONFIGS:
        raise refuse("search.space", size, f"a grid of at most {MAX_CONFIGS - len(configs)} configurations "
                     f"({MAX_CONFIGS} per study, {len(configs)} listed)", why=f"its keys' values combine into up "
                     f"to {size} points: give fewer values, or use a searcher (tpe, random)")
    grid = [NamedConfig(name=f"grid-{j}", role="candidate", config=_config(point, "search.space", defaults))
            for j, point in enumerate(enumerate_grid(search.space, defaults.to_flat()))]
    points = {nc.name for nc in grid}
    for i, nc in enumerate(configs):
        if nc.name.casefold() in points:
            raise _fail(f"configs.{i}.name", f"configs[{i}]: {nc.name!r} is the name of a point of the "
                        f"grid (grid-0 to grid-{len(grid) - 1}); give it another")
    return [*configs, *grid], None


def _check_distinct(baseline: NamedConfig, configs: list[NamedConfig]) -> None:
    """No two configurations (the baseline included) are the same configuration under two names."""
    ids: dict[str, str] = {}
    for nc in (baseline, *configs):
        other = ids.get(nc.config.config_id())
        if other:
            raise _fail("configs", f"configurations {other!r} and {nc.name!r} are identical")
        ids[nc.config.config_id()] = nc.name


def _resources(raw: dict[str, Any], baseline: NamedConfig, configs: list[NamedConfig]) -> dict[str, Any]:
    """``resources: {cpus, gpus, seeds_per_trial, fuse}``: per trial; as StudySpec's fields."""
    res = _mapping(raw, "resources", ("cpus", "gpus", "seeds_per_trial", "fuse"))
    cpus = _number(res.get("cpus", 1), "resources.cpus", f"a number > 0 ({RAY_RESOURCE_STEP} at least: "
                   "Ray's smallest fraction)", lambda v: v >= RAY_RESOURCE_STEP)
    gpus = _number(res.get("gpus", 0), "resources.gpus", "a number in [0, 8] (a fraction shares a GPU; "
                   f"{RAY_RESOURCE_STEP} at least: Ray's smallest fraction)",
                   lambda v: v == 0 or RAY_RESOURCE_STEP <= v <= 8)
    per_trial = int(_number(res.get("seeds_per_trial", 1), "resources.seeds_per_trial",
                            "an integer >= 1 (seeds of a configuration trained in one trial)",
                            lambda v: v >= 1, integer=True))
    fuse = res.get("fuse", "auto")
    if isinstance(fuse, str) and fuse.lower() in ("true", "false"):  # quoted, as train.bf16 takes it
        fuse = as_bool("resources.fuse", fuse)
    if fuse != "auto" and not isinstance(fuse, bool):
        raise refuse("resources.fuse", fuse, "auto, true or false (fuse a trial's seeds into one model: auto "
                     "where it pays)")
    if fuse is True:
        for nc in (baseline, *configs):
            if nc.config.cascade.enabled:
                raise _fail("resources.fuse", f"resources.fuse: true, but configuration {nc.name!r} is a cascade "
                            "ranker, whose seeds cannot train fused: use fuse: auto (it trains them one after "
                            "another)")
    return {"cpus": cpus, "gpus": gpus, "seeds_per_trial": per_trial, "fuse": None if fuse == "auto" else fuse}


def _concurrency(raw: dict[str, Any]) -> int:
    """``concurrency``: trials Ray Tune runs at once."""
    return int(_number(raw.get("concurrency", 1), "concurrency", "an integer >= 1", lambda v: v >= 1, integer=True))


def _failure(raw: dict[str, Any]) -> dict[str, Any]:
    """``failure: {max_retries, checkpoint_every_s}``: as StudySpec's fields."""
    failure = _mapping(raw, "failure", ("max_retries", "checkpoint_every_s"))
    retries = int(_number(failure.get("max_retries", 1), "failure.max_retries", "an integer >= 0",
                          lambda v: v >= 0, integer=True))
    every = float(_number(failure.get("checkpoint_every_s", 60), "failure.checkpoint_every_s",
                          "a number of seconds >= 0 (0: at every evaluation)", lambda v: v >= 0))
    return {"max_retries": retries, "checkpoint_every_s": every}


def _storage_path(raw: dict[str, Any]) -> str:
    """``storage_path``: Ray Tune's experiment storage, a local path (made absolute) or a URI."""
    storage = raw.get("storage_path", "runs")
    if not isinstance(storage, str) or not storage.strip():
        raise refuse("storage_path", storage, "a path or a URI (s3://...)")
    text_value("storage_path", storage)
    if "://" not in storage:
        return str(Path(storage).resolve())
    if not _URI.fullmatch(storage) or not _SCHEME.match(storage):
        raise _fail("storage_path", f"storage_path {storage!r} is not a URI (scheme://...): percent-encode a space "
                    "(%20), '%' (%25), non-ASCII letters and the other characters a URI cannot hold, "
                    "or give a local path")
    return storage


def _tracking_uri(raw: dict[str, Any]) -> str | None:
    """``tracking_uri``: the MLflow store (absent: the CLI's or the default)."""
    tracking_uri = raw.get("tracking_uri")
    if tracking_uri is not None and (not isinstance(tracking_uri, str) or not tracking_uri.strip()):
        raise refuse("tracking_uri", tracking_uri, "a URI (http://HOST:5000, sqlite:////abs/path)")
    return None if tracking_uri is None else text_value("tracking_uri", tracking_uri)


def _description(raw: dict[str, Any]) -> str:
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise refuse("description", description, "a string")
    return description


def _smoke(raw: dict[str, Any], defaults: TrialConfig) -> dict[str, Any]:
    """``smoke``: flat overrides for ``--smoke`` runs, checked against the defaults now."""
    smoke = _or_empty(raw.get("smoke"), {})
    if not isinstance(smoke, dict):
        raise refuse("smoke", smoke, "a mapping of config keys")
    smoke_flat = _flat(smoke, "smoke")
    _config(smoke_flat, "smoke", defaults)
    return smoke_flat


# A grid this large is read for its best configuration (and its best of so many null ones would
# look better by chance: docs/statistics.md, Confirmation), so it confirms its pick by default.
GRID_CONFIRM_MIN = 10


def _confirm(raw: dict[str, Any], configs: list[NamedConfig], search: SearchSpec | None, seeds: list[int],
             scheduled: bool) -> ConfirmSpec | None:
    """``confirm: {top: k, seeds: S}`` (``true``: top 1; ``false``: none; absent: top 1 with a
    searcher or a grid of at least ``GRID_CONFIRM_MIN`` candidates, none otherwise). The fresh seeds
    are the S (default: as many as the study's) integers after the largest study seed: disjoint from
    every seed the earlier phases trained."""
    picks = search is not None or len(configs) >= GRID_CONFIRM_MIN
    value = raw.get("confirm")
    if value is None:  # absent, or `confirm:` with nothing after it: the default
        value = picks and not scheduled
    if isinstance(value, str) and value.lower() in ("true", "false"):  # quoted, as train.bf16 takes it
        value = as_bool("confirm", value)
    if value is False or value is None:
        return None
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise refuse("confirm", value, "a mapping {top: k, seeds: S}, true or false")
    for k in value:
        if k not in ("top", "seeds"):
            hint = did_you_mean(str(k), ("top", "seeds"), n=2, style="; ", otherwise="; valid: top, seeds")
            raise _fail(f"confirm.{k}", f"confirm: unknown key {k!r}{hint}")
    if scheduled:
        raise _fail("confirm", "confirm retrains a pick with fresh seeds; a study with a seed schedule picks "
                    "nothing (it settles every listed comparison): drop confirm")
    candidates = len(configs) + (search.num_configs if search is not None else 0)
    if candidates == 0:
        raise _fail("confirm", "confirm retrains the best candidates, and this study has none (only the "
                    "baseline); add configs or a search, or drop confirm")
    top = value.get("top", 1)
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= candidates:
        raise refuse("confirm.top", top, f"an integer in [1, {candidates}] (the study's candidate configurations)")
    n = value.get("seeds", len(seeds))
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SEEDS:
        raise refuse("confirm.seeds", n, f"an integer in [1, {MAX_SEEDS}] (how many fresh seeds)")
    first = max(seeds) + 1
    if first + n - 1 > MAX_SEED:
        raise _fail("confirm.seeds", f"confirm.seeds: the fresh seeds {first}..{first + n - 1} go past "
                    f"{MAX_SEED}, the largest seed; use smaller study seeds")
    return ConfirmSpec(top=top, seeds=tuple(range(first, first + n)))


def _seed_schedule(raw: dict[str, Any]) -> tuple[SeedSchedule, list[int]]:
    """``seeds: {start, step, max, first}``: the schedule and every seed it may train, first (default
    1) to first + max - 1, in the order the rounds take them."""
    valid = ("start", "step", "max", "first")
    for k in raw:
        if k not in valid:
            hint = did_you_mean(str(k), valid, n=2, style="; ", otherwise=f"; valid: {', '.join(valid)}")
            raise _fail(f"seeds.{k}", f"seeds: unknown key {k!r}{hint}")
    for k in ("start", "step", "max"):
        if k not in raw:
            raise _fail("seeds", f"seeds: a seed schedule needs start, step and max; {k} is missing")
        if isinstance(raw[k], int) and abs(raw[k]) > MAX_INT:
            raise refuse(f"seeds.{k}", raw[k], f"an integer of at most {MAX_INT} in size")
    schedule = SeedSchedule(raw["start"], raw["step"], raw["max"])
    # Bounded before the seed list and the rounds are built from it.
    if schedule.max > MAX_SEEDS:
        raise refuse("seeds.max", schedule.max, f"at most {MAX_SEEDS}",
                     why="every configuration may train max seeds; a larger study is several studies")
    rounds = 1 + -(-(schedule.max - schedule.start) // schedule.step)
    if rounds > MAX_ROUNDS:
        raise refuse("seeds.step", schedule.step, f"large enough for at most {MAX_ROUNDS} rounds",
                     why=f"start {schedule.start}, step {schedule.step}, max {schedule.max} make {rounds}")
    first = raw.get("first", 1)
    if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first <= MAX_SEED - schedule.max + 1:
        raise refuse("seeds.first", first, f"an integer in [0, {MAX_SEED - schedule.max + 1}] (the seeds are "
                     "first .. first + max - 1)")
    return schedule, list(range(first, first + schedule.max))


def _check_schedule(metric: str, configs: list[NamedConfig], search: SearchSpec | None, early: Any) -> None:
    """What a seed schedule needs: candidates listed in the file (no searcher), no early stopping, and
    an objective metric with per-query test values (the rule decides on it)."""
    if search is not None:
        raise _fail("seeds", "seeds: a seed schedule adds seeds to the listed configurations; a study "
                    "with a searcher lists its seeds ([1, 2, 3])")
    if early is not None:
        raise _fail("early_stopping", "early_stopping stops configurations within a round of seeds; a "
                    "study with a seed schedule stops them between rounds by its sequential rule: drop one")
    if not configs:
        raise _fail("seeds", "seeds: a seed schedule settles comparisons with the baseline, and this study "
                    "has no candidate configuration; list its seeds instead")
    if metric not in SELECT_METRICS:
        raise _fail("objective.metric", f"objective.metric {metric!r} has no per-query test values, which the "
                    f"seed schedule's rule tests; use one of {', '.join(SELECT_METRICS)}")


def _where(nc: NamedConfig, configs: tuple[NamedConfig, ...] | list[NamedConfig]) -> str:
    """The study-file path of a configuration's overrides (for line numbers)."""
    if nc.role == "baseline":
        return "baseline"
    named = [c for c in configs if c.role != "baseline"]
    i = next((j for j, c in enumerate(named) if c is nc), None)
    return f"configs.{i}.set" if i is not None and not nc.name.startswith("grid-") else "search.space"


def _check_one_evaluation_set(baseline: NamedConfig, configs: list[NamedConfig],
                              search: SearchSpec | None) -> None:
    """Dev and test candidates are fixed per study (docs/architecture.md, "Evaluation set"): every data key
    but the training-only ones must be the baseline's in every configuration and the search space."""
    ref = baseline.config.data
    for nc in configs:
        for f in dataclasses.fields(ref):
            if f.name in TRAINING_ONLY_DATA_KEYS:
                continue
            mine, theirs = getattr(nc.config.data, f.name), getattr(ref, f.name)
            if mine != theirs:
                key = f"data.{f.name}"
                raise _fail(f"{_where(nc, configs)}.{key}",
                            f"{key}: the evaluation set is fixed per study, but configuration {nc.name!r} "
                            f"sets {mine!r} where the baseline has {theirs!r}; vary training-only knobs "
                            f"instead (train.sampler, train.negatives_per_positive, data.max_train_queries)")
    for key in (search.space if search is not None else {}):
        if key.startswith("data.") and key[5:] not in TRAINING_ONLY_DATA_KEYS:
            raise _fail(f"search.space.{key}", f"search.space.{key}: the evaluation set is fixed per study; "
                        f"a search may vary training-only data keys only "
                        f"({', '.join('data.' + k for k in TRAINING_ONLY_DATA_KEYS)}) or train.sampler")


def _check_teacher_seeds(defaults: TrialConfig, baseline: NamedConfig, configs: list[NamedConfig],
                         search: SearchSpec | None, seeds: list[int]) -> None:
    """A teacher (bert_pred, bert_loss) trained with a study seed would share its init and its
    negatives with that seed's student."""
    from harness.training.teacher import TEACHER_NAMES, teacher_shares_seed

    # Where a configuration sits in the file is looked up for the one refused, not for every one.
    checks: list[tuple[str, Callable[[], str], TrialConfig]] = [
        (nc.name, functools.partial(_where, nc, configs), nc.config) for nc in (baseline, *configs)
        if teacher_shares_seed(nc.config, seeds)]
    scoring = search.space.get("curriculum.scoring") if search is not None else None
    if scoring is not None and set(map(str, scoring.values())) & set(TEACHER_NAMES):
        checks.append(("search", lambda: "search.space.curriculum.scoring", defaults))
    study_seeds = set(seeds)
    teacher = search.space.get("curriculum.teacher_seed") if search is not None else None
    if teacher is not None:  # a proposal's own teacher seed: none may be a study seed
        clash = sorted(s for s in study_seeds if teacher.args[0] <= s <= teacher.args[1]) \
            if teacher.kind == "int" else [v for v in teacher.values() if v in study_seeds]
        if clash:
            raise _fail("search.space.curriculum.teacher_seed",
                        f"search.space: curriculum.teacher_seed can be {clash[0]}, a study seed (seeds: "
                        f"{shown(seeds)}): that seed's student would share its init and negatives with its "
                        "teacher; keep the teacher seeds outside the study's seeds")
    for name, where_of, cfg in checks:
        if cfg.curriculum.teacher_seed in study_seeds:
            where = where_of()
            raise _fail(f"{where}.curriculum.teacher_seed",
                        f"curriculum.teacher_seed {cfg.curriculum.teacher_seed} is also a study seed "
                        f"(seeds: {shown(seeds)}; configuration {name!r}): that seed's student would share its "
                        f"init and negatives with its teacher; choose a teacher seed outside the study's seeds")


def _or_empty(value: Any, empty: Any) -> Any:
    """A section's value, ``empty`` where it is absent or null (``baseline:`` with nothing after it);
    any other value as it is, for the section's own check to refuse (``false`` or ``0`` is no
    mapping, not an empty one)."""
    return empty if value is None else value


def _flat(mapping: dict[str, Any], where: str, prefix: str = "") -> dict[str, Any]:
    """``config.flatten`` of the file's mapping at ``where`` (a dotted path; "" for the top), a key
    given both dotted and nested refused at its line."""
    try:
        return flatten(mapping, prefix)
    except ConfigError as exc:
        at = f"{where}.{exc.key}" if where else str(exc.key)
        raise _fail(at, f"{where}: {exc}" if where else str(exc)) from None


def _config(flat: dict[str, Any], where: str, base: TrialConfig | None = None) -> TrialConfig:
    if "train.seed" in flat:
        raise _fail(f"{where}.train.seed", f"{where}: train.seed is set by the study's seeds, not per config")
    try:
        return TrialConfig.from_flat(flat, base=base)
    except ConfigError as exc:
        raise _fail(f"{where}.{exc.key}" if exc.key else where, f"{where}: {exc}") from None


def _mapping(raw: dict[str, Any], key: str, valid: tuple[str, ...]) -> dict[str, Any]:
    """A study-level mapping (objective, resources, failure); absent or null means {}."""
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise refuse(key, value, f"a mapping with {', '.join(valid)}")
    for k in value:
        if k not in valid:
            hint = did_you_mean(k, valid, n=2, style="; ", otherwise=f"; valid: {', '.join(valid)}")
            raise _fail(f"{key}.{k}", f"{key}: unknown key {k!r}{hint}")
    return value


def _choice(value: Any, key: str, valid: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in valid:
        raise refuse(key, value, f"one of {', '.join(valid)}")
    return value


# A number with an exponent that YAML 1.1 (PyYAML) reads as text: 1e-3, 1.0e3 (its floats need a dot
# and a signed exponent: 1.0e-3, 1.0e+3)
_EXPONENT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+")


def _number(value: Any, key: str, rule: str, ok: Callable[[float], bool], *, integer: bool = False) -> float:
    """A study-level number: the right type (YAML's, never a quoted string) and in range, else
    "<key> must be <rule>, got <value>". A float written with an exponent YAML reads as text
    (``_EXPONENT``) is the number it spells, as the config keys read it."""
    if not integer and isinstance(value, str) and _EXPONENT.fullmatch(value):
        value = float(value)
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not _finite(value) or not ok(value):
        raise refuse(key, value, rule)
    if abs(value) > MAX_INT:  # a typo, and beyond what any count or loop takes (docs: Limits)
        raise refuse(key, value, f"{rule}, of at most {MAX_INT} in size")
    return float(value) + 0.0  # -0.0 is 0.0, as in the config keys


def _finite(value: float) -> bool:
    """A finite number with a float (an integer of 400 digits has none: math.isfinite would raise)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _search(raw: Any, defaults: TrialConfig, metric: str, mode: str) -> SearchSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise refuse("search", raw, "a mapping with searcher, num_configs and space")
    unknown = set(raw) - {"searcher", "num_configs", "space", "objectives", "objective_collection"}
    if unknown:
        raise _fail("search", f"search: unknown keys {sorted(unknown)}; "
                    "valid: searcher, num_configs, space, objectives, objective_collection")
    searcher = str(raw.get("searcher", "tpe"))
    if searcher not in SEARCHERS:
        hint = did_you_mean(searcher, SEARCHERS, n=2)
        raise _fail("search.searcher", f"search.searcher: unknown {searcher!r}{hint}; valid: {', '.join(SEARCHERS)}")
    space_raw = raw.get("space")
    if not isinstance(space_raw, dict) or not space_raw:
        raise _fail("search.space", "search.space must map config keys to distributions")
    valid = set(TrialConfig.keys())
    space: dict[str, Param] = {}
    for key, spec in space_raw.items():
        if key not in valid:
            raise _fail(f"search.space.{key}", f"search.space: {unknown_key_message(key)}")
        if key == "train.seed":
            raise _fail("search.space", "search.space: train.seed comes from the study's seeds")
        if key == "train.select_metric" and metric in SELECT_METRICS:
            raise _fail(f"search.space.{key}", f"search.space: train.select_metric is objective.metric "
                        f"({metric!r}) in every configuration; the study's objective selects the best-dev checkpoint")
        space[key] = parse_param(key, spec)
    for key, p in space.items():
        for cond in p.when:
            if cond not in space and cond not in valid:
                raise _fail(f"search.space.{key}", f"search.space.{key}.when: unknown key {cond!r}")
    ordered(space)  # conditions that form a cycle are refused here, not in the first trial
    # Every value a choice can take must itself be valid for its key.
    for key, p in space.items():
        _range_fits(key, p)
        # An int range is valid where its bounds are (every key's rule is an interval): checked
        # without listing what lies between.
        seen: dict[str, Any] = {}
        for v in (p.args if p.kind == "int" else p.values()):
            try:
                value = TrialConfig.from_flat({key: v}, base=defaults).to_flat()[key]
            except ConfigError as exc:
                raise _fail(f"search.space.{key}", f"search.space: {exc}") from None
            # One value listed twice (or two ways: 1 and '1' steps) is drawn twice as often.
            if p.kind == "choice" and repr(value) in seen:
                raise _fail(f"search.space.{key}", f"search.space.{key}.choice lists one value twice "
                            f"({shown(seen[repr(value)])} and {shown(v)}); list each once")
            seen[repr(value)] = v
    _check_conditions(space, defaults)
    _check_combinations(space, defaults)
    objectives = _objectives(raw.get("objectives")) or ((metric, mode),)
    kind = SEARCHERS.get(searcher)
    if kind.objectives == 2 and len(objectives) != 2:
        raise _fail("search.searcher", f"search.searcher {searcher} optimises two objectives; give "
                    "search.objectives with two {metric, mode} entries (e.g. map/max and cascade_cost/min)")
    if kind.objectives == 1 and kind.sampler and len(objectives) != 1:
        two = ", ".join(n for n, k in SEARCHERS.items() if k.objectives == 2)
        raise _fail("search.searcher", f"search.searcher {searcher} handles one objective; use {two} for two")
    if kind.discrete_only:
        bad = [k for k, p in space.items() if not p.discrete]
        if bad:
            raise _fail("search.searcher", f"search.searcher grid needs discrete values (choice, fixed, "
                        f"int); continuous keys: {', '.join(bad)}")
    n = raw.get("num_configs", 8 if kind.sampler else 0)
    if kind.sampler and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CONFIGS):
        raise refuse("search.num_configs", n, f"an integer in [1, {MAX_CONFIGS}]")
    if not kind.sampler and n is not None and (isinstance(n, bool) or not isinstance(n, int)):
        raise refuse("search.num_configs", n, "an integer (a grid has as many configurations as points)")
    target = raw.get("objective_collection")
    if target is not None and not isinstance(target, str):
        raise refuse("search.objective_collection", target, "the name of one of the study's collections")
    return SearchSpec(searcher=searcher, num_configs=int(n or 0), space=space, objectives=objectives)


def _check_conditions(space: dict[str, Param], defaults: TrialConfig) -> None:
    """A ``when`` value its key never takes leaves the conditional key never suggested (a typo such
    as ``root_N``, or a default the space does not change): refused, naming what the key takes.
    A key drawn from a continuous range is left out (its draws are not listed)."""
    flat = defaults.to_flat()
    for key, p in space.items():
        for cond, wanted in p.when.items():
            other = space.get(cond)
            if other is None:
                takes, where = [flat.get(cond)], "the space does not draw it, and its default is"
            elif other.kind in ("choice", "fixed"):
                takes, where = other.values(), "the space draws it from"
            elif other.kind == "int":
                lo, hi = (int(b) for b in other.args)
                if any(_whole_in(v, lo, hi) for v in wanted):
                    continue
                takes, where = [f"{lo}..{hi}"], "the space draws it from"
            else:
                continue
            if not any(v in takes for v in wanted):
                one = shown(wanted[0]) if len(wanted) == 1 else f"one of {shown(list(wanted))}"
                raise _fail(f"search.space.{key}", f"search.space.{key}.when: {cond} is never {one}: "
                            f"{where} {', '.join(map(str, takes))}, so {key} would never be suggested")


def _whole_in(value: Any, lo: int, hi: int) -> bool:
    """Whether an int distribution over [lo, hi] can draw ``value`` (a whole number in range)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return False
    return lo <= value <= hi


def _check_combinations(space: dict[str, Param], defaults: TrialConfig) -> None:
    """The rules between keys (smoothing needs a pointwise loss, ...) over every combination of the
    space's listed values (choice, fixed) that its conditions allow, where they are at most
    MAX_CONFIGS: a proposal breaking one failed inside the running searcher. A range (int,
    uniform, loguniform) takes its two ends here: the rules between keys are bounds (curriculum.T
    at most train.steps, a switch before T), which a proposal breaks first at a corner (T's
    largest with the fewest steps). Keys whose condition reads a key drawn from a range are left out
    (their activity is not known here). ``StudySpec.with_overrides`` checks again over the
    overridden defaults (a --set train.loss=pairwise meets a space's LS)."""
    from harness.study.space import enumerate_grid, grid_bound

    drawn = {k for k, p in space.items() if p.kind not in ("choice", "fixed")}
    # each key's listed values, or a range's two ends (its args: an int range is never listed,
    # whatever its size)
    points = {k: p if k not in drawn else Param(key=k, kind="choice", args=tuple(dict.fromkeys(p.args[:2])),
                                                when=p.when)
              for k, p in space.items() if not set(p.when) & drawn}
    if not points or grid_bound(points.values()) > MAX_CONFIGS:
        return
    for point in enumerate_grid(points, defaults.to_flat()):
        try:
            TrialConfig.from_flat(point, base=defaults)
        except ConfigError as exc:
            given = ", ".join(f"{k}={shown(v)}" for k, v in point.items())
            ranges = [k for k in point if k in drawn]
            how = (f"narrow the range{'s' if len(ranges) > 1 else ''} of {', '.join(ranges)} or exclude it "
                   "with a condition (when:)" if ranges else "exclude it with a condition (when:)")
            raise _fail("search.space", f"search.space: the proposal {given} is no configuration: {exc}; "
                        f"{how}") from None


def _objectives(raw: Any) -> tuple[tuple[str, str], ...]:
    """``search.objectives``: a list of ``{metric, mode}`` (mode max by default); empty: none."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise refuse("search.objectives", raw, "a list of {metric, mode} entries")
    out = []
    for i, entry in enumerate(raw):
        where = f"search.objectives.{i}"
        if not isinstance(entry, dict) or "metric" not in entry or set(entry) - {"metric", "mode"}:
            raise refuse(where, entry, "a mapping {metric, mode} (mode: max or min, default max)")
        m, md = entry["metric"], entry.get("mode", "max")
        if not isinstance(m, str) or m not in METRICS or not isinstance(md, str) or md not in ("max", "min"):
            raise _fail(where, f"{where}: bad objective {m!r}/{md!r}; "
                        f"metrics: {', '.join(METRICS)}; modes: max, min")
        out.append((m, md))
    return tuple(out)


def _range_fits(key: str, p: Param) -> None:
    """A continuous range (uniform, loguniform) draws fractional numbers: refused for a key that
    takes integers or text, and for a schedule key (``Steps``) past 1, where between two step
    counts it would draw 1.5 steps; the bounds alone would pass the check below."""
    if p.kind not in ("uniform", "loguniform"):
        return
    hint = TrialConfig.key_type(key)
    kinds = {t for t in (get_args(hint) or (hint,)) if t is not type(None)}
    if len(kinds) == 1 and get_args(next(iter(kinds))):  # tuple[float, ...]: one value for all
        kinds = {t for t in get_args(next(iter(kinds))) if t is not Ellipsis}
    where = f"search.space.{key}"
    if float not in kinds:
        use = "{int: [low, high]}" if int in kinds else "{choice: [...]}"
        raise _fail(where, f"{where}: {p.kind} draws fractional numbers, and {key} takes "
                    f"{'integers' if int in kinds else 'no number'}; use {use}")
    if int in kinds and max(float(b) for b in p.args) > 1:
        raise _fail(where, f"{where}: {p.kind} draws fractions of train.steps, so its bounds lie in "
                    f"(0, 1], got {list(p.args)}; for step counts use {{int: [low, high]}}")


def _early_stopping(raw: dict[str, Any], metric: str, mode: str, baseline: NamedConfig,
                    configs: list[NamedConfig], search: SearchSpec | None) -> EarlyStopSettings | None:
    """``early_stopping: {rungs, reduction_factor, metric}`` (harness.study.early_stop); absent: off."""
    if raw.get("early_stopping") is None:
        return None
    es = _mapping(raw, "early_stopping", ("rungs", "reduction_factor", "metric"))
    eta = _number(es.get("reduction_factor", 2), "early_stopping.reduction_factor", "a number >= 2",
                  lambda v: v >= 2)
    es_metric = es.get("metric", metric if metric in SELECT_METRICS else None)
    if es_metric is None:
        raise _fail("early_stopping.metric", f"early_stopping.metric: objective.metric {metric!r} exists only "
                    f"after training; name a dev metric ({', '.join(SELECT_METRICS)})")
    es_metric = _choice(es_metric, "early_stopping.metric", SELECT_METRICS)
    if search is not None and es_metric != metric:
        raise _fail("early_stopping.metric", f"early_stopping.metric {es_metric!r} differs from objective.metric "
                    f"{metric!r}; with a searcher a stopped configuration reports its {metric} at the rung")
    if search is not None and len(search.objectives) > 1:
        raise _fail("early_stopping", "early_stopping works with one objective; search.objectives has "
                    f"{len(search.objectives)}")
    n_configs = 1 + len(configs) + (search.num_configs if search is not None else 0)
    if n_configs < 2:
        raise _fail("early_stopping", "early_stopping compares configurations, but this study has a single "
                    "configuration (the baseline); add configs or a search, or drop early_stopping")
    rungs = es.get("rungs", [0.25, 0.5])
    if not isinstance(rungs, list) or not rungs:
        raise refuse("early_stopping.rungs", rungs, "a non-empty list of fractions of train.steps in (0, 1) or "
                     "step counts")
    for r in rungs:
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not _finite(r) or r <= 0 \
                or (isinstance(r, float) and r >= 1 and not r.is_integer()):
            raise _fail("early_stopping.rungs", f"early_stopping.rungs: {shown(r)} is neither a fraction of "
                        "train.steps in (0, 1) nor a whole step count")
    if sorted(rungs) != rungs or len(set(rungs)) != len(rungs):
        raise _fail("early_stopping.rungs", f"early_stopping.rungs must increase, got {rungs}")
    settings = EarlyStopSettings(rungs=tuple(float(r) if 0 < r < 1 else float(int(r)) for r in rungs),
                                 reduction_factor=eta, metric=es_metric, mode=mode if es_metric == metric else "max")
    for nc in (baseline, *configs):
        steps, every = nc.config.train.steps, nc.config.train.eval_every
        at = [rung_step(r, steps) for r in settings.rungs]
        if any(b <= a for a, b in itertools.pairwise(at)):  # [0.5, 20] of 100 steps: 50, 20
            raise _fail("early_stopping.rungs", f"early_stopping.rungs must increase as steps, got {rungs}: "
                        f"steps {at} in configuration {nc.name!r} (train.steps={steps})")
        for r in settings.rungs:
            if not rung_steps(dataclasses.replace(settings, rungs=(r,)), steps, every):
                raise _fail("early_stopping.rungs", f"early_stopping.rungs: rung {r:g} (step "
                            f"{rung_step(r, steps)}) is beyond the last dev evaluation before the end of "
                            f"configuration {nc.name!r} (train.steps={steps}, train.eval_every={every}); "
                            "a rung must be read before the last step")
    return settings


def _check_shared_data_read(raw: dict[str, Any], spec: StudySpec, sources: Sequence[str]) -> None:
    """A data key of the study's shared section (or its baseline's or a candidate's) that none of
    its collections' sources reads is refused at its line: it would change nothing."""
    for where, nc in [("baseline", spec.baseline), *((f"configs.{i}.set", c) for i, c in enumerate(spec.configs))]:
        for key in set_keys(nc.config.data):
            if (why := read_by_none(sources, key)) is not None:
                at = f"{where}.{key}" if _sets(raw, where, key) else (
                    f"defaults.{key}" if _sets(raw, "defaults", key) else key)
                raise _fail(at, str(why))


def _check_space_read(space: Mapping[str, Any], sources: Sequence[str]) -> None:
    """A searched data key that no source of the study reads is refused at its line: a dimension
    that changes nothing."""
    for key in space:
        if key.startswith("data.") and (why := read_by_none(sources, key)) is not None:
            raise _fail(f"search.space.{key}", f"search.space: {why}")


def _sets(raw: dict[str, Any], where: str, key: str) -> bool:
    """Whether the file's mapping at ``where`` (baseline, configs.0.set, defaults) sets ``key``."""
    node: Any = raw
    for part in where.split("."):
        node = node[int(part)] if isinstance(node, list) else (node or {}).get(part)
    return isinstance(node, dict) and key in flatten(node)


def with_collections(raw: dict[str, Any], spec: StudySpec) -> StudySpec:
    """A study over several collections (docs/study-file.md, "Collections"): ``collections`` is a
    list of ``{name, data}``, each ``data`` the data.* keys of one source (over the study's ``data``
    section, which the collections share). Every fixed configuration, the baseline first, is trained
    and evaluated on each collection: one configuration per (configuration, collection), its
    data.collection set to the collection's name (so its config id, its prepared data and its
    evaluation fingerprint are the collection's); a search's proposals, a seed schedule, early
    stopping and the confirmation run on every collection too (``collection_data``, and the rules
    in docs/study-file.md, "Collections"). No ``collections`` key: ``spec`` unchanged, and a
    ``search.objective_collection`` refused."""
    items = raw.get("collections")
    # read from the file: a grid's search section is gone from ``spec`` (its points are listed)
    target = raw["search"].get("objective_collection") if isinstance(raw.get("search"), dict) else None
    if items is None:
        if target is not None:
            raise _fail("search.objective_collection", f"search.objective_collection {target!r} names one of "
                        "the study's collections, and this study has none (no collections key); drop it")
        return spec
    if not isinstance(items, list) or not items:
        raise _fail("collections", "collections must be a non-empty list of {name, data} mappings")
    if len(items) > MAX_COLLECTIONS:
        raise _fail("collections", f"collections must be a list of at most {MAX_COLLECTIONS} collections, "
                    f"got {len(items)}; a larger study is several studies")
    fixed = len(spec.fixed_configs())
    if len(items) * fixed > MAX_CONFIGS:
        raise _fail("collections", f"collections: {fixed} configurations on {len(items)} collections are "
                    f"{fixed * len(items)} configurations (one per configuration and collection), more than "
                    f"{MAX_CONFIGS}; a larger study is several studies")
    names: list[str] = []
    per: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"collections.{i}"
        if not isinstance(item, dict) or "name" not in item:
            raise _fail(where, f"collections[{i}] must be a mapping with name and data")
        unknown = set(item) - {"name", "data"}
        if unknown:
            raise _fail(where, f"collections[{i}]: unknown keys {sorted(unknown)}; valid: name, data")
        cname = item["name"]
        if not isinstance(cname, str) or name_problem(cname):
            problem = name_problem(cname) if isinstance(cname, str) else "must be a string"
            raise _fail(f"{where}.name", f"collections[{i}].name: {problem}")
        if cname.casefold() == COMBINED:
            raise _fail(f"{where}.name", f"collections[{i}]: {cname!r} is the name of the tables' combined "
                        "verdicts; name the collection otherwise")
        if cname.casefold() in {n.casefold() for n in names}:
            # names become folder and file names (exports, plots): unique where case is not either
            raise _fail(f"{where}.name", f"collections[{i}]: duplicate collection name {cname!r} (names "
                        "differ by more than case)")
        data = item.get("data")
        if not isinstance(data, dict) or not data:
            raise _fail(where if data is None else f"{where}.data",
                        f"collections[{i}].data must be a mapping of the data.* keys of that collection "
                        "(its source at least)")
        flat = _flat(data, f"{where}.data", "data.")
        if "data.collection" in flat:
            raise _fail(f"{where}.data", f"collections[{i}].data: data.collection is the collection's "
                        "name; give it as name")
        names.append(cname)
        per.append({**flat, "data.collection": cname})
    expanded: list[NamedConfig] = []
    for i, (flat, cname) in enumerate(zip(per, names, strict=True)):
        for nc in spec.fixed_configs():
            cfg = _config(flat, f"collections.{i}.data", nc.config)
            # The keys of its own entry its source does not read are refused; the study's shared
            # data keys each collection takes where its source reads them.
            if own := [k for k in unread(cfg.data) if k in flat]:
                raise _fail(f"collections.{i}.{own[0]}",
                            f"collections[{i}] ({cname}): {unread_error(cfg.data.source, own[0])}")
            expanded.append(dataclasses.replace(nc, config=dataclasses.replace(cfg, data=only_read(cfg.data))))
    sources = [c.config.data.source for c in expanded[::len(spec.fixed_configs())]]
    _check_shared_data_read(raw, spec, sources)
    if isinstance(raw.get("search"), dict) and isinstance(raw["search"].get("space"), dict):
        _check_space_read(raw["search"]["space"], sources)
    _check_distinct_data(expanded, names, len(spec.fixed_configs()))
    if target is not None and target not in names:
        hint = did_you_mean(target, names, n=1, style="; ", otherwise="")
        raise _fail("search.objective_collection", f"search.objective_collection: {target!r} is not one of the "
                    f"study's collections ({', '.join(names)}){hint}")
    _check_collection_seeds(spec, names)
    baseline, *configs = expanded
    return dataclasses.replace(spec, baseline=baseline, configs=tuple(configs), collections=tuple(names),
                               collection_data=dict(zip(names, per, strict=True)), objective_collection=target)


def _check_distinct_data(configs: Sequence[NamedConfig], names: Sequence[str], per_collection: int,
                         overrides: str = "") -> None:
    """No two collections have the same data (each collection's baseline's data keys, its name
    aside): one collection would count twice in the combined verdict. ``overrides``: the --set or
    smoke keys that made them alike, named in the refusal."""
    seen: dict[Any, str] = {}
    for i, cname in enumerate(names):
        data = dataclasses.replace(configs[i * per_collection].config.data, collection=None)
        if data in seen:
            why = f" once the override of {overrides} applies" if overrides else ""
            raise _fail(f"collections.{i}.data", f"collections {seen[data]!r} and {cname!r} have the same data{why}: "
                        "one collection would count twice in the combined verdict; give each its own data")
        seen[data] = cname


def _check_collection_seeds(spec: StudySpec, names: list[str]) -> None:
    """A study over several collections trains at least 2 seeds per configuration, in the study
    and in its confirmation: its table tests each collection's comparisons across seeds and refuses
    one seed (harness.stats.across), so one seed is refused here, before any trial trains, not
    after all of them. (A seed schedule starts at 2 or more: ``_seed_schedule``.)"""
    where = f"a study over collections ({', '.join(names)})"
    if len(spec.seeds) < 2:
        raise refuse("seeds", list(spec.seeds), f"a list of at least 2 seeds in {where}",
                     why="its table tests each collection's comparisons across seeds, and one seed "
                     "gives no such test: add a seed, or run one collection per study")
    if spec.confirm is not None and len(spec.confirm.seeds) < 2:
        raise refuse("confirm.seeds", len(spec.confirm.seeds), f"at least 2 in {where}",
                     why="the confirmatory table tests these seeds alone, across seeds, and one seed "
                     "gives no such test")
