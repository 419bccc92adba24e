"""One validation of a study before anything is spent: ``harness validate``, ``harness run`` and
``harness submit`` all call ``validate_study`` after loading the study file.

    validate_study(spec, tracking_uri=uri, data=True, build_model=False) -> the tracking URI used

checks, cheapest first: the tracking URI (a writable SQLite directory, a reachable MLflow server),
a local Tune storage path (a directory that can be made and written), the data of every
configuration the study can run (paths, the chitchat package), cascade.exits against the encoder's
depth (read from the model's config, no weights loaded), and with ``build_model`` the tokenizer and
encoder of every model actually load. ``harness submit`` passes ``data=False`` (data paths and the
storage path are the cluster's) and may skip the tracking check (--skip-tracking-check).

Whether a directory can be written is tried, not asked (``os.access`` answers yes to root on a
read-only tree and knows nothing of ACLs): an empty probe directory is made in the nearest
directory that exists and removed at once, so a check leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.config import (
    DataConfig,
    KeyLines,
    TrialConfig,
    alpha_count_problem,
    blame_assignment,
    parse_assignments,
    text_problem,
)
from harness.errors import ConfigError, HarnessError, prefixed, refuse
from harness.textfile import unwritable_dir


def load(path: Path, smoke: bool, assign: list[str] | None = None) -> Any:
    """The study file at ``path`` with its ``smoke:`` overrides (``smoke``) and ``--set`` assignments
    applied; read the same way by run, validate, submit and a Ray Job."""
    from harness.study.spec import load_spec

    spec = load_spec(path)
    overrides = dict(spec.smoke) if smoke else {}
    overrides.update(parse_assignments(assign or []))
    if not overrides:
        return spec
    try:
        return dataclasses.replace(spec.with_overrides(overrides), assigned=tuple(assign or ()))
    except ConfigError as exc:
        blamed = blame_assignment(exc, assign or ())
        line = _line_of(spec, exc.key) if blamed is exc and exc.key and spec.text else None
        if line is not None:  # a rule the overrides break, about a key of the file (its search space)
            raise ConfigError(f"{spec.path}:{line}: {exc}", key=exc.key) from None
        raise blamed from None


def validate_study(spec: Any, *, tracking_uri: str | None, check_tracking: bool = True, data: bool = True,
                   build_model: bool = False) -> str:
    """Raise a HarnessError naming what is wrong; return the tracking URI (module docstring)."""
    from harness.study.variants import possible_configs
    from harness.tracking.store import default_tracking_uri

    uri = tracking_uri or spec.tracking_uri or default_tracking_uri()
    # A refusal names the study file's line where the value comes from the file.
    with _at_line(spec, None if tracking_uri else "tracking_uri"):
        # its form always; whether this machine reaches it only where asked (submit's
        # --skip-tracking-check: a URI that resolves inside the cluster alone)
        uri = check_tracking_uri(uri, here=check_tracking)
        configs = possible_configs(spec)
        if data:  # what this machine holds (a submitted study's cluster holds its own)
            from harness.model.encoder import check_model_fits, check_model_name

            for name in dict.fromkeys(cfg.model.name for cfg in configs):
                check_model_name(name)
            for model in dict.fromkeys(cfg.model for cfg in configs):
                check_model_fits(model)
            check_storage(spec)
            check_cache(configs)
            for cfg in configs:
                try:
                    check_data(cfg.data)
                except HarnessError as exc:
                    if cfg.data.collection is None:
                        raise
                    raise prefixed(exc, f"collection {cfg.data.collection!r}") from None
        check_cascade_depth(configs, build_model=build_model)
        try:
            check_cascade_depth(space_cascades(spec), build_model=build_model)
        except ConfigError as exc:
            space = spec.search.space
            key = exc.key if exc.key in space else next(k for k in space if k.startswith("cascade."))
            raise ConfigError(f"search.space.{key}: a proposal the search can make: {exc}",
                              key=f"search.space.{key}") from None
    return str(uri)


@contextlib.contextmanager
def _at_line(spec: Any, uri_key: str | None) -> Iterator[None]:
    """Prefix a ``ConfigError`` about one key (``exc.key``) with the study file and the line that
    sets it (as ``load_spec`` does); a tracking URI refusal points at ``uri_key``'s line."""
    try:
        yield
    except ConfigError as exc:
        if exc.key is not None and blame_assignment(exc, spec.assigned) is not exc:
            raise blame_assignment(exc, spec.assigned) from None  # the value is --set's, not the file's
        key = uri_key if exc.key == "tracking URI" else exc.key
        line = _line_of(spec, key) if key and spec.text else None
        if line is None:
            raise
        raise ConfigError(f"{spec.path}:{line}: {exc}", key=exc.key) from None


