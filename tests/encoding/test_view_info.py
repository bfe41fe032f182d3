"""Tests of multiview_plugin/encoding/view_info.py: what each vector stands for, streamed beside a shard (DCSR's
sentence spans end to end: tests/search/test_explain.py)."""

from __future__ import annotations

import numpy as np
import pytest

from multiview_plugin.encoding.shards import ShardFormatError
from multiview_plugin.encoding.view_info import ViewRowWriter, concat_rows, merge_descriptions, shard_views_path


def test_rows_stream_resume_after_a_kill_and_finalise(tmp_path):
    shard = tmp_path / "c.pkl"
    writer = ViewRowWriter(shard, rows_done=0)
    writer.add(np.array([[0, 5, 0], [6, 9, 1]]))
    writer.flush()
    writer.add(np.array([[10, 12, 0]]))  # written but never flushed into the shard: dropped on resume
    writer._f.close()
    resumed = ViewRowWriter(shard, rows_done=2)
    resumed.add(np.array([[20, 30, 0]]))
    assert resumed.close(expected_rows=3) == shard_views_path(shard)
    assert np.load(shard_views_path(shard)).tolist() == [[0, 5, 0], [6, 9, 1], [20, 30, 0]]
    assert not (tmp_path / "c.pkl.views.partial").exists()
    with pytest.raises(ValueError, match=r"view rows must be \(N, 3\), got \(1, 2\)"):
        ViewRowWriter(tmp_path / "d.pkl", 0).add(np.zeros((1, 2)))


def test_missing_or_miscounted_rows_are_refused(tmp_path):
    with pytest.raises(ShardFormatError, match="view rows of the resumed shard are missing"):
        ViewRowWriter(tmp_path / "c.pkl", rows_done=4)
    writer = ViewRowWriter(tmp_path / "c.pkl", rows_done=0)
    writer.add(np.zeros((2, 3)))
    with pytest.raises(ShardFormatError, match="2 view rows for 3 vectors"):
        writer.close(expected_rows=3)


def test_concat_rows_in_shard_order(tmp_path):
    shards = [tmp_path / "a.pkl", tmp_path / "b.pkl"]
    np.save(shard_views_path(shards[0]), np.array([[0, 1, 0]], dtype=np.int32))
    np.save(shard_views_path(shards[1]), np.array([[2, 3, 0], [4, 5, 1]], dtype=np.int32))
    out = tmp_path / "views.npy"
    assert concat_rows(shards, out, 3)
    assert np.load(out).tolist() == [[0, 1, 0], [2, 3, 0], [4, 5, 1]]
    with pytest.raises(ShardFormatError, match=r"view rows \(3\) do not match the vectors \(4\)"):
        concat_rows(shards, tmp_path / "v2.npy", 4)
    assert not concat_rows([*shards, tmp_path / "c.pkl"], tmp_path / "v3.npy", 3)  # a shard without rows
    assert not (tmp_path / "v3.npy").exists()


def test_merge_descriptions_keeps_only_what_all_shards_share():
    a = {"kind": "sentence", "rows": True, "corpus": "c1.jsonl"}
    b = {"kind": "sentence", "rows": True, "corpus": "c2.jsonl"}
    assert merge_descriptions([a, b, a]) == {"kind": "sentence", "rows": True, "corpus": ["c1.jsonl", "c2.jsonl"]}
    assert merge_descriptions([a, {"kind": "viewer"}]) is None
    assert merge_descriptions([a, None]) is None and merge_descriptions([]) is None
