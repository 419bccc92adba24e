"""Synthetic study results for the tests of tables, statistics and readers (tests/stats, tests/present,
tests/results): per-query values for a baseline and candidates over seeds, as records, a long CSV
or a finished study in a real MLflow store."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from harness.results.stored import RunRecord

# config -> shift of its per-query MAP against the baseline
EFFECTS = {"base": 0.0, "better": 0.06, "same": 0.0, "worse": -0.08}


def synthetic_records(*, queries: int = 40, seeds: tuple[int, ...] = (1, 2, 3),
                      effects: dict[str, float] | None = None,
                      metrics: tuple[str, ...] = ("map", "mrr")) -> list[RunRecord]:
    g = np.random.default_rng(2024)
    qids = [f"q{i:03d}" for i in range(queries)]
    difficulty = g.uniform(0.2, 0.8, queries)
    records = []
    for config, shift in (effects or EFFECTS).items():
        for seed in seeds:
            per_query = {}
            for k, metric in enumerate(metrics):
                noise = g.normal(0.0, 0.05, queries)
                values = np.clip(difficulty + shift + noise - 0.05 * k, 0.0, 1.0)
                per_query[metric] = dict(zip(qids, values.round(6).tolist(), strict=True))
            records.append(RunRecord(config=config, seed=str(seed), per_query=per_query))
    return records


def write_long_csv(path: Path, records: list[RunRecord], *, per_query: bool = True) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["config", "seed", "metric", "value", "query"] if per_query
                   else ["config", "seed", "metric", "value"])
        for rec in records:
            for metric, values in rec.per_query.items():
                if per_query:
                    w.writerows([rec.config, rec.seed, metric, v, q] for q, v in values.items())
                else:
                    w.writerow([rec.config, rec.seed, metric, float(np.mean(list(values.values())))])
    return path


def log_seed_results(client, run_id: str, rec: RunRecord) -> None:
    """Log a record as the study writer does: test_<metric> per metric and per_query/test.csv."""
    import io

    from harness.tracking import conventions as C

    for metric, values in rec.per_query.items():
        client.log_metric(run_id, f"{C.TEST_PREFIX}{metric}", float(np.mean(list(values.values()))))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(C.PER_QUERY_COLUMNS)
    w.writerows((q, m, repr(v)) for m, vals in rec.per_query.items() for q, v in vals.items())
    client.log_text(run_id, buf.getvalue(), C.PER_QUERY_ARTIFACT)


def write_study_records(uri: str, study: str, records: list[RunRecord], names: dict[str, str], *,
                        failed: bool = True) -> None:
    """A finished study in the MLflow store at ``uri``, written as `harness run` writes it: through
    harness.tracking.records.StudyRecords (real MLflow, no Ray). ``names``: configuration of the
    records -> its display name, the first the baseline. Each record is a finished seed run (its test
    metrics the means of its per-query values, as the trainer logs them); with ``failed`` one more
    seed run failed, which the readers skip (the study then reads as not finished)."""
    write_collections_records(uri, study, {"": records}, names, failed=failed)


def write_collections_records(uri: str, study: str, collections: dict[str, list[RunRecord]],
                              names: dict[str, str], *, failed: bool = True) -> None:
    """``write_study_records`` over several collections: collection -> its records, each run
    carrying its collection (data.collection: the tag and param a study over several collections
    writes) and each collection its own evaluation fingerprint; ``""``: a one-collection study.
    ``failed``: add the failed seed run (the study then reads as not finished)."""
    from harness.config import TrialConfig
    from harness.metrics.measures import mean_of
    from harness.study.protocol import TrialOutcome, TrialTicket
    from harness.tracking import conventions as C
    from harness.tracking.records import StudyRecords
    from harness.tracking.store import TrackingStore

    def tickets(collection: str) -> dict[str, tuple]:
        out = {}
        for i, (config, name) in enumerate(names.items()):
            flat = {"model.name": "tiny"} if i == 0 else {"model.name": "tiny", "smoothing.method": "LS",
                                                           "smoothing.epsilon": 0.1 * i}
            if collection:
                flat["data.collection"] = collection
            role = C.ROLE_BASELINE if i == 0 else C.ROLE_CANDIDATE
            out[config] = (name, role, TrialConfig.from_flat(flat))
        return out

    from mlflow.tracking._tracking_service import utils as mlflow_tracking

    with pytest.MonkeyPatch.context() as mp:
        # TrackingStore sets MLflow's process-wide tracking URI (a global and the environment);
        # both are put back on exit, so later tests see the default they set up.
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setattr(mlflow_tracking, "_tracking_uri", mlflow_tracking._tracking_uri)
        writer = StudyRecords.open(TrackingStore(uri), study)
        writer.study_started(params={})
        for collection, records in collections.items():
            mine = tickets(collection)
            for rec in records:
                ticket = TrialTicket.of(*mine[rec.config], int(rec.seed))
                test = {m: mean_of(values.values()) for m, values in rec.per_query.items()}
                outcome = TrialOutcome(ticket.key, test["map"], test=test, evaluation=f"eval-{collection or 1}")
                writer.trial_finished(ticket, outcome, {m: dict(v) for m, v in rec.per_query.items()})
        if failed:
            name, role, cfg = tickets(next(iter(collections)))[next(iter(names))]
            writer.trial_failed(TrialTicket.of(name, role, cfg, 99), "injected")
        writer.end()


def write_unfinished_studies(uri: str) -> str:
    """A study "one" over one collection and "many" over collections a and b, baseline and better
    (+0.06), 8 queries, each with a failed seed run: two studies that did not finish; returns ``uri``."""
    names, effects = {"base": "baseline", "better": "better"}, {"base": 0.0, "better": 0.06}
    write_study_records(uri, "one", synthetic_records(queries=8, effects=effects), names, failed=True)
    write_collections_records(uri, "many", {c: synthetic_records(queries=8, effects=effects) for c in ("a", "b")},
                              names, failed=True)
    return uri
