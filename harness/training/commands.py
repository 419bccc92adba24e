"""``harness train``: one configuration, one seed, recorded in MLflow."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from harness.config import TrialConfig, flatten, parse_assignments, read_yaml
from harness.errors import ConfigError
from harness.tracking import conventions as C


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
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or ./mlruns)")
    p.add_argument("--no-mlflow", action="store_true", help="do not record the run")
    p.add_argument("--checkpoint-dir", type=Path, help="write a checkpoint here at every evaluation")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --checkpoint-dir")
    p.add_argument("--compare-baselines", action="store_true",
                   help="also print test MAP of BM25 and of a random order on the same test queries")
    p.set_defaults(func=run_train)


def load_config(path: Path | None, assignments: list[str], seed: int | None) -> TrialConfig:
    flat: dict[str, Any] = {}
    if path is not None:
        loaded = read_yaml(path, "config file")[0] or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of config keys")
        flat.update(flatten(loaded))
    flat.update(parse_assignments(assignments))
    if seed is not None:
        flat["train.seed"] = seed
    return TrialConfig.from_flat(flat)


def _fmt(metrics: dict[str, float]) -> str:
    return "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())


def run_train(args: argparse.Namespace) -> int:
    from harness.data.load import load_splits
    from harness.training.difficulty import TEACHER_NAMES, difficulty_scores
    from harness.training.loop import EvalRecord, StepRecord, Trainer
    from harness.training.prepare import prepare_data

    cfg = load_config(args.config, args.assign, args.seed)
    cur = cfg.curriculum
    if cur.enabled and cur.scoring in TEACHER_NAMES and cur.teacher_seed == cfg.train.seed:
        raise ConfigError(f"curriculum.teacher_seed {cur.teacher_seed} equals train.seed "
                          f"{cfg.train.seed}: the student would share its init and negatives with its "
                          f"teacher; choose another teacher seed")
    log = _stderr
    t0 = time.perf_counter()
    splits = load_splits(cfg.data, train_sampler=cfg.train.sampler, progress=log)
    log(f"data: {len(splits.train)} train / {len(splits.dev)} dev / {len(splits.test)} test queries "
        f"(fingerprint {splits.fingerprint[:12]})")
    scores = difficulty_scores([cfg], splits, progress=log)
    data = prepare_data(splits, cfg.model, scores)
    trainer = Trainer(cfg, data)
    if args.resume:
        if args.checkpoint_dir is None:
            raise ConfigError("--resume needs --checkpoint-dir")
        trainer.restore(args.checkpoint_dir)
        log(f"resumed at step {trainer.step}")

    store = run_id = None
    if not args.no_mlflow:
        from harness.tracking.store import TrackingStore

        store = TrackingStore(args.tracking_uri)
        exp = store.experiment(args.experiment)
        run_id = store.start_run(exp, f"{cfg.config_id()}-seed{cfg.train.seed}", {
            C.TAG_KIND: C.KIND_TRIAL, C.TAG_CONFIG_ID: cfg.config_id(),
            C.TAG_SEED: str(cfg.train.seed), C.TAG_ROLE: C.ROLE_CANDIDATE,
            C.TAG_EVAL_FINGERPRINT: splits.evaluation})
        store.log_params(run_id, cfg.to_flat())
        log(f"mlflow: run {run_id} in experiment {args.experiment!r} at {store.uri}")
    status = "FAILED"
    try:
        for rec in trainer.run():
            if isinstance(rec, StepRecord):
                log(f"step {rec.step:>6}/{cfg.train.steps}  loss {rec.loss:.4f}  lr {rec.lr:.2e}  "
                    f"{rec.pairs_per_s:6.1f} pairs/s  pool {rec.available}")
                if store and run_id:
                    store.log_metrics(run_id, {"train_loss": rec.loss, "lr": rec.lr}, step=rec.step)
            elif isinstance(rec, EvalRecord):
                log(f"dev  @{rec.step:>6}: {_fmt(rec.metrics)}{'  (best)' if rec.is_best else ''}")
                if store and run_id:
                    store.log_metrics(run_id, {f"{C.DEV_PREFIX}{k}": v for k, v in rec.metrics.items()},
                                      step=rec.step)
                if args.checkpoint_dir is not None:
                    trainer.save(args.checkpoint_dir)
            else:
                print(f"test (best dev step {rec.best_step}): {_fmt(rec.metrics)}")
                for key in sorted(k for k in rec.cascade if k.startswith("test_exit") and k.endswith("_map")):
                    print(f"  exit after layer {key[9:-4]:>2} alone: map {rec.cascade[key]:.4f}")
                if rec.cascade:
                    print(f"  cascade (alpha {list(cfg.cascade.alpha)}): map {rec.cascade['test_cascade_map']:.4f}"
                          f"  relative cost {rec.cascade['test_cascade_cost']:.3f}")
                if store and run_id:
                    store.log_metrics(run_id, {f"{C.TEST_PREFIX}{k}": v for k, v in rec.metrics.items()})
                    store.log_metrics(run_id, {"best_step": rec.best_step, **rec.resolved, **rec.cascade})
                    store.log_per_query(run_id, rec.per_query)
                if args.compare_baselines:
                    _print_baselines(splits.test, rec.metrics["map"])
        status = "FINISHED"
    finally:
        if store and run_id:
            store.end_run(run_id, status)
    log(f"done in {time.perf_counter() - t0:.0f} s")
    return 0


def _print_baselines(test: Any, trained_map: float) -> None:
    from harness.training.baselines import reference_maps

    refs = reference_maps(test)
    print(f"test MAP on the same {len(test)} queries:")
    print(f"  trained ranker  {trained_map:.4f}")
    print(f"  BM25            {refs['bm25']:.4f}" if "bm25" in refs else
          "  BM25            n/a (candidates carry no BM25 score)")
    print(f"  random order    {refs['random']:.4f}")
    if "bm25" in refs:
        verdict = "beats" if trained_map > refs["bm25"] else "does NOT beat"
        print(f"  the trained ranker {verdict} BM25 by {trained_map - refs['bm25']:+.4f} MAP")


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
