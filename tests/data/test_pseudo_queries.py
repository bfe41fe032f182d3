"""Tests of multiview_plugin/data/pseudo_queries.py: DCE's pseudo-query files."""

from __future__ import annotations

import pytest

from multiview_plugin.data.pseudo_queries import load_pseudo_queries
from multiview_plugin.data.readers import InputFormatError


def test_query_files_load_and_misalignment_fails(tmp_path):
    docids = ["d0", "d1", "d2"]
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text('{"docid": "d1", "queries": ["a", "b"]}\n{"docid": "d0", "queries": []}\n')
    assert load_pseudo_queries(jsonl, docids) == {"d1": ["a", "b"], "d0": []}
    assert load_pseudo_queries(jsonl, docids, keep={"d1"}) == {"d1": ["a", "b"]}
    s0, s1 = tmp_path / "sample000.txt", tmp_path / "sample001.txt"
    s0.write_text("x0\nx1\nx2\n")
    s1.write_text("y0\ny1\ty1b\ny2\n")
    assert load_pseudo_queries(f"{s0},{s1}", docids) == {"d0": ["x0", "y0"], "d1": ["x1", "y1", "y1b"],
                                                           "d2": ["x2", "y2"]}
    short = tmp_path / "short.txt"
    short.write_text("x0\nx1\n")
    with pytest.raises(InputFormatError, match="2 lines but the corpus has 3 documents"):
        load_pseudo_queries(short, docids)
    long = tmp_path / "long.txt"
    long.write_text("a\nb\nc\nd\n")
    with pytest.raises(InputFormatError, match="long.txt line 4: more lines than the corpus"):
        load_pseudo_queries(long, docids)
    with pytest.raises(InputFormatError, match="aligned by line to a corpus"):
        load_pseudo_queries(short)
    unknown = tmp_path / "u.jsonl"
    unknown.write_text('{"docid": "d9", "queries": ["a"]}\n')
    with pytest.raises(InputFormatError, match="u.jsonl line 1.*'d9' is not in the corpus"):
        load_pseudo_queries(unknown, docids)
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"docid": "d1", "queries": ["a"]}\n{"docid": "d1", "queries": ["b"]}\n')
    with pytest.raises(InputFormatError, match="dup.jsonl line 2.*duplicate docid"):
        load_pseudo_queries(dup, docids)
