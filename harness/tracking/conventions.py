"""MLflow record conventions (docs/architecture.md, "MLflow records"): the UI and the table exporter rely on them.

experiment = study name; tags mlflow.experimentKind=custom_model_development (a model training
             experiment, not GenAI) and mlflow.sharedViewState.harness-verdicts (the runs table of
             its config runs with their verdicts: runs_page)
  study run   tags: harness.kind=study, harness.study=<name>
              artifacts: study.yaml, resolved/<config_id>.json, tables/*, plots/*
  config run  nested under the study run (mlflow.parentRunId)
              tags: harness.kind=config, harness.config_id, harness.role=baseline|candidate,
                    harness.sequential (a seed schedule: why it got no more seeds)
              metrics: <metric>_mean, <metric>_sd over seeds, test_<metric> (= the mean, under the
                       seed runs' name); vs-baseline results: <metric>_delta, <metric>_p, tag
                       harness.marker.<metric>, tag harness.test (the test behind <metric>_p)
              description (mlflow.note.content): the one-line verdict on the objective metric
  seed run    nested under its config run
              tags: harness.kind=trial, harness.config_id, harness.seed, harness.role,
                    harness.eval_fingerprint (the dev/test candidates it was evaluated on),
                    harness.round (a seed schedule: the round that trained it)
              params: every flat dotted config key
              metrics: dev_<metric> as step metrics (the dev curve); test_<metric> final;
                       best_dev_<metric> (the dev value of the checkpoint that was tested)
              artifact: per_query/test.csv with columns qid, measure, value
  `harness train` records the same: a study run named after its experiment, a config run per
  configuration, a seed run per (configuration, seed).

harness/tracking/records.py is the one module that writes and reads these records.
"""

from __future__ import annotations

import re

# A study's, a configuration's and an experiment's name: it becomes a directory name (Tune state
# <storage_path>/<study>-<phase>, MLflow artifacts <root>/<experiment>, the study's lease file), so
# it is a name, never a path: no separator, no "..", nothing a shell or a URI reads specially.
NAME_RULE = "1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def name_problem(name: object) -> str | None:
    """Why ``name`` is not a safe name (see NAME_RULE), or None where it is one.

    >>> name_problem("wsls-0.2") is None
    True
    >>> print(name_problem("a/b"))
    'a/b' is not a name: use 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit
    """
    if isinstance(name, str) and _NAME.fullmatch(name):
        return None
    return f"{name!r} is not a name: use {NAME_RULE}"


TAG_KIND = "harness.kind"
TAG_STUDY = "harness.study"
TAG_CONFIG_ID = "harness.config_id"
TAG_ROLE = "harness.role"
# A study over several collections: the collection of a config or seed run (its param
# data.collection as well), so the UI groups and filters by it.
TAG_COLLECTION = "harness.collection"
COLLECTION_PARAM = "data.collection"
TAG_SEED = "harness.seed"
TAG_TRIAL_KEY = "harness.trial_key"
TAG_EVAL_FINGERPRINT = "harness.eval_fingerprint"
TAG_MARKER_PREFIX = "harness.marker."
TAG_DONE = "harness.done"  # a seed run's final record is complete ("1")
TAG_ERROR = "harness.error"  # why a seed run failed
TAG_SEEDS = "harness.seeds"  # on a config run: the seeds its mean and SD are over
TAG_REPORT_ERROR = "harness.report_error"  # on the study run: why the report could not be produced
TAG_PARENT = "mlflow.parentRunId"
TAG_LABEL = "harness.label"  # on a config run: how tables name it (the study file's label)
TAG_NOTE = "mlflow.note.content"  # a run's description in the MLflow UI: a config run's verdict
TAG_TEST = "harness.test"  # on a config run: the test behind its <metric>_p
TAG_CORRECTION = "harness.correction"  # ... and the correction of its p-values
# The experiment's kind, which MLflow 3's UI reads to choose its landing page: a study opens on its
# training runs (the runs table), not on the GenAI overview of traces.
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
# MLflow's UI (3.17, 3.18) picks the landing page from its GenAI / Model training switch (remembered per
# browser; the URL's workflowType sets it), not from the kind, and hides the runs table's Description
# column by default. So a study also gets a shared view of its runs table (an experiment tag that the
# URL's viewStateShareKey names): its config runs, sorted by the objective's test mean, with the
# Description (the verdict) and test_<metric> columns. ``runs_page`` is its address.
VERDICT_VIEW = "harness-verdicts"
TAG_VERDICT_VIEW = f"mlflow.sharedViewState.{VERDICT_VIEW}"


