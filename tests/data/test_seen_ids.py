"""Bounded-memory duplicate-id detection (64-bit hashes, confirmed against the stored id)."""

import json

import numpy as np
import pytest

from multiview_plugin.data import seen_ids
from multiview_plugin.data.readers import InputFormatError, iter_corpus
from multiview_plugin.data.seen_ids import SeenIds
from multiview_plugin.encoding.shards import ShardInfo, ShardWriter
from multiview_plugin.errors import MultiViewError
from multiview_plugin.search import build_index


def test_seen_ids_across_merges():
    seen = SeenIds(min_buffer=4)
    for i in range(100):
        assert seen.check_add(f"d{i}", i) is None
    assert len(seen) == 100 and seen.nbytes >= 16 * 64  # most ids merged into the sorted arrays
    assert seen.check_add("d3", 500) == 3 and seen.check_add("d97", 501) == 97


def write_corpus(path, docids):
    path.write_text("".join(json.dumps({"docid": d, "text": "some text"}) + "\n" for d in docids))
    return path


def test_reader_reports_duplicates_far_apart(tmp_path, monkeypatch):
    monkeypatch.setattr(SeenIds.__init__, "__defaults__", (8,))
    path = write_corpus(tmp_path / "c.jsonl", [f"d{i}" for i in range(50)] + ["d7"])
    with pytest.raises(InputFormatError, match=r"line 51.*duplicate docid 'd7' \(first seen on line 8\)"):
        list(iter_corpus(path))


def test_hash_collisions_are_confirmed_not_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(seen_ids, "hash", lambda _: 42, raising=False)  # every id collides
    path = write_corpus(tmp_path / "c.jsonl", ["a", "b", "c"])
    assert [d for d, _ in iter_corpus(path)] == ["a", "b", "c"]
    with pytest.raises(InputFormatError, match="duplicate docid 'a'"):
        list(iter_corpus(write_corpus(tmp_path / "d.jsonl", ["a", "a"])))
    def shards(name, groups):
        paths = []
        for s, ids in enumerate(groups):
            info = ShardInfo(model_name="t", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                             shard_index=s, num_shards=len(groups))
            w = ShardWriter(tmp_path / f"{name}.{s}.pkl", info, multi_vector=True)
            w.add(ids, np.ones((2, 2, 4), dtype=np.float32))
            w.close()
            paths.append(tmp_path / f"{name}.{s}.pkl")
        return paths

    assert build_index(shards("s", (["a", "b"], ["c", "d"])), tmp_path / "idx").num_docs == 4
    with pytest.raises(MultiViewError, match=r"already in an earlier shard: \['a'\]"):
        build_index(shards("t", (["a", "b"], ["c", "a"])), tmp_path / "idx2")
