"""The data section of a trial (``data.*`` keys) and the names data knows: the candidate protocols
of the embedded set and the training-negative samplers.

Imports nothing of harness but its errors, so every data module and ``harness.config`` may import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from harness.errors import require

# data.protocol: how the embedded set's candidates (dev and test above all) are built; see
# harness.data._chitchat. train.sampler: where the training negatives come from ("dataset": the
# data set's own candidates; "bm25" is the context protocol, NS_BM25 of Penha & Hauff 2021).
PROTOCOLS = ("response", "context")
# train.sampler -> the negatives method it draws with (harness.data._negatives); "dataset": the data
# set's own candidates. The one list of samplers: validation, messages and the builder read it.
TRAIN_SAMPLERS: Mapping[str, str | None] = MappingProxyType(
    {"dataset": None, "response": "response", "bm25": "context", "random": "random"})


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Where queries come from. ``source``: a name of ``harness.data.sources.SOURCES``: chitchat
    (embedded), msdialog (TSV dir), trec (dir), irds (an ir_datasets data set). What a source needs
    (``data.path``, ``train.sampler``) is checked with the source's entry (``sources.check``), by
    ``TrialConfig`` and ``load_splits``; the checks here need no registry.

    ``context_turns``, ``negatives``, ``protocol`` and ``depth`` shape the embedded set only (the
    other sources bring their own contexts and candidates), but for ``depth`` under irds: the top
    ``depth`` documents of its first-stage run are a query's candidates. ``protocol``: ``response``
    draws each query's negatives uniformly from the top ``depth`` BM25 hits of its true response
    (MSDialog / MANtIS, Yang et al. 2018); ``context`` takes the top BM25 hits of its context
    (NS_BM25 of Penha & Hauff 2021).

    ``irds_id`` (irds): one ir_datasets id, whose queries are split into train/dev/test by
    ``split_seed``, ``dev_fraction`` and ``test_fraction``, or three comma-separated ids, the train,
    dev and test sets. ``irds_register``: a Python module name or ``.py`` file imported first, which
    registers local data sets in ir_datasets (``harness.data._irds``).

    ``collection``: the name of the collection these keys define in a study over several
    collections (the study file's ``collections:`` list sets it); None in a one-collection study.
    """

    source: str = "chitchat"
    path: str | None = None
    context_turns: int = 10
    negatives: int = 9
    protocol: str = "response"
    depth: int = 1000
    split_seed: int = 13
    conversations: int | None = None
    dev_fraction: float = 0.1
    test_fraction: float = 0.1
    max_train_queries: int | None = None
    max_dev_queries: int | None = None
    max_test_queries: int | None = None
    cache_dir: str | None = None
    irds_id: str | None = None
    irds_register: str | None = None
    collection: str | None = None

    def __post_init__(self) -> None:
        require(self.source != "irds" or bool(self.irds_id), "data.irds_id",
               "set for data.source=irds (one ir_datasets id, or train,dev,test ids)", self.irds_id)
        if self.irds_id is not None:
            n = len(self.irds_id.split(","))
            require(n in (1, 3) and all(i.strip() for i in self.irds_id.split(",")), "data.irds_id",
                   "one ir_datasets id or three comma-separated ids (train,dev,test)", self.irds_id)
        require(self.context_turns >= 1, "data.context_turns", ">= 1", self.context_turns)
        require(self.negatives >= 1, "data.negatives", ">= 1", self.negatives)
        require(self.protocol in PROTOCOLS, "data.protocol", f"one of {', '.join(PROTOCOLS)}",
               self.protocol)
        require(self.depth >= 1, "data.depth", ">= 1", self.depth)
        # The splits draw from the seed's low 32 bits: 13 and 2**32 + 13 were one split under two
        # fingerprints and ids. The same range as train.seed.
        require(0 <= self.split_seed <= 2**32 - 1, "data.split_seed", "an integer in [0, 4294967295]",
               self.split_seed)
        require(self.conversations is None or self.conversations >= 3, "data.conversations",
               ">= 3 (one per split) or null for all", self.conversations)
        for key in ("dev_fraction", "test_fraction"):
            v = getattr(self, key)
            require(0.0 < v < 0.5, f"data.{key}", "in (0, 0.5)", v)
        for key in ("max_train_queries", "max_dev_queries", "max_test_queries"):
            v = getattr(self, key)
            require(v is None or v >= 1, f"data.{key}", ">= 1 or null", v)