def _line_of(spec: Any, key: str) -> int | None:
    """The line of the study file that sets ``key`` (a section key, or under defaults, baseline or a
    configuration's set), or None when the file does not give it."""
    lines = KeyLines(spec.text).lines
    suffix = (key, *(f"{s}.{key}" for s in ("defaults", "baseline")))
    for path in suffix:
        if path in lines:
            return lines[path]
    return next((n for p, n in lines.items() if p.endswith(f".set.{key}")), None)


# A collection's data that takes longer than this to load is being built: its progress is shown.
SLOW_LOAD_S = 1.0


class WhenSlow:
    """Passes progress lines on once the work has taken ``SLOW_LOAD_S``, those held until then
    first: a collection the cache holds loads without a word, a build says what it does."""

    def __init__(self, progress: Callable[[str], None]) -> None:
        self.progress, self.start, self.held = progress, time.monotonic(), []  # type: list[str]
        self.open = False

    def __call__(self, message: str) -> None:
        if not self.open and time.monotonic() - self.start < SLOW_LOAD_S:
            self.held.append(message)
            return
        self.open = True
        for held in self.held:
            self.progress(held)
        self.held.clear()
        self.progress(message)


def collections_plan(spec: Any, progress: Callable[[str], None] | None = None) -> list[str]:
    """A study over several collections: each collection's data loaded (a collection whose data
    does not load is refused, naming it) and its plan: queries, candidates, evaluation
    fingerprint and trials. A collection not yet in the data cache is built here (minutes for the
    whole chitchat set; the study then finds it built); ``progress`` gets the build's lines."""
    from harness.data.load import load_splits
    from harness.training import check_negatives

    head = (f"  collections: {len(spec.collections)} ({', '.join(spec.collections)}); every configuration "
            "on each, in one Tune run")
    lines = [head]
    for name in spec.collections:
        configs = spec.collection_configs(name)
        cfg = configs[0].config
        try:
            said = None if progress is None else WhenSlow(lambda m, c=name: progress(f"{c}: {m}"))
            splits = load_splits(cfg.data, train_sampler=cfg.train.sampler, progress=said)
        except HarnessError as exc:
            raise prefixed(exc, f"collection {name!r}: its data does not load") from None
        try:  # as the study's driver checks before any trial starts (harness.study.variants)
            check_negatives(splits.train, *(c.config.train.negatives_per_positive for c in configs))
        except HarnessError as exc:
            raise prefixed(exc, f"collection {name!r}") from None
        candidates = [len(q.candidates) for q in splits.test]
        mean = sum(candidates) / len(candidates) if candidates else 0.0
        lines.append(f"    {name}: data.source {cfg.data.source}; {len(splits.train)} train / {len(splits.dev)} dev / "
                     f"{len(splits.test)} test queries, {mean:.1f} candidates per test query; evaluation "
                     f"fingerprint {splits.evaluation[:12]}; {_collection_trials(spec, len(configs))}")
    return lines


def _collection_trials(spec: Any, fixed: int) -> str:
    """One collection's trials in words: its fixed configurations x seeds (at most, with a seed
    schedule), its share of the search's proposals and of the confirmation."""
    from harness.study.variants import confirm_trials

    seeds = len(spec.seeds)
    text = (f"{fixed} configurations x {'at most ' if spec.seed_schedule else ''}{seeds} seeds = "
            f"{'at most ' if spec.seed_schedule else ''}{fixed * seeds} trials")
    if spec.search is not None:
        n = spec.search.num_configs
        # a searcher that only repeats what it has trained ends early (harness.driver._searchers)
        text += f" + at most {n} proposal(s) x {seeds} seeds = at most {n * seeds} search trials"
    if spec.confirm is not None:
        text += f" + {confirm_trials(spec) // len(spec.collections)} confirmation trials"
    return text


