"""The study's MLflow records: study run > config run > seed run (see conventions.py).

Idempotent by construction: every run is found by its tags before one is created, and a seed run is
marked done only once, so a resumed study (a fresh driver) adds no duplicate runs and never rewrites
a finished trial. All writes happen on the driver.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.tracking import conventions as C
from harness.tracking.store import TrackingStore

TAG_DONE = "harness.done"


@dataclass(frozen=True)
class TrialIdentity:
    """Who a trial is: its configuration (id, display name, role), seed and flat config."""

    config_id: str
    name: str
    role: str
    seed: int
    flat: Mapping[str, Any]

    @property
    def key(self) -> str:
        return f"{self.config_id}-seed{self.seed}"


class StudyWriter:
    def __init__(self, store: TrackingStore, experiment_id: str, study_name: str) -> None:
        self.store = store
        self.experiment_id = experiment_id
        self.study_name = study_name
        self._study: str | None = None
        self._configs: dict[str, str] = {}
        self._seeds: dict[str, str] = {}
        self._done: set[str] = set()
        self._last_step: dict[str, int] = {}
        self._test: dict[str, dict[int, dict[str, float]]] = {}
        self._objective: dict[str, float] = {}
        self._load()

    def _search(self, kind: str) -> list[Any]:
        return list(self.store.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{C.TAG_KIND}` = '{kind}'", max_results=50000))

    def _load(self) -> None:
        """Recover what earlier drivers recorded (resume)."""
        for run in self._search(C.KIND_STUDY):
            self._study = run.info.run_id
        for run in self._search(C.KIND_CONFIG):
            self._configs[run.data.tags[C.TAG_CONFIG_ID]] = run.info.run_id
        for run in self._search(C.KIND_TRIAL):
            key = run.data.tags.get(C.TAG_TRIAL_KEY)
            if not key:
                continue
            self._seeds[key] = run.info.run_id
            if run.data.tags.get(TAG_DONE) == "1":
                self._done.add(key)
                self._objective[key] = float(run.data.metrics.get("objective", math.nan))
                cid, seed = run.data.tags[C.TAG_CONFIG_ID], int(run.data.tags[C.TAG_SEED])
                self._test.setdefault(cid, {})[seed] = {
                    k[len(C.TEST_PREFIX):]: v for k, v in run.data.metrics.items() if k.startswith(C.TEST_PREFIX)}

    # -- runs ----------------------------------------------------------------------------------

    def study_run(self, *, study_text: str, params: Mapping[str, Any]) -> str:
        if self._study is None:
            self._study = self.store.start_run(self.experiment_id, self.study_name, {
                C.TAG_KIND: C.KIND_STUDY, C.TAG_STUDY: self.study_name})
            self.store.log_text(self._study, study_text, "study.yaml")
            self.store.log_params(self._study, params)
        return self._study

    def config_run(self, ident: TrialIdentity) -> str:
        run = self._configs.get(ident.config_id)
        if run is None:
            if self._study is None:
                raise RuntimeError("study_run() must be called before config runs are created")
            run = self.store.start_run(self.experiment_id, ident.name, {
                C.TAG_KIND: C.KIND_CONFIG, C.TAG_CONFIG_ID: ident.config_id, C.TAG_ROLE: ident.role,
                C.TAG_STUDY: self.study_name}, parent=self._study)
            flat = {k: v for k, v in ident.flat.items() if k != "train.seed"}
            self.store.log_params(run, flat)
            self.store.log_json(run, flat, f"resolved/{ident.config_id}.json")
            self._configs[ident.config_id] = run
        return run

    def seed_run(self, ident: TrialIdentity) -> str:
        run = self._seeds.get(ident.key)
        if run is None:
            parent = self.config_run(ident)
            run = self.store.start_run(self.experiment_id, f"{ident.name}-seed{ident.seed}", {
                C.TAG_KIND: C.KIND_TRIAL, C.TAG_CONFIG_ID: ident.config_id, C.TAG_ROLE: ident.role,
                C.TAG_SEED: str(ident.seed), C.TAG_TRIAL_KEY: ident.key, C.TAG_STUDY: self.study_name},
                parent=parent)
            self.store.log_params(run, dict(ident.flat))
            self._seeds[ident.key] = run
        return run

    def is_done(self, key: str) -> bool:
        return key in self._done

    def done_objectives(self) -> dict[str, float]:
        """Finished trials (by trial key) and the objective they reported."""
        return {k: self._objective.get(k, math.nan) for k in self._done}

    # -- results -------------------------------------------------------------------------------

    def dev_point(self, ident: TrialIdentity, step: int, metrics: Mapping[str, float]) -> None:
        """One point of the dev curve; a point at or before the last logged step is skipped (a
        retried trial re-reports from its checkpoint)."""
        if self.is_done(ident.key):
            return
        run = self.seed_run(ident)
        if step <= self._last_step.get(ident.key, 0):
            return
        self._last_step[ident.key] = step
        self.store.log_metrics(run, {f"{C.DEV_PREFIX}{k}": v for k, v in metrics.items()}, step=step)

    def finish_seed(self, ident: TrialIdentity, test: Mapping[str, float],
                    per_query: Mapping[str, Mapping[str, float]], extra: Mapping[str, float],
                    evaluation: str | None = None) -> None:
        """The final record of a seed run; ``evaluation`` is the fingerprint of the dev/test
        candidates it was evaluated on (tag harness.eval_fingerprint)."""
        if self.is_done(ident.key):
            return
        run = self.seed_run(ident)
        self.store.log_metrics(run, {f"{C.TEST_PREFIX}{k}": v for k, v in test.items()})
        self.store.log_metrics(run, extra)
        self.store.log_per_query(run, per_query)
        if evaluation:
            self.store.set_tags(run, {C.TAG_EVAL_FINGERPRINT: evaluation})
        self.store.set_tags(run, {TAG_DONE: "1"})
        self.store.end_run(run, "FINISHED")
        self._done.add(ident.key)
        self._test.setdefault(ident.config_id, {})[ident.seed] = dict(test)

    def fail_seed(self, ident: TrialIdentity, error: str) -> None:
        if self.is_done(ident.key):
            return
        run = self.seed_run(ident)
        self.store.set_tags(run, {"harness.error": error[:5000]})
        self.store.end_run(run, "FAILED")

    def aggregate(self, config_id: str, seeds: Sequence[int]) -> dict[str, float] | None:
        """Mean and sample SD over seeds into the config run, once every seed is done."""
        per_seed = self._test.get(config_id, {})
        if any(s not in per_seed for s in seeds) or config_id not in self._configs:
            return None
        out: dict[str, float] = {}
        for metric in per_seed[seeds[0]]:
            vals = [per_seed[s][metric] for s in seeds]
            out[f"{metric}_mean"] = statistics.fmean(vals)
            out[f"{metric}_sd"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
        run = self._configs[config_id]
        self.store.log_metrics(run, {k: v for k, v in out.items() if math.isfinite(v)})
        self.store.set_tags(run, {"harness.seeds": ",".join(map(str, seeds))})
        return out

    def config_runs(self) -> dict[str, str]:
        return dict(self._configs)

    def end(self, status: str = "FINISHED") -> None:
        for run in self._configs.values():
            self.store.end_run(run, status)
        if self._study:
            self.store.end_run(self._study, status)
