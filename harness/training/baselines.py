"""Reference orderings of the same test queries a trained ranker is evaluated on: the first-stage
(BM25) ranking and a random order. One implementation with ``harness data stats``: see
``harness.data.first_stage`` (pessimistic ties; the random MAP is its exact expectation)."""

from __future__ import annotations

from harness.data.first_stage import bm25_scores, reference_maps

__all__ = ["bm25_scores", "reference_maps"]
