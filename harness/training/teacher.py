"""Driver-side preparation of curriculum difficulty scores (one value per training context).

Scores are keyed by ``score_key``: by default a scoring function sees the candidates a trial
trains on (the positive and the negatives its seed draws), as in the authors' code, so scores are
computed per seed; ``curriculum.candidates: all`` scores every candidate of a context.
Text-only scoring functions run directly; sigma_sm gets the packaged encoder's input embeddings
(fastText is not available offline); bert_pred / bert_loss get a teacher ranker fine-tuned on the
training split with this same trainer, trained once per (data, model, teacher seed, budget) and
cached on disk by that fingerprint, so a study never trains the same teacher twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence

import numpy as np

from harness.config import TrialConfig
from harness.curriculum.scoring import ScoringContext, TeacherScores, score_queries
from harness.data.cache import cache_root
from harness.errors import DataError
from harness.records import Query, Splits
from harness.textfile import write_atomic
from harness.training._instances import trained_candidates, trial_instances
from harness.training._teacher_id import TEACHER_NAMES, teacher_config, teacher_settings

TEACHER_VERSION = 1
Progress = Callable[[str], None]


def teacher_shares_seed(cfg: TrialConfig, seeds: Sequence[int]) -> bool:
    """Whether ``cfg`` trains a teacher (bert_pred, bert_loss) with one of ``seeds``: that seed's
    student would share its init and its negatives with its teacher (``harness run`` and ``harness
    train`` refuse it)."""
    cur = cfg.curriculum
    return cur.enabled and cur.scoring in TEACHER_NAMES and cur.teacher_seed in seeds


def trained_subset(queries: Sequence[Query], cfg: TrialConfig) -> list[Query]:
    """Each training query restricted to the candidates a trial of ``cfg`` trains on (the positive
    and the negatives its seed draws; see harness.training._instances). A query without training
    instances (no positive) keeps all its candidates: no instance ever reads its score."""
    chosen = trained_candidates(trial_instances(queries, cfg.train), len(queries))
    return [q if not idx else dataclasses.replace(q, candidates=tuple(q.candidates[i] for i in idx))
            for q, idx in zip(queries, chosen, strict=True)]


def difficulty_scores(configs: Sequence[TrialConfig], splits: Splits, *,
                      progress: Progress | None = None) -> dict[str, np.ndarray]:
    """One value per training query for every ``score_key`` of ``configs`` (each with its seed)
    whose curriculum is on. A teacher (bert_pred, bert_loss) is trained once per distinct
    ``teacher_config`` among them (a configuration's own teacher seed, budget and training
    settings; its key names it, ``teacher_key``) and reused for every key it scores."""
    from harness.training.tokenized import score_key  # imports the tokenizer: on first use

    wanted: dict[str, TrialConfig] = {}
    for cfg in configs:
        if cfg.curriculum.enabled:
            wanted.setdefault(score_key(cfg), cfg)
    if not wanted:
        return {}
    log = progress or (lambda _m: None)
    names = {cfg.curriculum.scoring for cfg in wanted.values()}
    embed = None
    if "sigma_sm" in names:
        from harness.curriculum.embeddings import packaged_embedder

        embed = packaged_embedder()
    teachers: dict[str, TeacherScores] = {}
    out = {}
    for key, cfg in sorted(wanted.items()):
        teacher = None
        if cfg.curriculum.scoring in TEACHER_NAMES:
            which = teacher_fingerprint(cfg, splits)
            if which not in teachers:
                teachers[which] = teacher_scores(cfg, splits, progress=log)
            teacher = teachers[which]
        pair = cfg.curriculum.candidates == "pair"
        queries = trained_subset(splits.train, cfg) if pair else splits.train
        ctx = ScoringContext(rng=np.random.default_rng([cfg.train.seed, 7]), embed=embed, teacher=teacher)
        log(f"curriculum: scoring {len(queries)} training contexts with {key}")
        out[key] = score_queries(queries, cfg.curriculum.scoring, ctx)
    return out


def teacher_fingerprint(cfg: TrialConfig, splits: Splits) -> str:
    blob = json.dumps({"data": splits.fingerprint, **teacher_settings(cfg), "version": TEACHER_VERSION},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def teacher_scores(cfg: TrialConfig, splits: Splits, *, progress: Progress | None = None) -> TeacherScores:
    """Train (or load from cache) the teacher and score every training candidate with it:
    P(rel) = sigmoid(score) and the per-candidate cross-entropy loss."""
    log = progress or (lambda _m: None)
    path = cache_root(cfg.data) / "teachers" / f"{teacher_fingerprint(cfg, splits)}.json"
    if path.is_file():
        log(f"curriculum: teacher loaded from cache {path}")
        cached = json.loads(path.read_text())
        return TeacherScores(prob=cached["prob"], loss=cached["loss"])
    from harness.model.scoring import score_candidates as score_split
    from harness.training.loop import FinalRecord, Trainer
    from harness.training.tokenized import prepare_data

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
    try:  # whole or absent (textfile.write_atomic): a failed write left its temporary file behind
        write_atomic(path, json.dumps({"prob": prob, "loss": loss}), "teacher cache")
        log(f"curriculum: teacher cached at {path}")
    except DataError as exc:  # the scores are in hand: the run goes on, the next one trains it again
        log(f"curriculum: the teacher could not be cached at {path}: {str(exc).removeprefix(f'{path}: ')}; "
            "the next run trains it again")
    return TeacherScores(prob=prob, loss=loss)
