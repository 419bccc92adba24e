"""Searcher plumbing of the search phase: Optuna proposes configurations (define-by-run over the
study's space), ``SeedRepeater`` runs every proposal once per study seed, turns each into a
``TrialTicket`` (the one config shape of both phases) and reports the mean over seeds to Optuna.
With ``resources.seeds_per_trial: k`` a proposal runs once per seed group (``seed_groups``), and
Optuna gets the mean over the proposal's seeds: each group's mean weighted by its seed count.

Over several collections (docs/study-file.md, "Collections") a proposal runs once per (collection,
seed group), each trial the proposal with the collection's data keys (one name on every collection,
one config id per collection, as a fixed configuration); Optuna gets the mean over the collections
of each collection's mean over its seeds, or with ``search.objective_collection`` that collection's
mean alone. Tune's searcher state (this repeater and Optuna's study) resumes as for one collection.

A proposal that repeats a known configuration (its config id is the baseline's, a listed
configuration's or an earlier proposal's) is not trained: training it again would spend a proposal's
trials on a result the study already has (or is getting), and its records would fold into the known
configuration's. The repeater tells Optuna that proposal failed (Optuna's samplers leave failed
trials out of their models, so nothing is learnt twice or wrongly: an earlier proposal's value is in
Optuna already, a listed configuration's never was) and asks again, under a new id, for the same
trial; each repeat is a progress line. ``search.num_configs`` is the number of distinct
configurations trained. After ``MAX_REPEATS`` repeats in a row (a space with fewer distinct
configurations than ``num_configs``, or a searcher that keeps to one) the search ends with those it
proposed, and says so."""

from __future__ import annotations

import copy
import math
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
from ray.tune.search import Repeater, Searcher
from ray.tune.search.repeater import _TrialGroup

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


MAX_REPEATS = 50  # proposals in a row that repeat known configurations before the search ends


class _Proposal(_TrialGroup):
    """A proposal's trials. ``primary_trial_id`` is the id Optuna knows it by: its first trial's,
    or, where the searcher was asked again past repeated configurations, that ask's id."""

    def __init__(self, first_trial: str, asked: str, config: dict, max_trials: int) -> None:
        super().__init__(first_trial, config, max_trials=max_trials)
        self.primary_trial_id = asked


