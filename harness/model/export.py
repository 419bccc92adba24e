"""A trained ranker out of a study, as a folder other tools load (``harness export RUN_ID --to DIR``).

Where the weights come from: a seed run's best-dev weights live in its Ray Tune trial's last
checkpoint (``<storage_path>/<study>-<phase>/<trial>/checkpoint_*/trainer.pt``, ``best_state``;
the trial is found by the seed run's ``harness.trial_key``; a seed group's trial keeps each seed's in
``checkpoint_*/members/<trial key>/``), or, once logged at the end of a study
(``harness.model.mlflow_model``), in the seed run's MLflow model. A configuration run stands for its
best seed: the highest ``objective`` (the best dev value of the study's metric; never test).

What the folder holds:
- plain rankers: a ``BertForSequenceClassification`` (num_labels=1; the harness's parameter names
  are that class's, so the weights map 1:1), its tokenizer (model_max_length = the trial's
  ``model.max_length``; pair truncation in ``tokenization_harness.py``) and ``config.json`` (model
  type ``harness_bert``, ``modeling_harness.py``) telling sentence-transformers to apply no
  activation, so ``CrossEncoder(DIR, trust_remote_code=True).predict`` returns the harness's
  scores; loads with ``AutoModelForSequenceClassification.from_pretrained(DIR,
  trust_remote_code=True)`` as well;
- cascade rankers: the encoder and every exit classifier in ``model.safetensors``, the exits in
  ``harness_cascade.json``, and the same tokenizer; ``load_cascade(DIR)`` (or the MLflow pyfunc)
  scores with the final exit or runs the cascade;
- ``README.md``: a model card naming the study, configuration, seed, best step and test metrics;
  ``harness_export.json``: the same facts, machine-readable.

Inputs: the "query" is the conversation context as one text (utterances oldest first, joined by
spaces, ``harness.model.collate.context_text``) and the "text" a candidate response. The harness
truncates the oldest context first, which no truncation strategy of transformers does; the folder
carries the harness's tokenizer (``tokenization_harness.py``, named in ``tokenizer_config.json``'s
``auto_map``), which loaders use with ``trust_remote_code=True``: then sentence-transformers,
transformers, the MLflow pyfunc and the PyTerrier re-ranker all score as the run did
(``usage`` says how, and ``harness export`` prints it). Without it, these loaders refuse the
folder (a model type and a tokenizer class transformers does not know) rather than load the plain
BERT tokenizer, which truncates the longer text from its end (docs/exchange.md).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.model.encoder import EXPORTED_MARK
from harness.tracking import conventions as C

CHECKPOINT_FILE = "trainer.pt"
EXPORT_INFO = EXPORTED_MARK
CASCADE_INFO = "harness_cascade.json"
MODEL_ARTIFACT = "model"  # the seed run's MLflow model (harness.model.mlflow_model)


@dataclass(frozen=True)
class SeedModel:
    """One seed run's best-dev ranker and what the model card says about it."""

    run_id: str
    study: str
    config_name: str
    config_id: str
    role: str
    seed: int
    flat: dict[str, Any]
    state: dict[str, Any] = field(repr=False)
    best_step: int
    test: dict[str, float]
    objective: float | None
    tracking_uri: str

    @property
    def cascade(self) -> bool:
        return bool(self.flat.get("cascade.enabled"))


# -- finding the run and its checkpoint -----------------------------------------------------------

def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    from harness.tracking.store import TrackingStore, check_existing_store

    if not uri:
        return MlflowClient()
    check_existing_store(uri)  # a mistyped store is refused, never created
    return TrackingStore(uri).client


def _get_run(client: Any, run_id: str) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id)
    except MlflowException:
        raise HarnessError(f"run id {run_id!r}: no such MLflow run at {client.tracking_uri}") from None


