"""The embedded data set: conversation response ranking built from the chitchat-dataset package.

Source: ``chitchat_dataset/dataset.json`` (7,168 conversations). Each conversation's ``messages``
is a list of message groups, each a list of ``{text, sender, ...}``. Consecutive messages of one
sender, across groups too, form one utterance: their stripped texts joined with a space (blank
messages are dropped first, so they never split an utterance).

Queries (the task of Penha & Hauff 2020): for conversation c with utterances u_0..u_{n-1} and each
turn t >= 1, the context U is u_{t-k}..u_{t-1} (``data.context_turns`` = k, oldest first), the
positive r+ is u_t, and ``data.negatives`` negatives come from ``harness.data._negatives``, by the
evaluation protocol ``data.protocol``:

- ``response`` (default; MSDialog/MANtIS of Yang et al. 2018, as in Penha & Hauff 2020): drawn
  uniformly (seeded by split_seed, conversation and turn) from the top ``data.depth`` BM25 hits of
  r+ among the utterances of all other conversations;
- ``context`` (NS_BM25 of Penha & Hauff 2021): the top BM25 hits of U.

Every candidate, r+ included, scores BM25 of U (its utterances' tokens, concatenated) against it:
the first-stage ranking that sigma_BM25, the difficulty heuristics and WSLS read, and the
reference BM25 MAP. Under ``context`` the negatives are the top of that very ranking, so r+
mostly ranks last (BM25 MAP below a random order's); under ``response`` they are not chosen by it.

Training negatives (``train.sampler``; ``build_train_payload``) may come from another method (the other
protocol, or ``random``: uniform over the other conversations' utterances); only the train split
is rebuilt, dev and test keep the protocol's candidates.

The BM25 index spans every utterance of every conversation in the file, whatever
``data.conversations`` selects, so a subset gets the negatives the full set would.

Ids: document ``c{conv}u{utt}``, query ``c{conv}t{turn}``, group ``c{conv}`` (conv = position in
the file). Candidates: the positive first, then the negatives by score, best first (evaluation
breaks ties itself, so the order leaks nothing). Conversations with one utterance give no query.
The seeded subset and the split by conversation are ``harness.data._splits``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.data import _negatives as neg
from harness.data import cache
from harness.data._bm25 import BM25Index, tokenize
from harness.data._progress import Progress
from harness.data._splits import GroupSplit, choose_subset, split_groups
from harness.data.config import TRAIN_SAMPLERS, DataConfig
from harness.errors import ConfigError, DataError
from harness.records import Query, Splits


@dataclass(frozen=True, slots=True)
class Conversation:
    index: int
    key: str
    utterances: tuple[str, ...]


def default_path() -> Path:
    """The dataset.json shipped in the chitchat-dataset package."""
    try:
        from importlib.resources import files

        return Path(str(files("chitchat_dataset") / "dataset.json"))
    except ModuleNotFoundError:
        raise DataError("the embedded data set needs chitchat-dataset: "
                        "pip install chitchat-dataset") from None


def merge_utterances(groups: Sequence[Sequence[dict[str, Any]]]) -> tuple[str, ...]:
    """Utterances of one conversation from its message groups (see the module docstring).

    >>> merge_utterances([[{"text": "hi", "sender": "a"}], [{"text": "yo", "sender": "b"}],
    ...                   [{"text": "how are", "sender": "b"}, {"text": "you?", "sender": "b"}]])
    ('hi', 'yo how are you?')
    """
    utterances: list[list[str]] = []
    previous: object = None
    for group in groups:
        for message in group:
            text = message["text"].strip()
            if not text:
                continue
            if utterances and message["sender"] == previous:
                utterances[-1].append(text)
            else:
                utterances.append([text])
            previous = message["sender"]
    return tuple(" ".join(parts) for parts in utterances)


class _RepeatedKey(Exception):
    def __init__(self, key: str, top: bool) -> None:
        super().__init__(key)
        self.key, self.top = key, top


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, refusing a key given twice (``json`` keeps the last). The file's
    top object (the conversations) is the last to close, so it is the one whose values hold the
    messages: ``top`` where the values are conversations."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _RepeatedKey(key, isinstance(value, dict) and "messages" in value)
        out[key] = value
    return out


def read_conversations(path: Path) -> tuple[Conversation, ...]:
    """Parse a chitchat-format JSON file: ``{conversation_id: {"messages": [[message, ...], ...]}}``."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh, object_pairs_hook=_unique_keys)
    except _RepeatedKey as exc:  # json keeps the last: a conversation under a repeated id vanished
        what = "conversation id" if exc.top else "key"
        raise DataError(f"{path}: {what} {exc.key!r} appears twice in one object (JSON keeps only the last); "
                        "rename one") from None
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read: {exc}") from None
    except RecursionError:  # the parser recurses once per level of nesting
        raise DataError(f"{path}: JSON nested too deeply to be a chitchat file (conversations > messages "
                        "> message, a few levels)") from None
    if not isinstance(raw, dict):
        raise DataError(f"{path}: expected a JSON object of conversations, got {type(raw).__name__}")
    out = []
    for index, (key, conv) in enumerate(raw.items()):
        try:
            out.append(Conversation(index=index, key=str(key),
                                    utterances=merge_utterances(conv["messages"])))
        except (KeyError, TypeError, AttributeError) as exc:
            raise DataError(f"{path}: conversation {key!r}: expected messages as a list of groups of "
                            f"{{text, sender}} messages ({type(exc).__name__}: {exc})") from None
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class Corpus:
    """Every utterance of a chitchat-format file in file order, with ids and text keys."""

    path: Path
    conversations: tuple[Conversation, ...]
    starts: tuple[int, ...]  # corpus position of each conversation's first utterance, then the end
    texts: tuple[str, ...]
    doc_ids: tuple[str, ...]
    keys: np.ndarray  # negatives.text_keys(texts)

    def conversation_range(self, index: int) -> range:
        return range(self.starts[index], self.starts[index + 1])


