"""Preparation once on the driver: every data/model variant a study can touch, its token ids and
the curriculum difficulty scores (teachers included), before any trial starts. Trials receive the
result through the Ray object store and never rebuild it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.config import TrialConfig
from harness.errors import ConfigError, refuse
from harness.study.space import enumerate_grid, grid_bound
from harness.study.spec import MAX_CONFIGS, StudySpec

if TYPE_CHECKING:  # torch and the tokenizers load only where data is prepared (not in validate)
    from harness.training.tokenized import PreparedData

VARIANT_PREFIXES = ("data.", "model.")
# Keys that change the training data (train.sampler) or which difficulty scores a trial reads
# (harness.training.tokenized.score_key): the driver prepares each of their values.
SCORE_KEYS = ("curriculum.scoring", "curriculum.pacing", "curriculum.candidates",
              "train.negatives_per_positive", "train.sampler")


def variant_key(cfg: TrialConfig) -> str:
    """Identifies the prepared data a config trains on: its data config, model name and length."""
    return json.dumps({"data": dataclasses.asdict(cfg.data), "train_sampler": cfg.train.sampler,
                       "model": cfg.model.name, "max_length": cfg.model.max_length},
                      sort_keys=True, default=str)


def possible_configs(spec: StudySpec) -> list[TrialConfig]:
    """Every fixed config, plus every combination of the search space's discrete data/model/
    curriculum.scoring choices (continuous values do not change what must be prepared)."""
    configs = [nc.config for nc in spec.fixed_configs()]
    if spec.search is not None:
        relevant = {k: p for k, p in spec.search.space.items()
                    if k.startswith(VARIANT_PREFIXES) or k in SCORE_KEYS}
        for key, p in relevant.items():
            if not p.discrete:
                raise ConfigError(f"search.space.{key}: data, model and curriculum-scoring keys must be "
                                  "discrete (choice/int/fixed) so the driver can prepare every variant", key=f"search.space.{key}")
        variants = grid_bound(relevant.values())
        if variants > MAX_CONFIGS:  # counted before a variant is built (docs/study-file.md, "Limits")
            raise refuse("search.space", variants, f"at most {MAX_CONFIGS} data and model variants (combinations "
                         f"of the values of {', '.join(relevant)})", why="each is prepared before the first "
                         "trial: give fewer values")
        base = spec.defaults.to_flat()
        for point in enumerate_grid(relevant, base) if relevant else [{}]:
            cfg = TrialConfig.from_flat(point, base=spec.defaults)
            # Over several collections a proposal trains on each (harness.driver._searchers).
            configs.extend([spec.in_collection(cfg, c) for c in spec.collections] or [cfg])
    return configs


def prepare_study(spec: StudySpec, *, progress: Callable[[str], None]) -> dict[str, PreparedData]:
    from harness.data.load import load_splits, sharing_corpora
    from harness.training import check_negatives, check_scored
    from harness.training.teacher import difficulty_scores
    from harness.training.tokenized import prepare_data

    groups: dict[str, list[TrialConfig]] = {}
    for cfg in possible_configs(spec):
        groups.setdefault(variant_key(cfg), []).append(cfg)
    out: dict[str, PreparedData] = {}
    memos: dict[str, dict[str, Any]] = {}  # token ids per tokenizer (model name), across the variants
    with sharing_corpora():  # the variants' builds (one per training sampler) read a corpus once
        for key, cfgs in groups.items():
            first = cfgs[0]
            splits = load_splits(first.data, train_sampler=first.train.sampler, progress=progress)
            progress(f"prepare: {len(splits.train)} train / {len(splits.dev)} dev / {len(splits.test)} "
                     f"test queries ({first.data.source}, protocol {first.data.protocol}, train.sampler "
                     f"{first.train.sampler}, model {first.model.name})")
            # Each configuration's negatives per positive fit every training query's pool: said here,
            # before any trial loads a model, not by every trial as it starts.
            try:
                check_negatives(splits.train, *(c.train.negatives_per_positive for c in cfgs))
                check_scored(splits.train, *cfgs)
            except ConfigError as exc:
                where = f"collection {first.data.collection!r}" if first.data.collection else \
                    f"data.source {first.data.source}"
                raise ConfigError(f"{where}: {exc}") from None
            # Every configuration with every study seed: pair scores and random orders are per seed.
            seeds = (*spec.seeds, *(spec.confirm.seeds if spec.confirm else ()))
            scores = difficulty_scores([c.with_seed(s) for c in cfgs for s in seeds], splits,
                                       progress=progress)
            out[key] = prepare_data(splits, first.model, scores, memo=memos.setdefault(first.model.name, {}))
    return out


def study_params(spec: StudySpec, trials: int) -> dict[str, Any]:
    return {"study.seeds": list(spec.seeds), "study.configs": len(spec.fixed_configs()),
            "study.searcher": spec.search.searcher if spec.search else "none",
            "study.search_configs": spec.search.num_configs if spec.search else 0,
            "study.trials": trials, "study.metric": spec.metric, "study.mode": spec.mode,
            "study.resources.cpus": spec.cpus, "study.resources.gpus": spec.gpus,
            "study.concurrency": spec.concurrency, "study.max_retries": spec.max_retries,
            "study.checkpoint_every_s": spec.checkpoint_every_s,
            "study.storage_path": spec.storage_path,
            **({"study.seed_schedule": spec.seed_schedule.describe()} if spec.seed_schedule else {}),
            **({"study.confirm_top": spec.confirm.top, "study.confirm_seeds": list(spec.confirm.seeds)}
               if spec.confirm else {})}


def trial_count(spec: StudySpec) -> int:
    """The study's trials: every fixed configuration, every search proposal and the confirmation,
    each with its seeds. A bound where ``trial_count_word`` says "at most ": a seed schedule stops
    early, and a search ends early when its searcher only repeats configurations it has trained."""
    n = len(spec.fixed_configs())
    if spec.search is not None:
        n += spec.search.num_configs * max(1, len(spec.collections))
    return n * len(spec.seeds) + confirm_trials(spec)


def trial_count_word(spec: StudySpec) -> str:
    """"at most " where ``trial_count`` is a bound (a seed schedule, a search), else ""."""
    return "at most " if spec.seed_schedule is not None or spec.search is not None else ""


def confirm_trials(spec: StudySpec) -> int:
    """The confirmation phase's trials: the top configurations and the baseline x the fresh seeds
    (on every collection of a study over several)."""
    per = (spec.confirm.top + 1) * len(spec.confirm.seeds) if spec.confirm else 0
    return per * max(1, len(spec.collections))

