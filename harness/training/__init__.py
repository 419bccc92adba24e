"""Training: the loop (device, bf16 autocast, evaluation every k steps, best-dev checkpoint, resume),
which yields records and knows nothing of Ray or MLflow; a configuration's seeds trained together,
as one fused model where it pays (``SeedGroup``); the data a trial needs prepared once; the
BERT_pred / BERT_loss teacher.
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "EvalRecord",
    "FinalRecord",
    "PreparedData",
    "SeedGroup",
    "StepRecord",
    "Trainer",
    "check_negatives",
    "check_scored",
    "difficulty_scores",
    "prepare_data",
]

__getattr__, __dir__ = face(__name__, {
    "check_negatives": "_instances",
    "check_scored": "_instances",
    "difficulty_scores": "teacher",
    "EvalRecord": "loop",
    "FinalRecord": "loop",
    "prepare_data": "tokenized",
    "PreparedData": "tokenized",
    "SeedGroup": "fused",
    "StepRecord": "loop",
    "Trainer": "loop",
})
