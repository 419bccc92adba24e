"""The MLflow pyfunc of an exported ranker (an MLflow "model from code": this file is stored with
the model, with the exported folder as the artifact ``ranker``).

``predict`` takes a DataFrame with columns qid, query, docno, text (the PyTerrier re-ranking
layout; query = the conversation context as one text) and returns qid, docno, score, rank (rank 1 =
best within its qid, as in TREC run files; ties by input order). Pairs are built by the folder's tokenizer
(``tokenization_harness.py``, written by the export) as the harness's collator builds them:
``[CLS] query [SEP] text [SEP]``, at most ``max_length`` tokens, the OLDEST query tokens dropped
first, so scores equal the harness's own. Plain rankers need only torch and transformers here; cascade
rankers score with their final exit and need the harness installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import torch

COLUMNS = ("qid", "query", "docno", "text")


class ExportedRanker:
    """An exported folder (``harness export``) scoring (query, text) pairs as the harness does."""

    batch_size = 64

    def __init__(self, folder: str | Path) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        folder = Path(folder)
        info = json.loads((folder / "harness_export.json").read_text())
        self.max_length = int(info["max_length"])
        # The folder's own tokenizer (tokenization_harness.py): pairs truncated as the harness does.
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=True)
        if type(self.tokenizer).__name__ != "HarnessBertTokenizer":
            raise ValueError(f"{folder}: exported without the harness's tokenizer (tokenization_harness.py); "
                             "export it again")
        if info.get("cascade"):
            from harness.model.export import load_cascade

            self.model = load_cascade(folder)
            self.forward = self.model.score
        else:
            self.model = AutoModelForSequenceClassification.from_pretrained(str(folder), trust_remote_code=True).eval()
            self.forward = lambda batch: self.model(**batch).logits[:, 0]

    @torch.no_grad()
    def scores(self, queries: list[str], texts: list[str]) -> np.ndarray:
        """(n,) scores of the pairs (queries[i], texts[i])."""
        if not len(queries):
            return np.zeros(0, dtype=np.float64)
        enc = self.tokenizer(list(queries), list(texts), truncation=True, max_length=self.max_length)
        rows = enc["input_ids"]
        out = np.zeros(len(rows), dtype=np.float64)
        order = np.argsort([-len(ids) for ids in rows], kind="stable")
        for start in range(0, len(order), self.batch_size):
            chosen = order[start:start + self.batch_size]
            batch = self.tokenizer.pad({k: [v[i] for i in chosen] for k, v in enc.items()}, return_tensors="pt")
            out[chosen] = self.forward(dict(batch)).float().numpy()
        return out

    def rank(self, frame: pd.DataFrame) -> pd.DataFrame:
        """qid, docno, score, rank of the rows of ``frame`` (columns qid, query, docno, text)."""
        missing = [c for c in COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"input needs columns {', '.join(COLUMNS)}; missing {', '.join(missing)}")
        df = frame.reset_index(drop=True)
        scores = self.scores(df["query"].astype(str).tolist(), df["text"].astype(str).tolist())
        out = pd.DataFrame({"qid": df["qid"].astype(str), "docno": df["docno"].astype(str), "score": scores})
        out["rank"] = out.groupby("qid", sort=False)["score"].rank(method="first", ascending=False).astype(int)
        return out


class HarnessRanker(mlflow.pyfunc.PythonModel):  # type: ignore[misc]
    def load_context(self, context: Any) -> None:
        self.ranker = ExportedRanker(context.artifacts["ranker"])

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        return self.ranker.rank(model_input)


# The model MLflow loads from this file (a model from code); a no-op for a plain import.
mlflow.models.set_model(HarnessRanker())
