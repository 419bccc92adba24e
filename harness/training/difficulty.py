"""Driver-side preparation of curriculum difficulty scores (one value per training context).

Text-only scoring functions run directly; sigma_sm gets the packaged encoder's input embeddings
(fastText is not available offline); bert_pred / bert_loss get a teacher ranker fine-tuned on the
training split with this same trainer, trained once per (data, model, teacher seed, budget) and
cached on disk by that fingerprint, so a study never trains the same teacher twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from harness.config import TrialConfig
from harness.curriculum.scoring import ScoringContext, TeacherScores, score_queries
from harness.data.records import Splits

TEACHER_NAMES = ("bert_pred", "bert_loss")
TEACHER_VERSION = 1
Progress = Callable[[str], None]


def cache_root() -> Path:
    return Path(os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "harness").resolve()


def scoring_names(configs: Iterable[TrialConfig]) -> set[str]:
    """The scoring functions a set of configurations needs (curriculum enabled only)."""
    return {c.curriculum.scoring for c in configs if c.curriculum.enabled}


def difficulty_scores(cfg: TrialConfig, splits: Splits, *, progress: Progress | None = None,
                      names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Scores for ``names`` (default: the scoring function ``cfg`` uses, if its curriculum is on)."""
    wanted = sorted(set(names) if names is not None else scoring_names([cfg]))
    if not wanted:
        return {}
    log = progress or (lambda _m: None)
    embed = None
    if "sigma_sm" in wanted:
        from harness.curriculum.embeddings import packaged_embedder

        embed = packaged_embedder()
    teacher = teacher_scores(cfg, splits, progress=log) if set(wanted) & set(TEACHER_NAMES) else None
    out = {}
    for name in wanted:
        # The random scoring function draws from the data's split seed: identical for every trial.
        ctx = ScoringContext(rng=np.random.default_rng([cfg.data.split_seed, 7]), embed=embed,
                             teacher=teacher)
        log(f"curriculum: scoring {len(splits.train)} training contexts with {name}")
        out[name] = score_queries(splits.train, name, ctx)
    return out


def teacher_config(cfg: TrialConfig) -> TrialConfig:
    """The teacher: the same data and model, plain training (no curriculum, weighting, smoothing,
    cascade), seed curriculum.teacher_seed, curriculum.teacher_steps steps (default train.steps)."""
    base = TrialConfig()
    train = dataclasses.replace(cfg.train, seed=cfg.curriculum.teacher_seed, loss="pointwise",
                                steps=cfg.curriculum.teacher_steps or cfg.train.steps)
    return TrialConfig(data=cfg.data, model=cfg.model, train=train, curriculum=base.curriculum,
                       weighting=base.weighting, smoothing=base.smoothing, cascade=base.cascade)


def teacher_fingerprint(cfg: TrialConfig, splits: Splits) -> str:
    t = teacher_config(cfg)
    blob = json.dumps({"data": splits.fingerprint, "model": dataclasses.asdict(t.model),
                       "train": {k: v for k, v in dataclasses.asdict(t.train).items() if k != "device"},
                       "version": TEACHER_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def teacher_scores(cfg: TrialConfig, splits: Splits, *, progress: Progress | None = None) -> TeacherScores:
    """Train (or load from cache) the teacher and score every training candidate with it:
    P(rel) = sigmoid(score) and the per-candidate cross-entropy loss."""
    log = progress or (lambda _m: None)
    path = cache_root() / "teachers" / f"{teacher_fingerprint(cfg, splits)}.json"
    if path.is_file():
        log(f"curriculum: teacher loaded from cache {path}")
        cached = json.loads(path.read_text())
        return TeacherScores(prob=cached["prob"], loss=cached["loss"])
    from harness.training.evaluate import score_queries as score_split
    from harness.training.loop import FinalRecord, Trainer
    from harness.training.prepare import prepare_data

    tcfg = teacher_config(cfg)
    log(f"curriculum: training the teacher ({tcfg.model.name}, seed {tcfg.train.seed}, "
        f"{tcfg.train.steps} steps) on the training split")
    data = prepare_data(splits, tcfg.model)
    trainer = Trainer(tcfg, data)
    for rec in trainer.run():
        if isinstance(rec, FinalRecord):
            log(f"curriculum: teacher test MAP {rec.metrics['map']:.4f}")
    if trainer.best_state is not None:
        trainer.model.load_state_dict(trainer.best_state)
    scores = score_split(trainer.model, trainer.collator, splits.train, data.train,
                         batch_size=tcfg.train.eval_batch_size, device=trainer.device,
                         autocast=trainer.autocast)
    prob: dict[str, dict[str, float]] = {}
    loss: dict[str, dict[str, float]] = {}
    for q, s in zip(splits.train, scores, strict=True):
        labels = np.array([c.label > 0 for c in q.candidates])
        p = 1.0 / (1.0 + np.exp(-s))
        ce = np.where(labels, np.logaddexp(0.0, -s), np.logaddexp(0.0, s))
        prob[q.qid] = {c.doc_id: float(v) for c, v in zip(q.candidates, p, strict=True)}
        loss[q.qid] = {c.doc_id: float(v) for c, v in zip(q.candidates, ce, strict=True)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"prob": prob, "loss": loss}))
    tmp.replace(path)
    log(f"curriculum: teacher cached at {path}")
    return TeacherScores(prob=prob, loss=loss)
