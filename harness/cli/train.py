"""``harness train``: one configuration, one seed, recorded in MLflow as a one-configuration study
(harness.tracking.records): experiment = --experiment, its study run, a config run per
configuration and the seed run, with the same tags and metrics as a study's seed run."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config import (
    MAX_SEED,
    MAX_YAML_BYTES,
    KeyLines,
    TrialConfig,
    blame_assignment,
    flatten,
    parse_assignments,
    read_yaml,
)
from harness.data.sources import unread, unread_error
from harness.errors import ConfigError
from harness.study.protocol import DevPoint, TrialOutcome, TrialTicket
from harness.study.trial import run_trial, write_trial_files
from harness.tracking import conventions as C
from harness.tracking.store import DEFAULT_STORE

if TYPE_CHECKING:
    from harness.tracking.records import StudyRecords


def register(sub: Any) -> None:
    p = sub.add_parser(
        "train", help="train one configuration with one seed and record it in MLflow",
        description="Train one ranker configuration with one seed: dev evaluation every "
        "train.eval_every steps, the best-dev checkpoint evaluated on test, everything recorded in "
        "MLflow (SQLite store under ./mlruns unless MLFLOW_TRACKING_URI or --tracking-uri is set).",
        epilog="example: harness train --set model.name=tiny --set train.steps=50 --seed 3",
    )
    p.add_argument("--config", type=Path, help="YAML file of config keys (nested sections or flat dotted keys)")
    p.add_argument("--set", dest="assign", action="append", default=[], metavar="KEY=VALUE",
                   help="override one flat dotted key, e.g. curriculum.pacing=root_n (repeatable)")
    p.add_argument("--seed", type=int, help="the trial seed (train.seed)")
    p.add_argument("--experiment", default="harness-train", help="MLflow experiment name")
    p.add_argument("--tracking-uri", metavar="URI", help=f"MLflow store (default: {DEFAULT_STORE})")
    p.add_argument("--no-mlflow", action="store_true", help="do not record the run")
    p.add_argument("--checkpoint-dir", type=Path, help="write a checkpoint here at every evaluation")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --checkpoint-dir")
    p.add_argument("--compare-baselines", action="store_true",
                   help="also print test MAP of BM25 and of a random order on the same test queries")
    p.set_defaults(func=run_train)


def load_config(path: Path | None, assignments: list[str], seed: int | None) -> TrialConfig:
    """The config file's keys, then the ``--set`` assignments, then ``--seed``; an error about a
    key the file sets (and nothing overrides) names the file and the key's line."""
    flat: dict[str, Any] = {}
    lines: KeyLines | None = None
    if path is not None:
        _check_config_size(path)
        loaded, _, lines = read_yaml(path, "config file")
        if not isinstance(loaded, dict | None):
            raise ConfigError(f"{path}: expected a mapping of config keys")
        try:
            flat.update(flatten(loaded or {}))
        except ConfigError as exc:  # one key dotted and nested: the file's line of it
            raise ConfigError(f"{path}{lines.at(exc.key) if exc.key else ''}: {exc}", key=exc.key) from None
    overrides = parse_assignments(assignments)
    if seed is not None:
        if not 0 <= seed <= MAX_SEED:
            raise ConfigError(f"--seed must be an integer in [0, {MAX_SEED}], got {seed}", key="train.seed")
        overrides["train.seed"] = seed
    from_file = set(flat) - set(overrides)
    flat.update(overrides)
    try:
        cfg = TrialConfig.from_flat(flat)
        if ignored := unread(cfg.data):  # a key its data source does not read
            raise unread_error(cfg.data.source, ignored[0])
        return cfg
    except ConfigError as exc:
        if lines is None or exc.key not in from_file:
            raise blame_assignment(exc, assignments) from None
        raise ConfigError(f"{path}{lines.at(exc.key)}: {exc}", key=exc.key) from None


def _check_config_size(path: Path) -> None:
    """A ``--config`` file over ``MAX_YAML_BYTES`` is refused unread, in words about a config file:
    read_yaml's own refusal is a study file's ("list fewer configurations or seeds, or split the
    study"), and a config file holds one configuration's keys, so one that large is likely not the
    file meant (a FIFO or a missing file is left to read_yaml, which names what it is)."""
    try:
        size = path.stat().st_size if path.is_file() else 0
    except OSError:
        return
    if size > MAX_YAML_BYTES:
        raise ConfigError(f"--config {path}: a config file holds at most {MAX_YAML_BYTES // 1024} KiB, this one "
                          f"{size} bytes; it sets the keys of one configuration (a few lines): is it the file "
                          "you meant?")


def _fmt(metrics: dict[str, float]) -> str:
    return "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())