def runs_page(experiment_id: str, *, verdicts: bool = True) -> str:
    """The UI address (after the server's root) of a study's runs table with its verdicts (without
    ``verdicts``: the runs table alone, for a study that has no verdict view yet), on the model
    training side of the UI.

    >>> runs_page("3")
    '/#/experiments/3/runs?workflowType=machine_learning&viewStateShareKey=harness-verdicts'
    >>> runs_page("3", verdicts=False)
    '/#/experiments/3/runs?workflowType=machine_learning'
    """
    view = f"&viewStateShareKey={VERDICT_VIEW}" if verdicts else ""
    return f"/#/experiments/{experiment_id}/runs?workflowType=machine_learning{view}"

KIND_STUDY = "study"
KIND_CONFIG = "config"
KIND_TRIAL = "trial"

ROLE_BASELINE = "baseline"
ROLE_CANDIDATE = "candidate"

PER_QUERY_ARTIFACT = "per_query/test.csv"
PER_QUERY_COLUMNS = ("qid", "measure", "value")
STUDY_FILE_ARTIFACT = "study.yaml"
RESOLVED_ARTIFACT = "resolved/{config_id}.json"

DEV_PREFIX = "dev_"
BEST_DEV_PREFIX = "best_dev_"  # seed run: the tested (best-dev) checkpoint's dev metrics
TEST_PREFIX = "test_"
MEAN_SUFFIX = "_mean"
SD_SUFFIX = "_sd"
REFERENCE_METRIC = "reference_{name}_map"  # study run: first-stage and random MAP on the test queries

# Metric names as the harness reports them (MLflow keys allow no "@"): MAP, MRR, MRR@10, P@1
# (= R10@1 with one positive among 10 candidates), nDCG@10, R-Prec.
METRICS = ("map", "mrr", "mrr_10", "p_1", "ndcg_10", "rprec")

# Early stopping (harness.study.early_stop): a stopped configuration's config run and its seed runs
# carry TAG_STOPPED=1, the rung (its step) and the reason; its seed runs end KILLED with their dev
# curves; the table leaves it out and names it in the footnote. The study run gets the trial-steps
# saved and run as metrics.
TAG_STOPPED = "harness.stopped"
TAG_STOPPED_RUNG = "harness.stopped_rung"
TAG_STOPPED_REASON = "harness.stopped_reason"
METRIC_STEPS_SAVED = "early_stopping_steps_saved"
METRIC_STEPS_RUN = "early_stopping_steps_run"
METRIC_STOPPED = "early_stopping_stopped_configs"
# Seed schedules (harness.driver._rounds, harness.stats.sequential): each seed run carries the
# round that trained it; each config run why it got no more seeds ("settled: better at round 2 (6
# seeds)", "futility at round 2 (6 seeds)", "max seeds (12): not settled"; the baseline's says how
# many seeds the open comparisons needed), and the round and seed count where it stopped as metrics.
TAG_ROUND = "harness.round"
TAG_SEQUENTIAL = "harness.sequential"
METRIC_SEQUENTIAL_ROUND = "sequential_round"
METRIC_SEQUENTIAL_SEEDS = "sequential_seeds"
# Phases (harness.driver._confirm): every config run and seed run carries the phase that made it
# (fixed, search, confirmation); the study run names the configurations its confirmation retrains
# (config ids, comma-separated) once they are picked.
TAG_PHASE = "harness.phase"
PHASE_FIXED = "fixed"
PHASE_SEARCH = "search"
PHASE_CONFIRMATION = "confirmation"
TAG_CONFIRM_PICK = "harness.confirmation_pick"
# Where a study's Tune state (trial checkpoints, result.json with the per-query values) lives, and
# how much space it takes at the study's end (study run).
TAG_STORAGE = "harness.storage_path"
# On the study's experiment while a driver runs it (harness.driver.lease): the driver's host,
# pid, start, heartbeat and resume command (JSON), so one driver runs a study from any directory.
TAG_DRIVER = "harness.driver"
# On a seed run that repeated a finished one of the same trial (two drivers of an older version):
# the run it repeats; `harness run --resume` tags and deletes it.
TAG_DUPLICATE_OF = "harness.duplicate_of"
METRIC_STORAGE_BYTES = "storage_bytes"

# Which seed runs log their ranker as an MLflow model at a study's end (study key ``models``):
# the best configuration's seeds, every configuration's, or none.
MODEL_LOGGING = ("best", "all", "none")
# On the study run, one per phase: the keyed digests of the Ray Tune state files the driver wrote
# under <storage_path>/<study>-<phase>/ (harness.driver._state_trust); resume verifies them first.
TAG_TUNE_STATE_PREFIX = "harness.tune_state."
# On the study run of an experiment ``harness train`` made (value "train"): what continues it is
# that command again (with --resume where it kept a checkpoint), not ``harness run STUDY --resume``.
# A driven study's run has no such tag.
TAG_ORIGIN = "harness.origin"
ORIGIN_TRAIN = "train"