def check_cascade_depth(configs: list[TrialConfig], *, build_model: bool = False) -> None:
    """Every cascade exit is a layer of the encoder, the last one its last layer (the trainer's
    rule, ``check_exits``), and ``cascade.alpha`` has one value or one per exit where the exits
    are the depth's default (``cascade.exits`` null; a list is checked with the config). The depth
    comes from the model's config (``encoder_depth``); with ``build_model``
    (or when only loading can tell) the model is built."""
    from harness.model.cascade_cost import check_exits, default_exits
    from harness.model.encoder import encoder_depth

    for name in dict.fromkeys(c.model.name for c in configs):
        mine = [c for c in configs if c.model.name == name and c.cascade.enabled]
        if not mine:
            continue
        depth = _built_depth(mine[0]) if build_model else encoder_depth(name)
        if depth is None:
            continue
        defaults = list(default_exits(depth))
        for c in mine:
            ex = list(c.cascade.exits or ())
            if ex and max(ex) > depth:
                raise ConfigError(f"cascade.exits={ex}: layer {max(ex)} is beyond the {depth}-layer "
                                  f"encoder of model.name={name}", key="cascade.exits")
            if ex:
                try:  # the rule the trainer applies (CascadePlan): the last exit is the full model
                    check_exits(tuple(ex), depth)
                except ConfigError as exc:
                    raise ConfigError(f"{exc} (the {depth}-layer encoder of model.name={name})",
                                      key="cascade.exits") from None
            if not ex and (problem := alpha_count_problem(
                    c.cascade.alpha, len(defaults),
                    f"the default exits {defaults} of the {depth}-layer encoder of model.name={name}")):
                raise ConfigError(problem, key="cascade.alpha")


def space_cascades(spec: Any) -> list[TrialConfig]:
    """The cascades the search space can propose, as configurations for ``check_cascade_depth``:
    every combination of the listed values (choice, fixed) of its ``cascade.*`` keys and
    ``model.name`` that its conditions allow, over the defaults. A proposal with
    exits past the encoder's depth failed inside the running searcher. Keys whose condition reads
    a key drawn from a range are left out, as in the combination check at load, and so is a space
    of more than MAX_CONFIGS such combinations."""
    from harness.study.space import enumerate_grid, grid_bound
    from harness.study.spec import MAX_CONFIGS

    if spec.search is None:
        return []
    space = spec.search.space
    cascade = [k for k in space if k.startswith("cascade.")]
    if not cascade:
        return []
    wanted = set(cascade) | {"model.name"}
    # The keys their conditions read come along, so that a condition is judged on its own key.
    while True:
        more = {c for k in wanted if k in space for c in space[k].when if c in space} - wanted
        if not more:
            break
        wanted |= more
    listed = {k: space[k] for k in wanted if k in space and space[k].kind in ("choice", "fixed")}
    drawn = set(space) - set(listed)
    listed = {k: p for k, p in listed.items() if not set(p.when) & drawn}
    if not any(k.startswith("cascade.") for k in listed) or grid_bound(listed.values()) > MAX_CONFIGS:
        return []
    configs = []
    for point in enumerate_grid(listed, spec.defaults.to_flat()):
        with contextlib.suppress(ConfigError):  # a combination that is no configuration: refused at load
            configs.append(TrialConfig.from_flat(point, base=spec.defaults))
    return configs


def _built_depth(cfg: TrialConfig) -> int:
    from harness.model.encoder import load_encoder, load_tokenizer

    load_tokenizer(cfg.model)
    return int(load_encoder(cfg.model, seed=0).config.num_hidden_layers)


def check_data(data: DataConfig) -> None:
    """The data source's own cheap check (``harness.data.sources``): its package, path or ids."""
    from harness.data.sources import get

    check = get(data.source).check
    if check is not None:
        check(data)


def check_cache(configs: list[TrialConfig]) -> None:
    """The data cache of every configuration that builds the embedded set can be written: a trial
    whose build cannot be cached warned and built it again, so a study with HARNESS_CACHE naming a
    file built the data in every trial (minutes each), and ``validate`` said nothing of it."""
    from harness.cachedir import cache_problem

    for folder in dict.fromkeys(c.data.cache_dir for c in configs if c.data.source == "chitchat"):
        if problem := cache_problem(folder):
            raise ConfigError(f"{problem} (every trial would build the data again)",
                              key="data.cache_dir" if folder else None)


def check_storage(spec: Any) -> None:
    """A local ``storage_path`` is, or can be made, a directory this process can write in; the
    error names the study file and the line of its ``storage_path`` (a URI is checked at load)."""
    if "://" in spec.storage_path:
        return
    problem = unwritable_dir(Path(spec.storage_path))
    if problem:
        where = f"{spec.path}{KeyLines(spec.text).at('storage_path')}" if spec.text else spec.path
        raise ConfigError(f"{where}: storage_path {spec.storage_path}: {problem} (Ray Tune keeps the "
                          "trials' state there); choose a directory you can write")


