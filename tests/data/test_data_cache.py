"""The data cache: fingerprint, location, atomic round trip, load_splits through it, and files that
must not be loaded (a planted pickle, an edit in place)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
from pathlib import Path

import pytest

from harness.config import DataConfig
from harness.data import cache
from harness.data._chitchat import chitchat_fingerprint
from harness.data.load import apply_caps, load_splits
from harness.records import Candidate, Query, Splits


def _splits(fp: str = "f" * 64) -> Splits:
    q = Query(qid="c1t1", context=("hi", "hey there"), group="c1", candidates=(
        Candidate("c1u1", "hey there", 1, 2.5), Candidate("c9u0", "hi", 0, None)))
    r = Query(qid="c2t1", context=("hi",), group="c2", candidates=(
        Candidate("c2u1", "hi", 1, 0.0), Candidate("c1u1", "hey there", 0, -1.25)))
    return Splits(train=(q, r), dev=(r,), test=(), fingerprint=fp)


def test_fingerprint_covers_build_fields_version_and_source(monkeypatch: pytest.MonkeyPatch) -> None:
    base = DataConfig()
    fp = cache.fingerprint(cache.build_fields(base), ["abc"])
    assert fp == cache.fingerprint(cache.build_fields(DataConfig()), ["abc"])
    assert fp != cache.fingerprint(cache.build_fields(base), ["abd"])
    changes = {"context_turns": 3, "negatives": 4, "protocol": "context", "depth": 10, "split_seed": 1,
               "conversations": 50, "dev_fraction": 0.2, "test_fraction": 0.2}
    assert set(changes) | {"source"} == set(cache.BUILD_FIELDS)
    for key, value in changes.items():
        changed = dataclasses.replace(base, **{key: value})
        assert cache.fingerprint(cache.build_fields(changed), ["abc"]) != fp, key
    # Neither a cap, the cache folder nor a collection's name (a study over several) is a build input.
    same = dataclasses.replace(base, max_train_queries=5, cache_dir="/elsewhere", collection="talk-a")
    assert cache.fingerprint(cache.build_fields(same), ["abc"]) == fp
    context = dataclasses.replace(base, protocol="context")  # the one protocol that reads no depth
    assert cache.build_fields(dataclasses.replace(context, depth=10)) == cache.build_fields(context)
    assert cache.train_fingerprint(fp, "random") not in (fp, cache.train_fingerprint(fp, "context"))
    monkeypatch.setattr(cache, "BUILD_VERSION", cache.BUILD_VERSION + 1)
    assert cache.fingerprint(cache.build_fields(base), ["abc"]) != fp


def test_cache_root_is_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert cache.cache_root(DataConfig(cache_dir="rel")) == tmp_path / "rel"
    monkeypatch.setenv("HARNESS_CACHE", "envdir")
    assert cache.cache_root(DataConfig()) == tmp_path / "envdir"
    assert cache.cache_root(DataConfig(cache_dir="rel")) == tmp_path / "rel"
    monkeypatch.delenv("HARNESS_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_root(DataConfig()) == tmp_path / "home" / ".cache" / "harness"
    assert cache.cache_file(DataConfig(cache_dir="rel"), "ab").parent == tmp_path / "rel" / "data"


def test_store_load_round_trip_is_atomic_and_checked(tmp_path: Path) -> None:
    splits = _splits()
    target = tmp_path / "deep" / "data" / "chitchat-x.splits"
    assert cache.store(target, splits)
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temporary left behind
    assert cache.load(target, splits.fingerprint) == splits
    assert cache.load(target, splits.fingerprint).evaluation == splits.evaluation  # type: ignore[union-attr]
    assert cache.load(target, "0" * 64) is None  # built for another fingerprint
    assert cache.load(tmp_path / "absent.splits", splits.fingerprint) is None
    blob = target.read_bytes()
    for bad, why in ((blob[:-3], "does not match its checksum"), (b"", "is not a harness data cache file"),
                     (pickle.dumps(("other-format", 1, 2, 3)), "is not a harness data cache file")):
        messages: list[str] = []
        target.write_bytes(bad)
        assert cache.load(target, splits.fingerprint, messages.append) is None
        assert len(messages) == 1 and "\n" not in messages[0]
        assert messages[0].startswith(f"warning: data cache file {target} {why}")


def test_a_file_with_a_checksum_but_ids_outside_its_table_is_refused(tmp_path: Path) -> None:
    """What only a deliberate rewrite (checksum recomputed) makes: refused, never an IndexError."""
    fmt, fp, strings, parts = cache.encode(_splits())
    target = tmp_path / "x.splits"
    target.write_bytes(cache.serialize((fmt, fp, strings[:2], parts)))
    messages: list[str] = []
    assert cache.load(target, fp, messages.append) is None
    assert "inconsistent content" in messages[0]


class _RunsCode:
    """Unpickling this runs a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch '{self.marker}'",)