def read_corpus(path: Path, progress: Progress | None = None) -> Corpus:
    """The corpus of the chitchat-format file at ``path``."""
    if progress:
        progress(f"reading {path}")
    convs = read_conversations(path)
    texts = tuple(u for c in convs for u in c.utterances)
    return Corpus(path=path, conversations=convs,
                  starts=tuple(np.cumsum([0] + [len(c.utterances) for c in convs]).tolist()),
                  texts=texts, doc_ids=tuple(f"c{c.index}u{i}" for c in convs
                                             for i in range(len(c.utterances))),
                  keys=neg.text_keys(texts))


class Bm25:
    """The corpus' BM25 index, built once on first use (seconds for the full file)."""

    def __init__(self, corpus: Corpus, progress: Progress | None = None) -> None:
        self._corpus = corpus
        self._progress = progress
        self._index: BM25Index | None = None

    def get(self) -> BM25Index:
        if self._index is None:
            if self._progress:
                self._progress(f"tokenising and indexing {len(self._corpus.texts):,} utterances "
                               f"for BM25")
            self._index = BM25Index([tokenize(t) for t in self._corpus.texts])
        return self._index


# The corpora read while ``sharing_corpora`` is active: (path, size, mtime) -> (corpus, index).
_SHARED: dict[tuple[str, int, int], tuple[Corpus, Bm25]] | None = None


@contextmanager
def sharing_corpora() -> Iterator[None]:
    """Within it, a chitchat-format file is read and BM25-indexed at most once, however many builds
    need it (a study's data variants: one per training sampler); released when it ends, so no
    process keeps a corpus it no longer builds from."""
    global _SHARED
    outer = _SHARED
    if outer is None:
        _SHARED = {}
    try:
        yield
    finally:
        if outer is None:
            _SHARED = None


def _shared_corpus(path: Path, progress: Progress | None) -> tuple[Corpus, Bm25]:
    """``open_corpus(path)``, reused while ``sharing_corpora`` is active (the file unchanged)."""
    if _SHARED is None:
        return open_corpus(path, progress)
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _SHARED:
        _SHARED[key] = open_corpus(path, progress)
    return _SHARED[key]


def open_corpus(path: Path, progress: Progress | None = None) -> tuple[Corpus, Bm25]:
    """The corpus of the chitchat-format file at ``path`` and its BM25 index (built on first use).
    Where numba's cache lacks the sampler's compiled kernels, they compile in the background
    meanwhile (``negatives.prewarm``)."""
    from harness.data._negatives import prewarm

    prewarm()
    corpus = read_corpus(path, progress)
    return corpus, Bm25(corpus, progress)