def check_tracking_uri(uri: str | None, *, here: bool = True) -> str:
    """A usable tracking URI: an absolute, writable SQLite path or a reachable server. ``here``
    False (``harness submit --skip-tracking-check``: a URI that resolves only inside the cluster):
    its form alone, nothing this machine would reach, write or import for it."""
    from harness.tracking.store import (
        DATABASE_SCHEMES,
        check_database_driver,
        check_folder_store,
        check_reachable,
        default_tracking_uri,
        sqlite_path,
        store_size,
    )

    uri = uri or default_tracking_uri()
    problem = uri_problem(uri)
    if problem:
        raise refuse("tracking URI", uri, "a URI (sqlite:////abs/path/mlflow.db, http://HOST:PORT) or a path",
                     why=problem)
    db = sqlite_path(uri)
    if db is not None:
        if not db.is_absolute():
            raise refuse("tracking URI", uri, "an absolute path (sqlite:////abs/path/mlflow.db)")
        problem = unwritable_dir(db.parent) if here else None
        if problem:
            raise ConfigError(f"tracking URI {uri}: {db.parent}: {problem}")
        if here:
            store_size(db)  # a file name too long for the filesystem: one line now, not at the run's store
    elif uri.startswith(("http://", "https://")):
        if here:
            check_reachable(uri)
    elif uri.startswith(DATABASE_SCHEMES):
        if here:
            check_database_driver(uri)
    elif uri.startswith("file:") or "://" not in uri:
        check_folder_store(uri)
    elif not uri.startswith("databricks"):
        raise refuse("tracking URI", uri, "sqlite:///, http(s)://, file:, postgresql://, mysql://, mssql:// or "
                     "databricks", why="an unsupported scheme")
    return uri


# Schemes of a URI that MLflow's stores take without "//" after the colon.
_BARE_SCHEMES = ("file", "databricks")


def uri_problem(uri: str) -> str | None:
    """Why ``uri`` is no tracking URI as written, or None: text no URI holds (NUL, a lone
    surrogate, a control character; a space in an http(s) URI), an http(s) URI without a host or with a port
    that is not one, a ``sqlite:`` URI without ``sqlite:///``, or a scheme-like prefix without its
    ``://`` (``http//host``, ``localhost:5000``: MLflow would make a directory of that name)."""
    from urllib.parse import urlsplit

    problem = text_problem(uri)
    if problem:
        return problem
    odd = next((c for c in uri if not c.isprintable()), None)
    if odd is not None:
        return f"it holds {odd!r} at position {uri.index(odd)}"
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme in ("http", "https"):
        if " " in uri:
            return f"it holds ' ' at position {uri.index(' ')}: percent-encode it (%20)"
        try:
            if not parts.hostname or parts.port == 0:
                return "it names no host, or port 0"
        except ValueError:
            return "its port is not a number in [1, 65535]"
    elif scheme == "sqlite" and not uri.startswith("sqlite:///"):
        return "a SQLite store is sqlite:/// and then the database's path"
    elif "://" not in uri and len(scheme) > 1 and scheme not in _BARE_SCHEMES:
        return f"{parts.scheme}: reads as a scheme without '://' after it"
    elif "://" not in uri and uri.startswith(("http//", "https//", "sqlite//")):
        return "a scheme without ':' after it"
    return None


def schedule_plan(spec: Any) -> list[str]:
    """What `harness validate` prints about a seed schedule (harness.driver._rounds): its rounds,
    trials and rule; nothing without one."""
    from harness.study.rounds import FAMILY_ALPHA, comparisons, design

    schedule = spec.seed_schedule
    if schedule is None:
        return []
    looks, n = schedule.looks, len(spec.fixed_configs())
    added = ", ".join(str(b - a) for a, b in itertools.pairwise(looks))
    head = (f"  seeds: {schedule.rounds} rounds ending at {', '.join(map(str, looks))} seeds (start "
            f"{schedule.start}, step {schedule.step}, max {schedule.max}; seeds {spec.seeds[0]}.."
            f"{spec.seeds[-1]}), at most {n * schedule.max} trials")
    rounds = (f"    round 1: {n} configurations x {looks[0]} seeds = {n * looks[0]} trials; rounds 2-"
              f"{schedule.rounds}: {added} more seeds for the baseline and each open candidate")
    rule = (f"    a candidate gets no more seeds once its comparison on test {spec.metric} is settled or "
            f"stopped for futility: group-sequential rule at {FAMILY_ALPHA:g}/{comparisons(spec)} = "
            f"{design(spec).alpha:.4g} per comparison (docs/statistics.md)")
    if spec.collections:
        rule += (f"; each collection's comparisons read that collection's results, and a candidate trains "
                 f"each round's seeds on all {len(spec.collections)} collections while any of its comparisons "
                 "is open")
    return [head, rounds, rule]


