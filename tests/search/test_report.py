"""Tests of multiview_plugin/search/report.py: what an index folder holds, in words (index --report)."""

from __future__ import annotations

import json
from collections import Counter

from multiview_plugin.search.report import index_report, views_histogram


def test_views_histogram_counts_contiguous_rows_per_document(tmp_path):
    docid = tmp_path / "docid"
    docid.write_text("a#0\na#1\na#2\nb#0\nc#0\nc#1\nd#0\n")
    assert views_histogram(docid, multi_vector=True) == Counter({1: 2, 2: 1, 3: 1})
    assert views_histogram(docid, multi_vector=False) == Counter({1: 7})  # each line a document
    docid.write_text("")
    assert views_histogram(docid, multi_vector=True) == Counter()


def test_index_report_describes_the_index(mvr_index):
    meta = json.loads((mvr_index["index"] / "multiview.json").read_text())
    report = index_report(mvr_index["index"])
    assert report.splitlines()[0] == f"index            {mvr_index['index']}"
    assert "documents        8" in report
    assert f"vectors          16 (dim {meta['dim']})" in report
    assert "histogram      2 views: 8" in report
    assert "faiss            Flat: IndexFlatIP, 16 vectors" in report
    assert report.splitlines()[-1].startswith("size on disk     ") and "docid " in report.splitlines()[-1]
