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

import itertools
import os
from pathlib import Path
from typing import Any

from harness.config import DataConfig, KeyLines, TrialConfig, parse_assignments
from harness.errors import ConfigError


def load(path: Path, smoke: bool, assign: list[str] | None = None) -> Any:
    """The study file at ``path`` with its ``smoke:`` overrides (``smoke``) and ``--set`` assignments
    applied; read the same way by run, validate, submit and a Ray Job."""
    from harness.study.spec import load_study

    spec = load_study(path)
    overrides = dict(spec.smoke) if smoke else {}
    overrides.update(parse_assignments(assign or []))
    return spec.with_overrides(overrides) if overrides else spec


def validate_study(spec: Any, *, tracking_uri: str | None, check_tracking: bool = True, data: bool = True,
                   build_model: bool = False) -> str:
    """Raise a HarnessError naming what is wrong; return the tracking URI (module docstring)."""
    from harness.study.variants import possible_configs
    from harness.tracking.store import default_tracking_uri

    uri = tracking_uri or spec.tracking_uri or default_tracking_uri()
    if check_tracking:
        uri = check_tracking_uri(uri)
    configs = possible_configs(spec)
    if data:
        check_storage(spec)
        for cfg in configs:
            check_data(cfg.data)
    check_cascade_depth(configs, build_model=build_model)
    return str(uri)


def check_cascade_depth(configs: list[TrialConfig], *, build_model: bool = False) -> None:
    """Every cascade exit is a layer of the encoder. The depth comes from the model's config
    (``encoder_depth``); with ``build_model`` (or when only loading can tell) the model is built."""
    from harness.model.encoder import encoder_depth

    for name in dict.fromkeys(c.model.name for c in configs):
        mine = [c for c in configs if c.model.name == name]
        exits = [e for c in mine for e in (c.cascade.exits or ())]
        depth = _built_depth(mine[0]) if build_model else encoder_depth(name)
        if depth is None or not exits:
            continue
        for c in mine:
            ex = list(c.cascade.exits or ())
            if ex and max(ex) > depth:
                raise ConfigError(f"cascade.exits={ex}: layer {max(ex)} is beyond the {depth}-layer "
                                  f"encoder of model.name={name}")


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


def unwritable_dir(path: Path) -> str | None:
    """Why no directory can be made and written at ``path``, or None when one can (module docstring:
    tried in the nearest directory that exists, leaving nothing behind)."""
    import tempfile

    if path.exists() and not path.is_dir():
        return "it is a file, not a directory"
    parent = path
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file, not a directory"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".harness-probe-", dir=parent))
    except OSError as exc:
        return f"{parent} is not writable ({exc.strerror or exc})"
    return None


def check_tracking_uri(uri: str | None) -> str:
    """A usable tracking URI: an absolute, writable SQLite path or a reachable server."""
    from harness.tracking.store import check_reachable, default_tracking_uri, sqlite_path

    uri = uri or default_tracking_uri()
    db = sqlite_path(uri)
    if db is not None:
        if not db.is_absolute():
            raise ConfigError(f"tracking URI {uri}: use an absolute path (sqlite:////abs/path/mlflow.db)")
        problem = unwritable_dir(db.parent)
        if problem:
            raise ConfigError(f"tracking URI {uri}: {db.parent}: {problem}")
    elif uri.startswith(("http://", "https://")):
        check_reachable(uri)
    elif not uri.startswith(("file:", "databricks", "postgresql", "mysql")) and "://" in uri:
        raise ConfigError(f"tracking URI {uri}: unsupported scheme")
    return uri


def schedule_plan(spec: Any) -> list[str]:
    """What `harness validate` prints about a seed schedule (harness.study._rounds): its rounds,
    trials and rule; nothing without one."""
    from harness.study._rounds import FAMILY_ALPHA, design

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
            f"stopped for futility: group-sequential rule at {FAMILY_ALPHA:g}/{len(spec.configs)} = "
            f"{design(spec).alpha:.4g} per comparison (docs/statistics.md)")
    return [head, rounds, rule]


def confirm_plan(spec: Any) -> list[str]:
    """What `harness validate` prints about the confirmation phase (harness.study._confirm)."""
    from harness.study.variants import confirm_trials

    c = spec.confirm
    if c is None:
        return []
    return [(f"  confirmation: top {c.top} by dev {spec.metric} + baseline x {len(c.seeds)} fresh seeds "
            f"{list(c.seeds)} = {confirm_trials(spec)} trials (the confirmatory table uses these runs only)")]