def seed_run_of(client: Any, run_id: str) -> Any:
    """The seed run ``run_id`` names: itself, or for a configuration run its best seed by dev
    objective (ties: the lowest seed). Other runs are refused."""
    run = _get_run(client, run_id)
    kind = run.data.tags.get(C.TAG_KIND)
    if kind == C.KIND_CONFIG:
        children = client.search_runs(
            [run.info.experiment_id],
            filter_string=f"tags.`mlflow.parentRunId` = '{run_id}' and tags.`{C.TAG_KIND}` = '{C.KIND_TRIAL}'",
            max_results=10_000)
        done = [r for r in children if r.info.status == "FINISHED" and "objective" in r.data.metrics]
        if not done:
            raise HarnessError(f"run id {run_id}: configuration run {run.info.run_name!r} has no finished seed run")
        done.sort(key=lambda r: (-r.data.metrics["objective"], int(r.data.tags.get(C.TAG_SEED, 0))))
        return done[0]
    if kind != C.KIND_TRIAL:
        what = f"a {kind} run" if kind else "not a harness run"
        raise HarnessError(f"run id {run_id}: {what}, not a seed run (harness.kind=trial) or a configuration run")
    if run.info.status != "FINISHED" or not any(k.startswith(C.TEST_PREFIX) for k in run.data.metrics):
        raise HarnessError(f"run id {run_id}: seed run {run.info.run_name!r} did not finish "
                           f"(status {run.info.status}); it has no best-dev checkpoint")
    return run


def _parent(client: Any, run: Any) -> Any:
    parent = run.data.tags.get("mlflow.parentRunId")
    if not parent:
        raise HarnessError(f"run id {run.info.run_id}: seed run has no parent run (not written by a harness study)")
    return _get_run(client, parent)


def trial_checkpoint(storage: str, study: str, trial_key: str) -> Path:
    """The newest ``trainer.pt`` of the Tune trial that trained ``trial_key``."""
    if "://" in storage:
        raise HarnessError(f"study.storage_path {storage} is not a local path; export reads local Tune storage only")
    found: list[Path] = []
    for phase in ("fixed", "search"):
        for result in Path(storage, f"{study}-{phase}").glob("*/result.json"):
            try:
                with result.open() as fh:
                    first = json.loads(fh.readline() or "{}")
            except (OSError, ValueError):
                continue
            if first.get("trial_key") == trial_key:
                found += result.parent.glob(f"checkpoint_*/{CHECKPOINT_FILE}")
            elif any(m.get("trial_key") == trial_key for m in first.get("members") or ()):
                # a seed group's trial (resources.seeds_per_trial): each seed in its own folder
                found += result.parent.glob(f"checkpoint_*/members/{trial_key}/{CHECKPOINT_FILE}")
    if not found:
        raise HarnessError(f"seed {trial_key} of study {study!r}: no Tune checkpoint under {storage}/{study}-* "
                           "(removed, or the trial was replayed from MLflow by a fresh driver) and no logged model")
    return max(found, key=lambda p: (p.stat().st_mtime, str(p)))


def _best_state(path: Path, config_id: str, seed: int) -> tuple[dict[str, Any], int]:
    from harness.model.checkpoint import read_checkpoint

    state = read_checkpoint(path)
    if state.get("config_id") != config_id or int(state.get("seed", -1)) != seed:
        raise HarnessError(f"{path}: checkpoint of configuration {state.get('config_id')} seed {state.get('seed')}, "
                           f"expected {config_id} seed {seed}")
    best = state.get("best_state") or state["model"]
    return dict(best), int(state.get("best_step") or state.get("step", 0))


def load_seed_model(run_id: str, tracking_uri: str, *, logged: bool = True) -> SeedModel:
    """The best-dev weights and card facts of the seed run ``run_id`` names (see ``seed_run_of``):
    from its logged MLflow model where it has one (unless ``logged`` is False), else from its Tune
    checkpoint."""
    client = _client(tracking_uri)
    run = seed_run_of(client, run_id)
    config = _parent(client, run)
    study_run = _parent(client, config)
    tags = run.data.tags
    config_id, seed = tags[C.TAG_CONFIG_ID], int(tags[C.TAG_SEED])
    with tempfile.TemporaryDirectory() as tmp:
        resolved = client.download_artifacts(config.info.run_id, f"resolved/{config_id}.json", tmp)
        flat = json.loads(Path(resolved).read_text())
    flat["train.seed"] = seed
    found = _logged_state(client, run) if logged else None
    if found is not None:
        state, best_step = found
    else:
        storage = study_run.data.params.get("study.storage_path")
        if not storage:  # `harness train`'s runs: no Tune storage, no model logged
            raise HarnessError(f"run id {run_id}: its study run records no Tune storage (study.storage_path) "
                               "and the run logged no model, as a `harness train` run's: export the runs of a "
                               "study (`harness run`), or keep `harness train --checkpoint-dir`'s trainer.pt")
        state, best_step = _best_state(trial_checkpoint(storage, tags[C.TAG_STUDY], tags[C.TAG_TRIAL_KEY]),
                                       config_id, seed)
    metrics = run.data.metrics
    return SeedModel(run_id=run.info.run_id, study=tags[C.TAG_STUDY], config_name=config.info.run_name,
                     config_id=config_id, role=tags.get(C.TAG_ROLE, ""), seed=seed, flat=flat, state=state,
                     best_step=int(metrics.get("best_step", best_step)),
                     test={k[len(C.TEST_PREFIX):]: v for k, v in sorted(metrics.items())
                           if k.startswith(C.TEST_PREFIX)},
                     objective=metrics.get("objective"), tracking_uri=client.tracking_uri)


