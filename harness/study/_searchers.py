"""Searcher plumbing of the search phase: Optuna proposes configurations (define-by-run over the
study's space), ``SeedRepeater`` runs every proposal once per study seed, turns each into a
``TrialTicket`` (the one config shape of both phases) and reports the mean over seeds to Optuna."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from ray.tune.search import Repeater, Searcher
from ray.tune.search.repeater import TRIAL_INDEX

from harness.study import _early_stop_ray as early_stop_ray
from harness.study._space import suggest
from harness.study.protocol import TrialTicket, objective_key
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
                 name: str) -> None:
        super().__init__(searcher, repeat=len(seeds), set_index=True)
        self.seeds = tuple(seeds)
        self.defaults = dict(defaults)
        self.name = name

    def suggest(self, trial_id: str) -> dict | None:
        config = super().suggest(trial_id)
        if config is None or config == Searcher.FINISHED:
            return config
        seed = self.seeds[int(config.pop(TRIAL_INDEX))]
        return TrialTicket.proposed(config, self.defaults, seed, self.name).to_tune()

    early_stop: str | None = None  # early stopping's state: a stopped config reports its rung mean

    def on_trial_complete(self, trial_id: str, result: dict | None = None, **kwargs: Any) -> None:
        metric = self.searcher.metric
        result = early_stop_ray.searcher_value(self.early_stop, metric, result)
        if not isinstance(metric, list):
            return super().on_trial_complete(trial_id, result, **kwargs)
        group = self._trial_id_to_group[trial_id]
        group.report(trial_id, [result.get(m, np.nan) for m in metric] if result else [np.nan] * len(metric))
        if group.finished_reporting():
            scores = np.array(group.scores(), dtype=float)
            means = np.nanmean(scores, axis=0)
            self.searcher.on_trial_complete(group.primary_trial_id,
                                            result=dict(zip(metric, means.tolist(), strict=True)), **kwargs)


def make_searcher(spec: StudySpec) -> SeedRepeater:
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    assert spec.search is not None
    s = spec.search
    seed = spec.seeds[0]
    sampler = getattr(optuna.samplers, SEARCHERS.get(s.searcher).sampler)(seed=seed)
    defaults = spec.defaults.to_flat()
    define_by_run = DefineByRun(s.space, defaults)
    metrics = [objective_key(m, spec.metric, len(s.objectives)) for m, _ in s.objectives]
    modes = [md for _, md in s.objectives]
    if len(metrics) == 1:
        opt = OptunaSearch(space=define_by_run, metric=metrics[0], mode=modes[0], sampler=sampler)
    else:
        opt = OptunaSearch(space=define_by_run, metric=metrics, mode=modes, sampler=sampler)
    repeater = SeedRepeater(opt, seeds=spec.seeds, defaults=defaults, name=s.searcher)
    repeater.early_stop = early_stop_ray.state_uri(spec) if spec.early_stopping else None
    return repeater
