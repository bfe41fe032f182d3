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


def test_no_record_holds_a_machine_path():
    """Records are the project's results, not a machine's: no absolute path of the machine that made them (a
    corpus, a model, an output folder), in the command or in a row."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "results"
    absolute = re.compile(r"[\s\"'=](/(?:work|tmp|root|home)/[^\s\"']+)")
    found = [(p.relative_to(root).as_posix(), m.group(1)) for p in sorted(root.rglob("*.json"))
             for m in absolute.finditer(p.read_text(encoding="utf-8"))]
    assert found == []
