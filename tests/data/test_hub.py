"""Tests of multiview_plugin/data/hub.py: encoding input from datasets.load_dataset (a local builder here;
nothing is downloaded)."""

from __future__ import annotations

import json

from multiview_plugin.data.hub import export_dataset


def test_rows_are_exported_with_the_fields_the_readers_take_and_kept(tmp_path):
    data = tmp_path / "rows.json"
    data.write_text("\n".join(json.dumps({"docid": f"d{i}", "title": "t", "text": f"text {i}", "extra": i})
                              for i in range(3)) + "\n")
    target = tmp_path / "out" / "export.jsonl"
    assert export_dataset("json", None, str(data), "train", str(tmp_path / "cache"), target) == target
    rows = [json.loads(x) for x in target.read_text().splitlines()]
    assert rows == [{"docid": f"d{i}", "title": "t", "text": f"text {i}"} for i in range(3)]
    data.write_text(json.dumps({"docid": "changed", "text": "x"}) + "\n")
    export_dataset("json", None, str(data), "train", str(tmp_path / "cache"), target)
    assert len(target.read_text().splitlines()) == 3  # already exported: a resumed encode reads the same input
