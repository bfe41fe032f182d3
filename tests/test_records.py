"""Tests of multiview_plugin/records.py: the JSON form of run rows and records."""

import json

from multiview_plugin.records import dumps_rows


def test_rank_lists_sit_on_one_line_and_the_json_reads_back():
    rows = [{"system": "dpr", "ranks": [1, 12, -1, 3], "top1": 71.5, "nested": {"ids": [4, 5]}}]
    text = dumps_rows(rows)
    assert '"ranks": [1, 12, -1, 3]' in text and '"ids": [4, 5]' in text
    assert json.loads(text) == rows


def test_lists_of_other_values_keep_json_dumps_layout():
    obj = {"names": ["a", "b"], "scores": [0.5, 1.0], "empty": []}
    assert dumps_rows(obj) == json.dumps(obj, indent=2)