def _logged_state(client: Any, run: Any) -> tuple[dict[str, Any], int] | None:
    """The weights of the seed run's MLflow model, where one was logged (durable beyond Tune)."""
    uri = run.data.tags.get("harness.model_uri")
    if not uri:
        return None
    import mlflow
    from mlflow.exceptions import MlflowException
    from safetensors.torch import load_file

    with tempfile.TemporaryDirectory() as tmp:
        try:
            folder = Path(mlflow.artifacts.download_artifacts(
                artifact_uri=f"{uri}/artifacts/ranker", dst_path=tmp, tracking_uri=client.tracking_uri))
        except (MlflowException, OSError):
            return None
        info = json.loads((folder / EXPORT_INFO).read_text())
        state = load_file(str(folder / "model.safetensors"))
    if not info.get("cascade"):
        state = dict(state)  # saved as BertForSequenceClassification: the ranker's own names
    return state, int(info.get("best_step", 0))


# -- writing the folder ---------------------------------------------------------------------------

def _ranker(seed_model: SeedModel) -> Any:
    """The harness module of the seed run, with its best-dev weights."""
    from harness.config import TrialConfig
    from harness.model.factory import build_model

    cfg = TrialConfig.from_flat(dict(seed_model.flat))
    model = build_model(cfg, seed=cfg.train.seed)
    try:
        model.load_state_dict(seed_model.state)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0]
        raise HarnessError(f"seed run {seed_model.run_id}: its checkpoint does not fit the ranker "
                           f"(trained before the sequence-classification head?): {first[:200]}") from None
    return model.eval()


def write_model(seed_model: SeedModel, target: Path) -> Path:
    """The loadable folder of ``seed_model`` at ``target`` (created; must not exist or be empty)."""
    from harness.config import TrialConfig
    from harness.model.encoder import load_tokenizer

    cfg = TrialConfig.from_flat(dict(seed_model.flat))
    model = _ranker(seed_model)
    target.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(cfg.model)
    tokenizer.model_max_length = cfg.model.max_length
    if seed_model.cascade:
        _write_cascade(model, target)
    else:
        _write_sequence_classifier(model, target)
    tokenizer.save_pretrained(str(target))
    _harness_tokenizer(target, cfg.model.max_length)
    info = {"study": seed_model.study, "configuration": seed_model.config_name,
            "config_id": seed_model.config_id, "role": seed_model.role, "seed": seed_model.seed,
            "run_id": seed_model.run_id, "tracking_uri": seed_model.tracking_uri,
            "best_step": seed_model.best_step, "dev_objective": seed_model.objective,
            "test": seed_model.test, "max_length": cfg.model.max_length, "cascade": seed_model.cascade,
            "config": seed_model.flat}
    (target / EXPORT_INFO).write_text(json.dumps(info, indent=1, sort_keys=True, default=str) + "\n")
    (target / "README.md").write_text(model_card(info, getattr(model, "exits", None)))
    follow_umask(target)
    return target


# Keys a base tokenizer's saved config may carry that contradict model_max_length (a stale
# "max_length: 128" beside "model_max_length: 64" reads as the pair length to a person and to tools).
STALE_TOKENIZER_KEYS = ("max_length", "truncation", "truncation_strategy", "stride", "padding")


