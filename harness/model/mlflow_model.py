"""Trained rankers as MLflow models: the exported folder (``harness.model.export``) wrapped by the
pyfunc in ``pyfunc_ranker.py``, logged under the seed run, so the UI's Models view lists it and
``mlflow.pyfunc.load_model(uri).predict(df)`` scores a DataFrame with columns qid, query, docno,
text. The seed run gets the tag ``harness.model_uri`` (``models:/<id>``); a seed run that has it is
not logged again (a resumed study adds no duplicate models).

``log_study_models`` is called at the end of a study: the seed runs of the best configuration (the
highest mean over seeds of ``objective``, the best dev value of the study metric; never test), or of
every configuration with ``which="all"``.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Collection
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.tracking import conventions as C

TAG_MODEL_URI = "harness.model_uri"
WHICH = C.MODEL_LOGGING


def _pyfunc_file() -> str:
    return str(Path(__file__).with_name("pyfunc_ranker.py"))


def _signature() -> Any:
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    from harness.model.pyfunc_ranker import COLUMNS

    return ModelSignature(inputs=Schema([ColSpec("string", c) for c in COLUMNS]),
                          outputs=Schema([ColSpec("string", "qid"), ColSpec("string", "docno"),
                                          ColSpec("double", "score"), ColSpec("long", "rank")]))


def _requirements() -> list[str]:
    from importlib.metadata import version

    return [f"{p}=={version(p)}" for p in ("mlflow", "torch", "transformers", "pandas", "numpy")]


def log_seed_model(run_id: str, tracking_uri: str) -> str:
    """Logs the seed run's best-dev ranker as an MLflow model under that run; its model URI."""
    import mlflow

    from harness.model.export import MODEL_ARTIFACT, load_seed_model, seed_run_of, write_model

    client = mlflow.tracking.MlflowClient(tracking_uri)
    run = seed_run_of(client, run_id)
    if run.data.tags.get(TAG_MODEL_URI):
        return str(run.data.tags[TAG_MODEL_URI])
    seed_model = load_seed_model(run.info.run_id, tracking_uri)
    mlflow.set_tracking_uri(seed_model.tracking_uri)
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_model(seed_model, Path(tmp) / "ranker")
        with mlflow.start_run(run_id=seed_model.run_id), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*input example.*")  # the signature is explicit
            info = mlflow.pyfunc.log_model(
                name=MODEL_ARTIFACT, python_model=_pyfunc_file(), artifacts={"ranker": str(folder)},
                signature=_signature(), pip_requirements=_requirements(),
                tags={C.TAG_STUDY: seed_model.study, C.TAG_CONFIG_ID: seed_model.config_id,
                      C.TAG_SEED: str(seed_model.seed)})
    uri = f"models:/{info.model_id}"
    client.set_tag(seed_model.run_id, TAG_MODEL_URI, uri)
    return uri


def models_to_log(client: Any, experiment_id: str, which: str = "best",
                  config_ids: Collection[str] | None = None) -> list[str]:
    """The seed runs whose models a study logs: its best configuration's (by mean dev objective over
    finished seeds), or every configuration's. ``config_ids``: the study's own configurations (what
    its phases ran); other configurations in the experiment (an earlier version of the study file,
    or of the code, recorded there) are not considered. None: every configuration."""
    if which not in WHICH:
        raise HarnessError(f"models must be one of {', '.join(WHICH)}, got {which!r}")
    if which == "none":
        return []
    seeds = client.search_runs([experiment_id], filter_string=f"tags.`{C.TAG_KIND}` = '{C.KIND_TRIAL}'",
                               max_results=10_000)
    by_config: dict[str, list[Any]] = {}
    for r in seeds:
        if r.info.status != "FINISHED" or "objective" not in r.data.metrics:
            continue
        if config_ids is None or r.data.tags[C.TAG_CONFIG_ID] in config_ids:
            by_config.setdefault(r.data.tags[C.TAG_CONFIG_ID], []).append(r)
    if not by_config:
        return []
    if which == "best":
        # Ties (equal mean dev objective): the lowest config id, so reruns pick the same one.
        best = max(sorted(by_config), key=lambda c: sum(r.data.metrics["objective"] for r in by_config[c])
                   / len(by_config[c]))
        by_config = {best: by_config[best]}
    return [r.info.run_id for runs in by_config.values()
            for r in sorted(runs, key=lambda r: int(r.data.tags.get(C.TAG_SEED, 0)))]


def log_study_models(tracking_uri: str, experiment_id: str, which: str = "best",
                     progress: Any = None, config_ids: Collection[str] | None = None) -> dict[str, str]:
    """Logs the models ``models_to_log`` picks among ``config_ids`` (None: every configuration in
    the experiment); {seed run id: model URI}. A seed run whose model cannot be built (its
    checkpoint removed) is reported and skipped."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    out: dict[str, str] = {}
    for run_id in models_to_log(client, experiment_id, which, config_ids):
        try:
            out[run_id] = log_seed_model(run_id, tracking_uri)
        except HarnessError as exc:
            if progress is not None:
                progress(f"model: seed run {run_id} not logged: {exc}")
            continue
        if progress is not None:
            progress(f"model: seed run {run_id} logged as {out[run_id]}")
    return out