def _split_groups(cfg: DataConfig, corpus: Corpus) -> GroupSplit:
    """The conversations per split (checks the corpus is big enough for ``cfg``)."""
    eligible = [c.index for c in corpus.conversations if len(c.utterances) >= 2]
    if len(eligible) < 3:
        raise DataError(f"{corpus.path}: {len(eligible)} conversation(s) with two or more "
                        f"utterances; need at least 3 (one per split)")
    available = neg.pool_size(corpus.keys) - 1
    chosen = choose_subset(eligible, cfg.conversations, seed=cfg.split_seed, key="data.conversations")
    groups = split_groups(chosen, dev_fraction=cfg.dev_fraction, test_fraction=cfg.test_fraction,
                          seed=cfg.split_seed)
    if cfg.negatives > available:
        raise ConfigError(f"data.negatives must be <= {available} (distinct utterances of "
                          f"{corpus.path.name} other than the positive), got {cfg.negatives}")
    return groups


def sampling_requests(cfg: DataConfig, corpus: Corpus, conversations: Sequence[int]) -> list[neg.Request]:
    """A sampling request per turn >= 1 of ``conversations``, in that order: query ``c{conv}t{turn}``,
    its context the ``data.context_turns`` utterances before the turn, its positive the turn, its
    conversation excluded, seeded by (split_seed, conversation, turn)."""
    return [neg.Request(qid=f"c{ci}t{t}", positive=corpus.starts[ci] + t,
                        context=range(corpus.starts[ci] + max(0, t - cfg.context_turns), corpus.starts[ci] + t),
                        exclude=corpus.conversation_range(ci), seed=(cfg.split_seed & 0xFFFFFFFF, ci, t))
            for ci in conversations for t in range(1, len(corpus.conversations[ci].utterances))]


def _sample(cfg: DataConfig, corpus: Corpus, bm25: Bm25, conversations: Sequence[int], method: str,
            progress: Progress | None, workers: int | None) -> list[neg.Sampled]:
    """The negatives by ``method`` of every turn >= 1 of ``conversations``, in that order."""
    requests = sampling_requests(cfg, corpus, conversations)
    if progress:
        progress(f"{len(conversations):,} conversations, {len(requests):,} queries, "
                 f"{len(corpus.texts):,} utterances in the negative pool, {method} negatives")
    index = bm25.get()
    return neg.sample(method, index, corpus.keys, requests, cfg.negatives, depth=cfg.depth,
                      progress=progress, workers=workers)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    """0..n-1 for each n of ``lengths``, concatenated: ``_offsets([2, 3]) -> [0, 1, 0, 1, 2]``."""
    ends = np.cumsum(lengths)
    return np.arange(int(ends[-1]) if ends.size else 0) - np.repeat(ends - lengths, lengths)