def test_a_planted_pickle_is_never_loaded_and_the_data_is_built_again(tmp_path: Path,
                                                                     tiny_chitchat: Path) -> None:
    """Someone who can write the cache folder puts a pickle where the data set's file goes (and
    where older versions kept it): nothing runs, one warning names the file, the build replaces it."""
    cfg = DataConfig(path=str(tiny_chitchat), negatives=3, cache_dir=str(tmp_path / "c"))
    fp = chitchat_fingerprint(cfg)
    marker = tmp_path / "ran"
    planted = cache.cache_file(cfg, fp)
    planted.parent.mkdir(parents=True)
    payload = pickle.dumps(_RunsCode(marker))
    planted.write_bytes(payload)
    planted.with_suffix(".pkl").write_bytes(payload)  # the name older versions read
    messages: list[str] = []
    built = load_splits(cfg, progress=messages.append)
    assert not marker.exists()
    warned = [m for m in messages if m.startswith("warning:")]
    assert warned == [(f"warning: data cache file {planted} is not a harness data cache file (its first "
                       "line is not harness-splits/3: a file of an older version, or not the harness's); "
                       "not loaded, building the data again")]
    assert any(m.startswith("built the data set") for m in messages)
    assert planted.read_bytes().startswith(cache.MAGIC)
    assert load_splits(cfg) == built and not marker.exists()


def test_a_cache_edited_in_place_is_detected_and_rebuilt(tmp_path: Path, tiny_chitchat: Path) -> None:
    """A train label flipped in the file (results would change silently): the checksum refuses it
    and the data comes from the source again, equal to the first build."""
    cfg = DataConfig(path=str(tiny_chitchat), negatives=3, cache_dir=str(tmp_path / "c"))
    first = load_splits(cfg)
    path = cache.cache_file(cfg, first.fingerprint)
    blob = bytearray(path.read_bytes())
    header_at = blob.index(b"\n", len(cache.MAGIC)) + 1
    header_end = blob.index(b"\n", header_at)
    header = json.loads(bytes(blob[header_at:header_end]))
    _, start, size = header["parts"][0]["label"]  # the train split's labels
    labels = bytes(blob[header_end + 1 + start:header_end + 1 + start + size])
    flip = labels.index(b"\x01\x00\x00\x00")  # a positive becomes a negative
    blob[header_end + 1 + start + flip] = 0
    path.write_bytes(bytes(blob))
    messages: list[str] = []
    again = load_splits(cfg, progress=messages.append)
    warned = [m for m in messages if m.startswith("warning:")]
    assert len(warned) == 1 and f"{path} does not match its checksum" in warned[0]
    assert again == first
    assert sum(c.label for q in again.train for c in q.candidates) == sum(
        c.label for q in first.train for c in q.candidates)


def test_caps_take_a_seeded_ordered_subset_with_its_own_fingerprint() -> None:
    splits = _splits()
    assert apply_caps(splits, DataConfig(max_train_queries=5)) is splits
    capped = apply_caps(splits, DataConfig(max_train_queries=1))
    assert len(capped.train) == 1 and capped.train[0] in splits.train
    assert capped.dev == splits.dev and capped.fingerprint != splits.fingerprint
    assert capped == apply_caps(splits, DataConfig(max_train_queries=1))
    assert capped.evaluation == splits.evaluation  # a train cap leaves the evaluation set alone
    assert apply_caps(splits, DataConfig(max_dev_queries=1)) is splits  # dev has one query
    two_dev = dataclasses.replace(splits, dev=splits.train)
    assert two_dev.evaluation != splits.evaluation
    assert apply_caps(two_dev, DataConfig(max_dev_queries=1)).evaluation != two_dev.evaluation


def test_load_splits_builds_once_then_reads_the_cache(tmp_path: Path, tiny_chitchat: Path) -> None:
    cfg = DataConfig(path=str(tiny_chitchat), negatives=3, cache_dir=str(tmp_path / "c"))
    messages: list[str] = []
    first = load_splits(cfg, progress=messages.append)
    assert first.fingerprint == chitchat_fingerprint(cfg)
    assert any(m.startswith("built the data set (response protocol) in") for m in messages)
    messages.clear()
    second = load_splits(cfg, progress=messages.append)
    assert second == first and any(m.startswith("loaded the data set") for m in messages)
    assert second.evaluation == first.evaluation
    assert cache.cache_file(cfg, first.fingerprint).is_file()
    # A collection named in a study over several collections loads the same file: no second build.
    messages.clear()
    named = load_splits(dataclasses.replace(cfg, collection="talk-a"), progress=messages.append)
    assert named == first and any(m.startswith("loaded the data set") for m in messages)
    assert [p.name for p in (tmp_path / "c" / "data").iterdir()] == [cache.cache_file(cfg, first.fingerprint).name]
    capped = load_splits(dataclasses.replace(cfg, max_test_queries=1))
    assert len(capped.test) == 1 and capped.train == first.train