def confirm_plan(spec: Any) -> list[str]:
    """What `harness validate` prints about the confirmation phase (harness.driver._confirm)."""
    from harness.study.variants import confirm_trials

    c = spec.confirm
    if c is None:
        return []
    return [(f"  confirmation: top {c.top} by dev {spec.metric} + baseline x {len(c.seeds)} fresh seeds "
            f"{list(c.seeds)} = {confirm_trials(spec)} trials (the confirmatory table uses these runs only)")]


# -- GPU memory: an estimate of a trial's peak, and how many trials share a GPU ------------------

# Bytes of activations kept for the backward pass per token, hidden unit and layer: 34 with 16-bit
# activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
# Models", eq. 2 without the attention-score term, which fused attention does not keep), twice that
# in fp32.
ACTIVATION_BYTES = {True: 34, False: 68}
# Weights, gradients and AdamW's two moments, fp32: 4 values of 4 bytes per parameter.
STATE_BYTES = 4 * 4
CUDA_CONTEXT_GIB = 0.5  # the CUDA context and allocator reserve of one trial process
GIB = 2**30


def encoder_shape(name: str) -> tuple[int, int, int] | None:
    """(parameters, hidden size, layers) of ``model.name``'s ranker from its config alone, no weights
    read: counted from the config of a BERT encoder (``bert_parameters``; ``tiny`` and
    ``packaged`` are), else by building the encoder on PyTorch's meta device (nothing allocated).
    None when no config is at hand (a hub name not in the local cache)."""
    from harness.model.encoder import model_config, model_source

    source = Path(model_source(name))
    try:
        if source.is_dir():
            raw = model_config(name)
            if raw is None:  # a folder without config.json
                return None
            if raw.get("model_type") == "bert":
                return bert_parameters(raw), int(raw["hidden_size"]), int(raw["num_hidden_layers"])
        return _meta_shape(str(source))
    except (HarnessError, OSError, ValueError, KeyError, TypeError):
        return None


def bert_parameters(config: dict[str, Any]) -> int:
    """The parameters of a BERT ranker (harness.model._ranker: encoder with its pooler, one score
    from the pooled [CLS]) from its config.json: embeddings (words, positions, token types, their
    LayerNorm), per layer the attention (Q, K, V, output), the feed-forward pair and two LayerNorms,
    the pooler and the head."""
    h, i, n = int(config["hidden_size"]), int(config["intermediate_size"]), int(config["num_hidden_layers"])
    embeddings = (int(config["vocab_size"]) + int(config["max_position_embeddings"])
                  + int(config.get("type_vocab_size", 2))) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    return embeddings + n * layer + (h * h + h) + (h + 1)


def _meta_shape(source: str) -> tuple[int, int, int]:
    import torch
    from transformers import AutoConfig, AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    config = AutoConfig.from_pretrained(source, local_files_only=True)
    with torch.device("meta"):
        encoder = AutoModel.from_config(config)
    hidden = int(config.hidden_size)
    return sum(p.numel() for p in encoder.parameters()) + hidden + 1, hidden, int(config.num_hidden_layers)


def trial_memory_gib(cfg: TrialConfig, seeds: int, batch_size: int | None = None) -> float | None:
    """An estimate of a trial's peak GPU memory (GiB) training ``seeds`` seeds of ``cfg`` at once:
    per seed, weights, gradients and AdamW's moments (``STATE_BYTES`` per parameter) and the
    activations of one step (pairs x ``model.max_length`` x hidden x layers x ``ACTIVATION_BYTES``;
    a pairwise loss scores two pairs per instance), plus one CUDA context. An estimate, not a
    measurement: allocator fragmentation, evaluation batches and the tokenizer's real lengths move
    it. None when the model's config is not at hand."""
    from harness.losses.kinds import LOSSES

    shape = encoder_shape(cfg.model.name)
    if shape is None:
        return None
    pairs = (batch_size or cfg.train.batch_size) * (2 if LOSSES[cfg.train.loss].pairwise else 1)
    return seeds * seed_memory_gib(*shape, pairs=pairs, length=cfg.model.max_length,
                                   bf16=bool(cfg.train.bf16)) + CUDA_CONTEXT_GIB