def run_train(args: argparse.Namespace) -> int:
    from harness.data.load import load_splits
    from harness.driver import interrupts
    from harness.training.loop import Trainer
    from harness.training.teacher import difficulty_scores, teacher_shares_seed
    from harness.training.tokenized import prepare_data

    cfg = load_config(args.config, args.assign, args.seed)
    from harness.model.encoder import check_model_fits, check_model_name

    try:  # before minutes of data building; a value --set gave names its assignment
        check_model_name(cfg.model.name)
        check_model_fits(cfg.model)
        check_device(cfg.train.device)
    except ConfigError as exc:
        raise blame_assignment(exc, args.assign or []) from None
    if args.resume and args.checkpoint_dir is None:
        raise ConfigError("--resume needs --checkpoint-dir")
    if args.checkpoint_dir is not None:
        _check_checkpoint_dir(Path(args.checkpoint_dir), args.resume)
    if not args.no_mlflow:
        from harness.study.validate import check_tracking_uri

        args.tracking_uri = check_tracking_uri(args.tracking_uri)  # a folder store, a missing driver: one line
    cur = cfg.curriculum
    if teacher_shares_seed(cfg, [cfg.train.seed]):
        raise ConfigError(f"curriculum.teacher_seed {cur.teacher_seed} equals train.seed "
                          f"{cfg.train.seed}: the student would share its init and negatives with its "
                          f"teacher; choose another teacher seed")
    log = _stderr
    t0 = time.perf_counter()
    # A one-configuration study: the configuration is named by its id; checked before any data loads.
    ticket = TrialTicket.of(cfg.config_id(), C.ROLE_CANDIDATE, cfg, cfg.train.seed)
    records = None if args.no_mlflow else _records(args, ticket)
    with interrupts():  # SIGTERM and SIGHUP stop it as Ctrl-C does: its runs end, none left RUNNING
        splits = load_splits(cfg.data, train_sampler=cfg.train.sampler, progress=log)
        log(f"data: {len(splits.train)} train / {len(splits.dev)} dev / {len(splits.test)} test queries "
            f"(fingerprint {splits.fingerprint[:12]})")
        scores = difficulty_scores([cfg], splits, progress=log)
        data = prepare_data(splits, cfg.model, scores)
        trainer = Trainer(cfg, data)
        if args.resume:
            try:
                trainer.restore(args.checkpoint_dir)
            except ConfigError as exc:
                raise ConfigError(f"--checkpoint-dir {args.checkpoint_dir}: {exc}") from None
            log(f"resumed at step {trainer.step}")
        # The runs open only now: data that does not load or a checkpoint refused leaves none behind.
        if records:
            records.study_started(tags={C.TAG_ORIGIN: C.ORIGIN_TRAIN})
            try:
                log(f"mlflow: run {records.trial_started(ticket)} in experiment {args.experiment!r} at "
                    f"{records.store.uri}")
            except BaseException:
                records.end("FAILED")
                raise
        sink = _TerminalSink(cfg, ticket, records, splits, log, args.checkpoint_dir, trainer,
                             args.compare_baselines)
        try:
            run_trial(ticket, trainer, sink, metric=cfg.train.select_metric)
        except BaseException as exc:
            if records:  # a stop (Ctrl-C, SIGTERM, SIGHUP) ends every run KILLED, a failure FAILED
                status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
                records.trial_failed(ticket, f"{type(exc).__name__}: {exc}", status=status)
                records.end(status, configs=[ticket.config_id])
            raise
        if records:
            records.end(configs=[ticket.config_id])
    log(f"done in {time.perf_counter() - t0:.0f} s")
    return 0


def check_device(name: str) -> None:
    """``train.device`` names a device this machine has: cuda without a CUDA GPU was an assertion
    traceback from torch after the data was built."""
    if name.startswith("cuda"):
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(name.partition(":")[2] or 0)
        if index >= count:
            have = f"{count} CUDA GPU(s)" if count else "no CUDA GPU (or a torch built without CUDA)"
            raise ConfigError(f"train.device={name}: this machine has {have}; use train.device=cpu or auto",
                              key="train.device")


def _check_checkpoint_dir(directory: Path, resume: bool) -> None:
    """Before any data is built: ``--checkpoint-dir`` can be written, and holds a checkpoint exactly
    when ``--resume`` asks to continue one (a new run there replaced another run's resumable
    checkpoint without a word)."""
    from harness.textfile import unwritable_dir
    from harness.training.loop import CHECKPOINT_FILE

    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"--checkpoint-dir {directory}: exists and is not a directory")
    problem = unwritable_dir(directory)
    if problem:
        raise ConfigError(f"--checkpoint-dir {directory}: {problem}")
    held = (directory / CHECKPOINT_FILE).is_file()
    if resume and not held:
        raise ConfigError(f"--checkpoint-dir {directory}: no checkpoint ({CHECKPOINT_FILE}) there to resume")
    if held and not resume:
        raise ConfigError(f"--checkpoint-dir {directory} holds a checkpoint ({CHECKPOINT_FILE}): pass --resume to "
                          "continue it, or choose another folder for a new run")