# sha256 of the cache files these builds wrote with the code before builds packed their columns
# straight from the corpus positions (commit 43f69f3, which encoded query objects), when a cache
# file was the pickle of ``cache.encode``'s payload: the payload is still checked byte for byte
# through that pickle (written here, never read), and the file is its ``cache.serialize``.
def test_processes_building_one_data_set_at_once_build_it_once(tmp_path: Path, tiny_chitchat: Path) -> None:
    """Two builders of one data set at the same time (two studies, two test workers; here two
    threads, each with its own lock file handle as a process has): the first builds it under the
    cache file's lock, the other waits, then loads what was stored; the same splits either way."""
    import threading

    cfg = DataConfig(path=str(tiny_chitchat), negatives=3, cache_dir=str(tmp_path / "c"))
    target = cache.cache_file(cfg, chitchat_fingerprint(cfg))
    said: list[list[str]] = [[], []]
    got: list[object] = [None, None]
    with cache.building(target):  # held here until both builders wait or have started
        threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, load_splits(cfg, progress=said[i].append)))
                   for i in range(2)]
        for t in threads:
            t.start()
        deadline = 50.0
        while sum(any(m.startswith("waiting for another process building") for m in s) for s in said) < 2:
            assert deadline > 0, said
            threading.Event().wait(0.1)
            deadline -= 0.1
    for t in threads:
        t.join(timeout=120)
    built = [any(m.startswith("built the data set") for m in s) for s in said]
    loaded = [any(m.startswith("loaded the data set") for m in s) for s in said]
    assert sorted(built) == [False, True] and sorted(loaded) == [False, True], said
    assert got[0] == got[1] and target.is_file()


PINNED = {
    "small": ("2ce11acaefe5826e8328ceab41c0fb3718bdf0120c6e63df5ee05d70c8b55f9c",
              "9f7eb9bbcc197fbf42d4114f0d3c8626e29256cce7313d84d74c6e532e7e0565"),
    "clashing": ("dfa6d0b08dd99a5a580aa106f80f8998d85d7d3cfa97af39896aee2ec017eb28",
                 "1f7aab754986f62e6bd7ec3d34e0062ecd1cf15d5f26cca8404b3053a8bc3114"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_build_writes_the_bytes_that_encoding_its_queries_writes(name: str, tmp_path: Path) -> None:
    """The build packs its cache columns from corpus positions (``cache.pack``): the file holds
    the bytes that ``cache.encode`` writes for the same queries, byte for byte as before. The
    "clashing" corpus has texts equal to doc ids, query ids and group ids, and repeated texts, so
    the one string table holds each of them once, in the order of first use."""
    if name == "small":
        cfg, sampler = DataConfig(conversations=12, split_seed=13, cache_dir=str(tmp_path / "c")), "bm25"
    else:
        convs = [[("a", "c1u0"), ("b", "c0t1"), ("a", "c2")], [("a", "hello c0u1"), ("b", "c0u1"), ("a", "c1t2")],
                 [("a", "c0u1"), ("b", "same"), ("a", "same")], [("a", "c3"), ("b", "c2t1"), ("a", "c1u0")],
                 [("a", "x y"), ("b", "c4t1"), ("a", "same")]]
        raw = {f"conv-{i}": {"messages": [[{"text": t, "sender": s}] for s, t in conv]}
               for i, conv in enumerate(convs)}
        source = tmp_path / "clashing.json"
        source.write_text(json.dumps(raw))
        cfg, sampler = DataConfig(path=str(source), negatives=3, cache_dir=str(tmp_path / "c")), "random"
    load_splits(cfg, train_sampler=sampler)
    fp = chitchat_fingerprint(cfg)
    method = "context" if sampler == "bm25" else sampler
    files = (cache.cache_file(cfg, fp), cache.train_cache_file(cfg, fp, method))
    for file, pinned, key in zip(files, PINNED[name], (fp, cache.train_fingerprint(fp, method)), strict=True):
        splits = cache.load(file, key)
        assert splits is not None
        payload = cache.encode(splits)
        assert hashlib.sha256(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)).hexdigest() == pinned
        assert file.read_bytes() == cache.serialize(payload)
