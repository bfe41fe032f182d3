"""Tests of multiview_plugin/evaluation/view_usage.py: the view-usage analysis (the driver end to end:
tests/driver/test_analyze.py)."""

from __future__ import annotations

from multiview_plugin.evaluation.view_usage import view_labels


def test_view_labels_name_the_recorded_views_or_number_them():
    assert view_labels({"kind": "token", "labels": ["[V1]", "[V2]"]}, 2) == ["token [V1]", "token [V2]"]
    assert view_labels({"kind": "layer", "labels": [12, 11, 10]}, 2) == ["layer 12", "layer 11"]
    assert view_labels({"kind": "sentence"}, 2) == ["sentence 0", "sentence 1"]
    assert view_labels({"kind": "pseudo_query", "labels": ["only one"]}, 2) == ["query 0", "query 1"]
    assert view_labels(None, 1) == ["view 0"]