class SeedRepeater(Repeater):
    """Every proposal once per study seed, as tickets; averages a list of metrics too (multi-objective
    NSGA-II)."""

    def __init__(self, searcher: Searcher, *, seeds: tuple[int, ...], defaults: Mapping[str, Any],
                 name: str, seeds_per_trial: int = 1, collections: Mapping[str, Mapping[str, Any]] | None = None,
                 objective_collection: str | None = None, known: Mapping[str, str] | None = None,
                 num_configs: int | None = None) -> None:
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
        # config id -> name of every configuration the study trains: the fixed ones (``known``),
        # then each proposal (on every collection)
        self.known: dict[str, str] = dict(known or {})
        self.repeats = 0  # proposals not trained: they repeated a known configuration
        self.num_configs = num_configs
        self.told = 0  # proposals whose value Optuna got

    def suggest(self, trial_id: str) -> dict | None:
        group = self._current_group
        if group is None or group.full():
            found = self._propose(trial_id)
            if found is None or found == Searcher.FINISHED:
                return found
            asked, proposal = found
            group = self._current_group = _Proposal(trial_id, asked, copy.deepcopy(proposal), self.repeat)
            self._groups.append(group)
            index = 0
        else:
            index = group.count()
            group.add(trial_id)
        self._trial_id_to_group[trial_id] = group
        config = dict(group.config)
        groups = self.seed_groups()
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

    def _propose(self, trial_id: str) -> tuple[str, dict] | str | None:
        """The searcher's next proposal that is no known configuration, with the id it was asked
        under (module docstring); FINISHED after ``MAX_REPEATS`` repeats in a row. Repeats make one
        progress line per proposal, however many there were."""
        known = self.__dict__.setdefault("known", {})  # a repeater pickled by an older driver has none
        repeated: dict[str, int] = {}  # the known configurations proposed again here -> how often
        for k in range(MAX_REPEATS + 1):
            asked = trial_id if k == 0 else f"{trial_id}-again{k}"
            config = self.searcher.suggest(asked)
            if config is None or config == Searcher.FINISHED:
                return config
            name, ids = self._identify(config)
            same = next((known[c] for c in ids if c in known), None)
            if same is None:
                known.update(dict.fromkeys(ids, name))
                if repeated:
                    print(f"[search] {self.name}: {sum(repeated.values())} proposal(s) repeated known "
                          f"configurations ({_counted(repeated)}): not trained, {self.name} asked again "
                          f"({self.repeats} so far)", file=sys.stderr, flush=True)
                return asked, config
            self.searcher.on_trial_complete(asked, result=None, error=True)  # Optuna: FAIL, out of its model
            self.repeats = self.__dict__.get("repeats", 0) + 1
            repeated[same] = repeated.get(same, 0) + 1
        print(f"[search] {self.name}: {MAX_REPEATS + 1} proposals in a row repeated known configurations "
              f"({_counted(repeated)}); the search ends with the {len(self._groups)} distinct configuration(s) "
              f"it proposed{f' (num_configs {self.num_configs})' if self.__dict__.get('num_configs') else ''}",
              file=sys.stderr, flush=True)
        return Searcher.FINISHED

    def _identify(self, config: Mapping[str, Any]) -> tuple[str, list[str]]:
        """A proposal's name and its config ids (one per collection, as its trials will have)."""
        ticket = TrialTicket.proposed(config, self.defaults, self.seeds[0], self.name)
        names = list(self.__dict__.get("collections") or {})
        if not names:
            return ticket.name, [ticket.config_id]
        return ticket.name, [TrialConfig.from_flat(self.collections[c], base=ticket.config()).config_id()
                             for c in names]

    def _tell(self, primary_trial_id: str, result: dict, **kwargs: Any) -> None:
        """Optuna gets a proposal's value; after the last of ``num_configs``, a line says how many
        proposals repeated known configurations (where any did)."""
        self.searcher.on_trial_complete(primary_trial_id, result=result, **kwargs)
        self.told = self.__dict__.get("told", 0) + 1
        repeats, wanted = self.__dict__.get("repeats", 0), self.__dict__.get("num_configs")
        if repeats and self.told == wanted:
            print(f"[search] {self.name}: {wanted} distinct configuration(s) trained; {repeats} proposal(s) "
                  "repeated known configurations and were not trained", file=sys.stderr, flush=True)

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
        group = self._trial_id_to_group[trial_id]
        if not isinstance(metric, list):  # as Repeater: the mean over the seeds that have a value
            group.report(trial_id, result[metric] if result and metric in result else np.nan)
            if group.finished_reporting():
                self._tell(group.primary_trial_id, {metric: float(np.nanmean(group.scores()))}, **kwargs)
            return None
        group.report(trial_id, [result.get(m, np.nan) for m in metric] if result else [np.nan] * len(metric))
        if group.finished_reporting():
            scores = np.array(group.scores(), dtype=float)
            means = np.nanmean(scores, axis=0)
            self._tell(group.primary_trial_id, dict(zip(metric, means.tolist(), strict=True)), **kwargs)
        return None

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
        self._tell(group.primary_trial_id, out, **kwargs)


def _counted(names: Mapping[str, int]) -> str:
    """``baseline x3, faster`` (the first 5)."""
    shown = [f"{n} x{c}" if c > 1 else n for n, c in list(names.items())[:5]]
    return ", ".join(shown) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


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
                            objective_collection=spec.objective_collection,
                            known={nc.config.config_id(): nc.name for nc in spec.fixed_configs()},
                            num_configs=s.num_configs)
    repeater.early_stop = early_stop_ray.state_uri(spec) if spec.early_stopping else None
    return repeater