def _harness_tokenizer(target: Path, max_length: int) -> None:
    """The saved tokenizer loads as ``HarnessBertTokenizer`` (the harness's pair truncation) where
    the loader trusts the folder's code, and not at all where it does not: ``tokenizer_class`` names
    a class transformers does not have, so ``AutoTokenizer`` asks for ``trust_remote_code``.
    ``model_max_length`` is the trial's pair length and no other length key is left.

    The vocabulary stays in ``tokenizer.json`` at the folder's root, where a generic class could
    read it too: hidden under another name, ``BertTokenizer.from_pretrained(DIR)`` (a class named
    explicitly, no auto_map consulted) builds a five-token vocabulary without a word and scores
    every pair as unknown tokens, which is worse than another truncation; ``AutoTokenizer``
    refuses the folder without ``trust_remote_code`` either way (tests/model/test_export_loaders.py)."""
    from harness.model import tokenization_harness

    module = _copy_module(tokenization_harness, target)
    name = tokenization_harness.HarnessBertTokenizer.__name__
    path = target / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["auto_map"] = {"AutoTokenizer": [None, f"{module}.{name}"]}
    config["tokenizer_class"] = name
    config["model_max_length"] = max_length
    for key in STALE_TOKENIZER_KEYS:
        config.pop(key, None)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _copy_module(module: Any, target: Path) -> str:
    """Copy a module that an exported folder loads as its own code; its name in ``auto_map``."""
    source = Path(module.__file__)
    shutil.copyfile(source, target / source.name)
    return source.stem


def _write_sequence_classifier(model: Any, target: Path) -> None:
    from harness.model import modeling_harness
    from harness.model.modeling_harness import HarnessBertConfig, HarnessBertForSequenceClassification

    encoder = model.encoder
    if getattr(encoder.config, "model_type", "") != "bert" or model.prefix != "bert":
        raise HarnessError(f"export supports BERT encoders, got model_type {encoder.config.model_type!r}")
    settings = encoder.config.to_dict()
    settings.pop("model_type", None)
    config = HarnessBertConfig.from_dict(settings)
    config.num_labels = 1
    module = _copy_module(modeling_harness, target)
    config.architectures = [HarnessBertForSequenceClassification.__name__]
    # A model type plain loaders do not know: they refuse the folder instead of scoring long pairs
    # with another truncation (modeling_harness.py says why).
    config.auto_map = {"AutoConfig": f"{module}.{HarnessBertConfig.__name__}",
                       "AutoModelForSequenceClassification": f"{module}.{HarnessBertForSequenceClassification.__name__}"}
    # CrossEncoder(DIR).predict returns the raw logit, the harness's score (not its sigmoid).
    config.sentence_transformers = {"activation_fn": "torch.nn.modules.linear.Identity"}
    hf = HarnessBertForSequenceClassification(config)
    missing, unexpected = hf.load_state_dict(model.state_dict(), strict=False)
    if missing or unexpected:
        raise HarnessError(f"the ranker's weights do not map onto BertForSequenceClassification "
                           f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    hf.save_pretrained(str(target))


def _write_cascade(model: Any, target: Path) -> None:
    from safetensors.torch import save_file

    encoder = model.encoder
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(target / "model.safetensors"))
    encoder.config.save_pretrained(str(target / "encoder"))
    (target / CASCADE_INFO).write_text(json.dumps({
        # one ratio per exit with 0 last, a form CascadePlan.build reads back: the plan's own, a single
        # ratio given for every exit, kept it at the final exit too, which build refuses
        "exits": list(model.exits), "alpha": [*model.plan.alphas[:-1], 0.0], "rounding": model.plan.rounding,
        "num_layers": model.num_layers}, indent=1) + "\n")


def load_cascade(directory: str | Path) -> Any:
    """The ``CascadeRanker`` of an exported cascade folder (eval mode)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModel

    from harness.model._cascade import CascadeRanker

    d = Path(directory)
    info = json.loads((d / CASCADE_INFO).read_text())
    config = AutoConfig.from_pretrained(str(d / "encoder"))
    encoder = AutoModel.from_config(config, attn_implementation="sdpa")
    model = CascadeRanker(encoder, exits=info["exits"], alpha=info["alpha"], rounding=info["rounding"])
    model.load_state_dict(load_file(str(d / "model.safetensors")))
    return model.eval()


def model_card(info: dict[str, Any], exits: tuple[int, ...] | None) -> str:
    metrics = "\n".join(f"| {k} | {v:.4f} |" for k, v in info["test"].items())
    # Under the squared-error loss the output regresses the 0/1 label: a score, not a logit.
    regression = info["config"].get("train.loss") == "pointwise_mse"
    output = ("one output, a regression of the 0/1 relevance label (trained with squared error, "
              "train.loss pointwise_mse): higher = more relevant, not a logit" if regression
              else "one output logit (the relevance score)")
    if exits is None:
        head = ("library_name: sentence-transformers\npipeline_tag: text-ranking\n"
                "tags: [cross-encoder, harness]")
        use = ("```python\nfrom sentence_transformers import CrossEncoder\n"
               f"model = CrossEncoder(DIR, trust_remote_code=True)  # {'scores' if regression else 'raw logits'}: "
               "higher = more relevant\n"
               "scores = model.predict([(context, response), ...])\n```\n\n"
               "Or `AutoModelForSequenceClassification.from_pretrained(DIR, trust_remote_code=True)` "
               f"({'one output' if regression else 'one logit'}) with "
               "`AutoTokenizer.from_pretrained(DIR, trust_remote_code=True)`; "
               "`tokenizer(contexts, responses, truncation=True)`.")
        arch = f"BertForSequenceClassification, {output}."
    else:
        head = "library_name: harness\ntags: [cross-encoder, cascade, harness]"
        use = ("```python\nfrom harness.model.export import load_cascade\nmodel = load_cascade(DIR)\n```\n\n"
               "Or the MLflow pyfunc logged with the seed run (columns qid, query, docno, text).")
        arch = (f"Cascade Transformer (Soldaini & Moschitti 2020): exits after layers {list(exits)}, each a "
                f"3-layer classifier on the mean of its layer's token encodings, {output}; the score is the "
                f"final exit (layer {exits[-1]}); the cascade drops the lowest alpha={info['config'].get('cascade.alpha')} "
                f"share of candidates at each exit. Weights in model.safetensors, exits in {CASCADE_INFO}.")
    return f"""---
{head}
---

