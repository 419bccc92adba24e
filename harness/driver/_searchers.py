"""Searcher plumbing of the search phase: Optuna proposes configurations (define-by-run over the
study's space), ``SeedRepeater`` runs every proposal once per study seed, turns each into a
``TrialTicket`` (the one config shape of both phases) and reports the mean over seeds to Optuna.
With ``resources.seeds_per_trial: k`` a proposal runs once per seed group (``seed_groups``), and
Optuna gets the mean over the proposal's seeds: each group's mean weighted by its seed count.

Over several collections (docs/study-file.md, "Collections") a proposal runs once per (collection,
seed group), each trial the proposal with the collection's data keys (one name on every collection,
one config id per collection, as a fixed configuration); Optuna gets the mean over the collections
of each collection's mean over its seeds, or with ``search.objective_collection`` that collection's
mean alone. Tune's searcher state (this repeater and Optuna's study) resumes as for one collection."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from ray.tune.search import Repeater, Searcher
from ray.tune.search.repeater import TRIAL_INDEX

from harness.config import TrialConfig
from harness.driver import _early_stop_ray as early_stop_ray
from harness.study.protocol import TrialTicket, objective_key, seed_groups
from harness.study.space import suggest
from harness.study.spec import SEARCHERS, StudySpec


class DefineByRun:
    """Optuna define-by-run space: suggestions only (the space is data). A module-level class so Tune can
    pickle the searcher into its experiment state (resume)."""

    def __init__(self, space: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
        self.space = dict(space)
        self.defaults = dict(defaults)

    def __call__(self, trial: Any) -> dict[str, Any]:
        return suggest(trial, self.space, self.defaults)


class SeedRepeater(Repeater):
    """Every proposal once per study seed, as tickets; averages a list of metrics too (multi-objective
    NSGA-II)."""

    def __init__(self, searcher: Searcher, *, seeds: tuple[int, ...], defaults: Mapping[str, Any],
                 name: str, seeds_per_trial: int = 1, collections: Mapping[str, Mapping[str, Any]] | None = None,
                 objective_collection: str | None = None) -> None:
        groups = seed_groups(seeds, seeds_per_trial)
        # collection name -> its flat data keys (StudySpec.collection_data); {}: one collection
        self.collections = {c: dict(flat) for c, flat in (collections or {}).items()}
        super().__init__(searcher, repeat=len(groups) * max(1, len(self.collections)), set_index=True)
        self.seeds = tuple(seeds)
        self.groups = groups
        self.defaults = dict(defaults)
        self.name = name
        self.weights: dict[str, int] = {}  # a seed group's trial id -> its seed count
        self.objective_collection = objective_collection
        self.collection_of: dict[str, str] = {}  # a trial id -> its collection (several collections)

    def suggest(self, trial_id: str) -> dict | None:
        config = super().suggest(trial_id)
        if config is None or config == Searcher.FINISHED:
            return config
        groups = self.seed_groups()
        index = int(config.pop(TRIAL_INDEX))
        seeds = groups[index % len(groups)]
        ticket = TrialTicket.proposed(config, self.defaults, seeds[0], self.name)
        names = list(self.__dict__.get("collections") or {})
        if names:  # the proposal on one collection: its name, the collection's data
            collection = names[index // len(groups)]
            cfg = TrialConfig.from_flat(self.collections[collection], base=ticket.config())
            ticket = TrialTicket.of(ticket.name, ticket.role, cfg, seeds[0])
            self.collection_of[trial_id] = collection
            self.weights[trial_id] = len(seeds)
        if not self.grouped:  # a trial per seed
            return ticket.to_tune()
        self.weights[trial_id] = len(seeds)
        return ticket.grouped(seeds).to_tune()

    early_stop: str | None = None  # early stopping's state: a stopped config reports its rung mean

    def seed_groups(self) -> list[tuple[int, ...]]:
        # a repeater pickled by a driver without seed groups has none: a trial per seed
        return self.__dict__.get("groups") or [(s,) for s in self.seeds]

    @property
    def grouped(self) -> bool:
        return len(self.seed_groups()) != len(self.seeds)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, **kwargs: Any) -> None:
        metric = self.searcher.metric
        result = early_stop_ray.searcher_value(self.early_stop, metric, result)
        if self.grouped or self.__dict__.get("collections"):
            return self._group_complete(trial_id, result, **kwargs)
        if not isinstance(metric, list):
            return super().on_trial_complete(trial_id, result, **kwargs)
        group = self._trial_id_to_group[trial_id]
        group.report(trial_id, [result.get(m, np.nan) for m in metric] if result else [np.nan] * len(metric))
        if group.finished_reporting():
            scores = np.array(group.scores(), dtype=float)
            means = np.nanmean(scores, axis=0)
            self.searcher.on_trial_complete(group.primary_trial_id,
                                            result=dict(zip(metric, means.tolist(), strict=True)), **kwargs)

    def _group_complete(self, trial_id: str, result: dict | None, **kwargs: Any) -> None:
        """A seed group's trial, or a trial on one of several collections: its values are its seeds'
        means; once every trial of the proposal has reported, Optuna gets each metric's mean over
        the seeds (group means weighted by their seed counts; groups without a value left out, as
        ``nanmean`` leaves out a seed) of each collection, then the mean of those over the
        collections (or the objective collection's alone)."""
        metric = self.searcher.metric
        metrics = metric if isinstance(metric, list) else [metric]
        values = [float(result[m]) if result and result.get(m) is not None else math.nan for m in metrics]
        group = self._trial_id_to_group[trial_id]
        collection = self.__dict__.get("collection_of", {}).get(trial_id, "")
        group.report(trial_id, (values, self.weights[trial_id], collection))
        if not group.finished_reporting():
            return
        target = self.__dict__.get("objective_collection")
        means = []
        for j in range(len(metrics)):
            per: dict[str, list[tuple[float, int]]] = {}
            for v, w, *where in group.scores():  # (values, weight[, collection])
                if math.isfinite(v[j]) and (target is None or where == [target]):
                    per.setdefault(where[0] if where else "", []).append((v[j], w))
            by = [sum(v * w for v, w in rows) / sum(w for _, w in rows) for rows in per.values()]
            means.append(sum(by) / len(by) if by else math.nan)
        out = dict(zip(metrics, means, strict=True)) if isinstance(metric, list) else {metric: means[0]}
        self.searcher.on_trial_complete(group.primary_trial_id, result=out, **kwargs)


def make_searcher(spec: StudySpec) -> SeedRepeater:
    from ray.tune.search.optuna import OptunaSearch

    from harness.driver._samplers import sampler_class
    from harness.driver.quiet import quiet_optuna

    quiet_optuna()

    assert spec.search is not None
    s = spec.search
    seed = spec.seeds[0]
    sampler = sampler_class(SEARCHERS.get(s.searcher).sampler)(seed=seed)
    defaults = spec.defaults.to_flat()
    define_by_run = DefineByRun(s.space, defaults)
    metrics = [objective_key(m, spec.metric, len(s.objectives)) for m, _ in s.objectives]
    modes = [md for _, md in s.objectives]
    if len(metrics) == 1:
        opt = OptunaSearch(space=define_by_run, metric=metrics[0], mode=modes[0], sampler=sampler)
    else:
        opt = OptunaSearch(space=define_by_run, metric=metrics, mode=modes, sampler=sampler)
    repeater = SeedRepeater(opt, seeds=spec.seeds, defaults=defaults, name=s.searcher,
                            seeds_per_trial=spec.seeds_per_trial, collections=spec.collection_data,
                            objective_collection=spec.objective_collection)
    repeater.early_stop = early_stop_ray.state_uri(spec) if spec.early_stopping else None
    return repeater
