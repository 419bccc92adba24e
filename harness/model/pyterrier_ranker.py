"""A PyTerrier re-ranker over an exported ranker (``harness export``): a ``pt.Transformer`` that
scores each (query, text) row of a PyTerrier frame (qid, query, docno, text) as the harness does
and adds score and rank. Pure Python: PyTerrier's core needs no JVM for it (Terrier retrieval
stages before it do).

    >>> reranker = HarnessReRanker("models/quickstart-baseline")   # doctest: +SKIP
    >>> pipeline = retriever >> pt.text.get_text(dataset, "text") >> reranker   # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.errors import HarnessError

try:
    import pyterrier as pt
except ImportError:  # pragma: no cover - an optional dependency
    raise HarnessError("the PyTerrier re-ranker needs PyTerrier: pip install python-terrier") from None


class HarnessReRanker(pt.Transformer):  # type: ignore[misc]
    def __init__(self, folder: str | Path) -> None:
        from harness.model.pyfunc_ranker import ExportedRanker

        self.folder = str(folder)
        self.ranker = ExportedRanker(folder)

    def transform(self, inp: Any) -> Any:
        ranked = self.ranker.rank(inp)
        out = inp.drop(columns=[c for c in ("score", "rank") if c in inp.columns]).reset_index(drop=True)
        out["score"] = ranked["score"].to_numpy()
        return pt.model.add_ranks(out)