def seed_memory_gib(params: int, hidden: int, layers: int, *, pairs: int, length: int, bf16: bool) -> float:
    """One seed's share of ``trial_memory_gib``: ``STATE_BYTES`` per parameter and one step's
    activations (pairs x length x hidden x layers x ``ACTIVATION_BYTES``), in GiB."""
    return (STATE_BYTES * params + pairs * length * hidden * layers * ACTIVATION_BYTES[bf16]) / GIB


def ray_trials(spec: Any) -> int:
    """Ray Tune trials of the study: each configuration's seeds in groups of ``seeds_per_trial``
    (with a seed schedule, each round's new seeds: at most, if every comparison stays open)."""
    from harness.study.protocol import seed_groups

    k = spec.seeds_per_trial
    per = max(1, len(spec.collections))  # a proposal and a confirmation run on every collection
    n = len(spec.fixed_configs()) + (spec.search.num_configs * per if spec.search else 0)
    confirm = (spec.confirm.top + 1) * len(seed_groups(spec.confirm.seeds, k)) * per if spec.confirm else 0
    if spec.seed_schedule is not None:
        looks = (0, *spec.seed_schedule.looks)
        return n * sum(len(seed_groups(spec.seeds[a:b], k)) for a, b in itertools.pairwise(looks)) + confirm
    return n * len(seed_groups(spec.seeds, k)) + confirm


def local_gpu_gib() -> tuple[float, str] | None:
    """The first local CUDA device's memory (GiB) and name, or None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return props.total_memory / GIB, props.name


def gpu_plan(spec: Any, gpu_memory_gib: float | None = None) -> list[str]:
    """What `harness validate` prints about GPUs: how many trials share one (1 / resources.gpus),
    the estimated peak memory of a trial (``trial_memory_gib``, largest over the configurations the
    study can run, with the search space's largest train.batch_size) and a warning when the trials
    sharing a GPU would not fit in its memory: ``gpu_memory_gib`` (--gpu-memory), else the local
    CUDA device's; without either, no comparison."""
    import math

    from harness.study.variants import possible_configs

    if spec.gpus <= 0:
        return []
    k = spec.seeds_per_trial
    sharing = max(1, math.floor(1 / spec.gpus + 1e-9)) if spec.gpus < 1 else 1
    at_once = min(sharing, spec.concurrency)
    head = (f"  GPUs: {sharing} trial(s) share a GPU (1 / resources.gpus {spec.gpus:g})" if spec.gpus < 1
            else f"  GPUs: each trial holds {spec.gpus:g} GPU(s) and trains on one")
    if at_once < sharing:
        head += f"; concurrency {spec.concurrency} runs at most {at_once} at once"
    lines = [head]
    space = spec.search.space if spec.search else {}
    batch = None
    if "train.batch_size" in space:
        batch = max(int(v) for v in space["train.batch_size"].args if isinstance(v, int | float))
    estimates = [e for c in possible_configs(spec)
                 if (e := trial_memory_gib(c, k, max(batch or 0, c.train.batch_size))) is not None]
    if not estimates:
        lines.append("    memory: no estimate (the model's config is not available locally)")
        return lines
    per_trial = max(estimates)
    lines.append(f"    memory: about {per_trial:.1f} GiB per trial at its peak ({k} seed(s) x weights, gradients, "
                 f"AdamW state and one step's activations, + {CUDA_CONTEXT_GIB:g} GiB CUDA context; an "
                 f"estimate, docs/cluster.md), {at_once * per_trial:.1f} GiB for {at_once} trial(s) on a GPU")
    if gpu_memory_gib is not None:
        total, where = gpu_memory_gib, "--gpu-memory"
    else:
        local = local_gpu_gib()
        if local is None:
            lines.append("    (give the GPU's memory with --gpu-memory GIB to check that they fit)")
            return lines
        total, where = local[0], f"the local {local[1]}"
    if at_once * per_trial > total:
        lines.append(f"  warning: {at_once} trial(s) x {per_trial:.1f} GiB = {at_once * per_trial:.1f} GiB "
                     f"(estimated) exceed the GPU's {total:.1f} GiB ({where}): raise resources.gpus, or lower "
                     "resources.seeds_per_trial, train.batch_size or model.max_length")
    else:
        lines.append(f"    fits: {at_once * per_trial:.1f} of {total:.1f} GiB ({where})")
    return lines