def _payload(cfg: DataConfig, corpus: Corpus, sampled: Sequence[neg.Sampled],
             sampled_convs: Sequence[int], splits: Sequence[Sequence[int]], fingerprint: str) -> cache.Payload:
    """The cache payload (``cache.pack``) of the queries of ``splits`` (train, dev, test: their
    conversations, in order; a query per turn >= 1), straight from the corpus positions of
    ``sampled`` (the queries of ``sampled_convs``, in order): no query object is made on the way.

    Each query: id ``c{conv}t{turn}``, group ``c{conv}``, context the ``data.context_turns``
    utterances before the turn, candidates the positive (label 1) then the negatives best first
    (label 0), each with its first-stage score."""
    strings: dict[str, int] = {}
    ref = strings.setdefault
    doc_id = np.array([ref(d, len(strings)) for d in corpus.doc_ids], dtype=np.int64)
    text = np.array([ref(t, len(strings)) for t in corpus.texts], dtype=np.int64)
    starts = np.asarray(corpus.starts, dtype=np.int64)
    n_turns = np.maximum(np.diff(starts) - 1, 0)  # queries per conversation: its turns >= 1
    sampled_at = np.zeros(n_turns.size, dtype=np.int64)  # each conversation's first in ``sampled``
    counts = n_turns[np.asarray(sampled_convs, dtype=np.int64)]
    sampled_at[np.asarray(sampled_convs, dtype=np.int64)] = np.cumsum(counts) - counts
    positions = np.array([s.negatives for s in sampled], dtype=np.int64).reshape(len(sampled), cfg.negatives)
    scores = np.array([(s.positive_score, *s.scores) for s in sampled], dtype=np.float64)
    k = positions.shape[1] + 1
    parts = []
    for convs in splits:
        convs = np.asarray(convs, dtype=np.int64)
        conv = np.repeat(convs, n_turns[convs])
        turn = _offsets(n_turns[convs]) + 1
        at = sampled_at[conv] + turn - 1
        n_context = np.minimum(turn, cfg.context_turns)
        # each query's context: the positions start + turn - n_context .. start + turn - 1
        context = _offsets(n_context) + np.repeat(starts[conv] + turn - n_context, n_context)
        candidates = np.concatenate([(starts[conv] + turn)[:, None], positions[at]], axis=1).ravel()
        qid = np.array([ref(f"c{c}t{t}", len(strings)) for c, t in zip(conv.tolist(), turn.tolist(), strict=True)],
                       dtype=np.int64)
        group = np.array([ref(f"c{c}", len(strings)) for c in conv.tolist()], dtype=np.int64)
        label = np.zeros((at.size, k), dtype=np.int64)
        label[:, 0] = 1
        parts.append({"qid": qid, "group": group, "n_context": n_context, "context": text[context],
                      "n_candidates": np.full(at.size, k), "doc": doc_id[candidates],
                      "text": text[candidates], "label": label.ravel(), "score": scores[at].ravel()})
    return cache.pack(fingerprint, list(strings), parts)


def build_payload(cfg: DataConfig, *, path: Path, fingerprint: str, progress: Progress | None = None,
                  workers: int | None = None, corpus: Corpus | None = None,
                  bm25: Bm25 | None = None) -> cache.Payload:
    """The cache payload of the embedded set for ``cfg`` from the chitchat-format file at
    ``path``, every split's negatives by ``cfg.protocol`` (``corpus`` and ``bm25``: already read /
    indexed). ``max_*_queries`` caps are not applied here (``harness.data.load`` applies them
    after the cache), so one build serves every cap."""
    if corpus is None or bm25 is None:
        corpus, bm25 = open_corpus(path, progress)
    groups = _split_groups(cfg, corpus)
    chosen = sorted(groups.train + groups.dev + groups.test)
    sampled = _sample(cfg, corpus, bm25, chosen, cfg.protocol, progress, workers)
    return _payload(cfg, corpus, sampled, chosen, (groups.train, groups.dev, groups.test), fingerprint)


def build_splits(cfg: DataConfig, *, path: Path, fingerprint: str,
                 progress: Progress | None = None, workers: int | None = None,
                 corpus: Corpus | None = None, bm25: Bm25 | None = None) -> Splits:
    """The splits of ``build_payload`` (the same arguments): what loading its cache file gives."""
    return cache.decode(build_payload(cfg, path=path, fingerprint=fingerprint, progress=progress,
                                      workers=workers, corpus=corpus, bm25=bm25))


def train_method(train_sampler: str, protocol: str) -> str | None:
    """The negatives method of ``train.sampler`` under ``data.protocol``; None where the training
    negatives are the data set's own (``dataset``, or a sampler that equals the protocol: same
    method, same seeds, same candidates).

    >>> train_method("bm25", "response"), train_method("bm25", "context"), train_method("dataset", "context")
    ('context', None, None)
    """
    if train_sampler not in TRAIN_SAMPLERS:
        raise ConfigError(f"train.sampler must be one of {', '.join(TRAIN_SAMPLERS)}, "
                          f"got {train_sampler!r}")
    method = TRAIN_SAMPLERS[train_sampler]
    return None if method is None or method == protocol else method


def build_train_payload(cfg: DataConfig, method: str, *, path: Path, fingerprint: str,
                        progress: Progress | None = None, workers: int | None = None,
                        corpus: Corpus | None = None, bm25: Bm25 | None = None) -> cache.Payload:
    """The payload of the train split of ``build_payload(cfg)`` with its negatives by ``method``
    instead (the same queries, contexts and positives, in the same order; every candidate scored
    as there), and no dev or test queries."""
    if method not in neg.METHODS:
        raise ValueError(f"unknown negative sampling method {method!r}; valid: {', '.join(neg.METHODS)}")
    if corpus is None or bm25 is None:
        corpus, bm25 = open_corpus(path, progress)
    groups = _split_groups(cfg, corpus)
    sampled = _sample(cfg, corpus, bm25, groups.train, method, progress, workers)
    return _payload(cfg, corpus, sampled, groups.train, (groups.train, (), ()), fingerprint)