# {info['study']} / {info['configuration']} / seed {info['seed']}

A response re-ranker trained by the harness study **{info['study']}**: configuration
**{info['configuration']}** ({info['role']}, config id `{info['config_id']}`), seed **{info['seed']}**,
the best-dev checkpoint (step {info['best_step']}, dev objective {info['dev_objective']}).
MLflow seed run `{info['run_id']}` at `{info['tracking_uri']}`.

Model: {arch}

## Test metrics (this seed)

| metric | value |
|---|--:|
{metrics}

## Use

{use}

Input: the query is the conversation context as one text (utterances oldest first, joined by
spaces), the text a candidate response; at most {info['max_length']} tokens per pair, the oldest
context dropped first, as in training. `trust_remote_code=True` loads the tokenizer that does this
(`tokenization_harness.py`, in this folder); without it, transformers and sentence-transformers
refuse this folder rather than truncate pairs over {info['max_length']} tokens another way.

The full configuration is in `{EXPORT_INFO}`.
"""


def usage(folder: str | Path) -> list[str]:
    """How each loader scores pairs as the run did from an exported folder (``harness export``
    prints it). The pyfunc and PyTerrier re-ranker load the folder's tokenizer themselves."""
    d = Path(folder)
    tokenizer = f'AutoTokenizer.from_pretrained("{d}", trust_remote_code=True)'
    if json.loads((d / EXPORT_INFO).read_text()).get("cascade"):
        first = [f'harness: harness.model.export.load_cascade("{d}").score(batch), batch from {tokenizer}']
    else:
        first = [f'sentence-transformers: CrossEncoder("{d}", trust_remote_code=True).predict(pairs)',
                 (f'transformers: AutoModelForSequenceClassification.from_pretrained("{d}", trust_remote_code=True)'
                  f' + {tokenizer}'),
                 ("(trust_remote_code=True: the folder's tokenization_harness.py drops the oldest context "
                  "first, as the harness; without it, these loaders refuse the folder)")]
    return [*first, f'PyTerrier: harness.model.pyterrier_ranker.HarnessReRanker("{d}")',
            "MLflow: mlflow.pyfunc.load_model(uri), uri = a seed run's tag harness.model_uri"]


def export_run(run_id: str, target: str | Path, tracking_uri: str) -> Path:
    """``harness export``: refuses a target that exists and is not an empty directory."""
    from harness.textfile import unwritable_dir

    out = Path(target)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise HarnessError(f"--to {out}: exists and is not an empty directory")
    problem = unwritable_dir(out)  # before the run is read; an error named the temporary folder
    if problem:
        raise HarnessError(f"--to {out}: {problem}")
    seed_model = load_seed_model(run_id, tracking_uri)
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=out.parent if out.parent.exists() else None))
    try:
        write_model(seed_model, tmp / "model")
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            out.rmdir()
        shutil.move(str(tmp / "model"), str(out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def follow_umask(folder: Path) -> None:
    """Give every file under ``folder`` the mode a plain ``open`` gives (0666 less the umask) and
    every folder 0777 less it: safetensors writes ``model.safetensors`` 0600 whatever the umask."""
    from harness.textfile import umask

    mask = umask()
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)