class _TerminalSink:
    """``harness train``'s records: progress on stderr, the test result on stdout, and (unless
    --no-mlflow) the same MLflow records as a study's seed run: dev and train curves, test metrics,
    per-query values, TREC run files, and the qrels on the study run."""

    def __init__(self, cfg: TrialConfig, ticket: TrialTicket, records: StudyRecords | None, splits: Any,
                 log: Any, checkpoint_dir: Path | None, trainer: Any, compare_baselines: bool) -> None:
        self.cfg, self.ticket, self.records, self.splits, self.log = cfg, ticket, records, splits, log
        self.checkpoint_dir, self.trainer, self.compare_baselines = checkpoint_dir, trainer, compare_baselines

    def step(self, rec: Any) -> None:
        self.log(f"step {rec.step:>6}/{self.cfg.train.steps}  loss {rec.loss:.4f}  lr {rec.lr:.2e}  "
                 f"{rec.pairs_per_s:6.1f} pairs/s  pool {rec.available}")
        if self.records:
            self.records.train_point(self.ticket, rec.step, rec.loss, rec.lr)

    def evaluation(self, rec: Any, point: DevPoint) -> None:
        self.log(f"dev  @{rec.step:>6}: {_fmt(rec.metrics)}{'  (best)' if rec.is_best else ''}")
        if self.records:
            self.records.dev_point(self.ticket, rec.step, rec.metrics)
        if self.checkpoint_dir is not None:
            self.trainer.save(self.checkpoint_dir)

    def finished(self, outcome: TrialOutcome, rec: Any) -> None:
        from harness.metrics.trec import qrels_artifacts, split_qrels

        print(f"test (best dev step {rec.best_step}): {_fmt(rec.metrics)}")
        for key in sorted(k for k in rec.cascade if k.startswith("test_exit") and k.endswith("_map")):
            print(f"  exit after layer {key[9:-4]:>2} alone: map {rec.cascade[key]:.4f}")
        if rec.cascade:
            print(f"  cascade (alpha {list(self.cfg.cascade.alpha)}): map {rec.cascade['test_cascade_map']:.4f}"
                  f"  relative cost {rec.cascade['test_cascade_cost']:.3f}")
        if self.records:
            with tempfile.TemporaryDirectory() as tmp:
                # the same records as a study's seed run: TREC run files, qrels on the study run
                runs = write_trial_files(tmp, self.ticket, self.splits, rec)
                self.records.trial_finished(self.ticket, outcome, rec.per_query,
                                            files=[(f, "runs") for f in runs])
                self.records.study_artifacts(
                    files=[(f, "qrels") for f in qrels_artifacts(tmp, split_qrels(self.splits))])
        if self.compare_baselines:
            _print_baselines(self.splits.test, rec.metrics["map"])


def _records(args: argparse.Namespace, ticket: TrialTicket) -> StudyRecords:
    """The experiment's records, refusing a (configuration, seed) it has recorded as finished (a
    second seed run of it would make the experiment untabulable)."""
    from harness.tracking import conventions as C
    from harness.tracking.records import StudyRecords, iter_runs
    from harness.tracking.store import TrackingStore

    store = TrackingStore(args.tracking_uri)
    # A study's experiment (harness run: it has a baseline configuration, which harness train never
    # records) is not harness train's: its study run would be reopened and ended by this run, its
    # qrels replaced, and a configuration of one seed added to its table.
    existing = store.client.get_experiment_by_name(args.experiment)
    if existing is not None and any(r.data.tags.get(C.TAG_ROLE) == C.ROLE_BASELINE
           for r in iter_runs(store.client, existing.experiment_id, C.KIND_CONFIG)):
        raise ConfigError(f"--experiment {args.experiment}: it is a study's experiment (harness run), whose "
                          "records this run would change; give harness train an experiment of its own")
    records = StudyRecords.open(store, args.experiment)
    done = records.done_run(ticket.key)
    if done is not None:
        raise ConfigError(f"experiment {args.experiment!r} already has a finished run of configuration "
                          f"{ticket.config_id} with seed {ticket.seed} (run {done.run_id}); choose another "
                          f"--seed or --experiment, or pass --no-mlflow")
    return records


def _print_baselines(test: Any, trained_map: float) -> None:
    from harness.training.baselines import reference_maps

    refs = reference_maps(test)
    print(f"test MAP on the same {len(test)} queries:")
    print(f"  trained ranker  {trained_map:.4f}")
    print(f"  BM25            {refs['bm25']:.4f}" if "bm25" in refs else
          "  BM25            n/a (candidates carry no BM25 score)")
    print(f"  random order    {refs['random']:.4f}")
    if "bm25" in refs:
        gap = trained_map - refs["bm25"]  # "does NOT beat BM25 by -0.2591" read as a double negative
        verdict = "beats" if gap > 0 else "trails" if gap < 0 else "ties with"
        print(f"  the trained ranker {verdict} BM25" + (f" by {abs(gap):.4f} MAP" if gap else ""))


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