def build_train(cfg: DataConfig, method: str, *, path: Path, progress: Progress | None = None,
                workers: int | None = None, corpus: Corpus | None = None,
                bm25: Bm25 | None = None) -> tuple[Query, ...]:
    """The train queries of ``build_train_payload`` (the same arguments)."""
    return cache.decode(build_train_payload(cfg, method, path=path, fingerprint="", progress=progress,
                                            workers=workers, corpus=corpus, bm25=bm25)).train


# --- loading through the cache (data.source=chitchat) ---------------------------------------


def chitchat_source(cfg: DataConfig) -> Path:
    """The chitchat-format file the embedded set is built from (absolute)."""
    from harness.textfile import file_kind

    given = Path(cfg.path).expanduser() if cfg.path else default_path()
    kind = file_kind(given)
    if kind:
        raise DataError(f"{given}: is {kind}, not a file (data.path of the chitchat data set)")
    try:
        path = given.resolve()
    except (OSError, RuntimeError) as exc:  # Python raises RuntimeError on a symlink loop
        raise DataError(f"{given}: cannot resolve the path ({exc}) (data.path of the chitchat data set)") from None
    if not path.is_file():
        raise DataError(f"{path}: no such file (data.path of the chitchat data set)")
    return path


def chitchat_fingerprint(cfg: DataConfig, source: Path | None = None) -> str:
    """The cache key of the embedded set for ``cfg`` (hashes the source file)."""
    digest = cache.file_digest(source or chitchat_source(cfg))
    return cache.fingerprint(cache.build_fields(cfg), [digest])


def _cached(target: Path, fp: str, build: Callable[[], cache.Payload], what: str,
            progress: Progress | None) -> Splits:
    """The splits cached at ``target`` for ``fp``, else those of ``build()``'s payload, stored
    there (the splits are decoded from the payload, as a later load decodes the file)."""
    started = time.monotonic()
    splits = cache.load(target, fp, progress)
    if splits is None:
        # built once however many processes ask at the same time: the others wait and load it
        with cache.building(target, progress, what):
            splits = cache.load(target, fp)  # what another process stored meanwhile (said once above)
            if splits is None:
                with cache.paused_gc():
                    payload = build()
                    stored = cache.store(target, payload, progress)
                    splits = cache.decode(payload)
                if stored and progress:
                    progress(f"built {what} in {time.monotonic() - started:.0f}s; cached at {target}")
                return splits
    if progress:
        progress(f"loaded {what} from {target} in {time.monotonic() - started:.1f}s")
    return splits


def load_chitchat(cfg: DataConfig, train_sampler: str, progress: Progress | None) -> Splits:
    """The embedded set (see the module docstring), through the cache."""
    method = train_method(train_sampler, cfg.protocol)
    path = chitchat_source(cfg)
    fp = chitchat_fingerprint(cfg, path)
    shared: list[tuple[Corpus, Bm25]] = []  # read and indexed at most once for both builds

    def corpus() -> tuple[Corpus, Bm25]:
        if not shared:
            shared.append(_shared_corpus(path, progress))
        return shared[0]

    def build_base() -> cache.Payload:
        c, bm25 = corpus()
        return build_payload(cfg, path=path, fingerprint=fp, progress=progress, corpus=c,
                                      bm25=bm25)

    base = _cached(cache.cache_file(cfg, fp), fp, build_base,
                   f"the data set ({cfg.protocol} protocol)", progress)
    if method is None:
        return base
    tfp = cache.train_fingerprint(fp, method)

    def build_train() -> cache.Payload:
        c, bm25 = corpus()
        return build_train_payload(cfg, method, path=path, fingerprint=tfp, progress=progress,
                                            corpus=c, bm25=bm25)

    train = _cached(cache.train_cache_file(cfg, fp, method), tfp, build_train,
                    f"the train split ({method} negatives, train.sampler={train_sampler})", progress)
    return Splits(train=train.train, dev=base.dev, test=base.test, fingerprint=tfp)
