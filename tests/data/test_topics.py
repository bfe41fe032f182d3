"""Tests of multiview_plugin/data/topics.py: search topics by qid from any query file."""

from __future__ import annotations

import json

from multiview_plugin.data.topics import load_topics, topic_lines


def test_topics_from_a_query_file_keep_their_qids(tmp_path):
    path = tmp_path / "queries.tsv"
    path.write_text("q7\twhat is paris\nq9\twhere is rome\n")
    assert load_topics(path) == {"q7": "what is paris", "q9": "where is rome"}


def test_dpr_qa_files_take_line_numbers_as_qids(tmp_path):
    tsv = tmp_path / "qa.tsv"
    tsv.write_text('who built paris\t["the king"]\nwhere is rome\t["italy"]\n')
    assert load_topics(tsv) == {"0": "who built paris", "1": "where is rome"}
    jsonl = tmp_path / "qa.jsonl"
    jsonl.write_text("".join(json.dumps({"question": q, "answer": ["a"]}) + "\n" for q in ("one", "two")))
    assert load_topics(jsonl) == {"0": "one", "1": "two"}


def test_topic_lines_are_one_line_each():
    assert topic_lines({"q1": "a\tquery\nover  lines ", "q2": "b"}) == ["q1\ta query over lines", "q2\tb"]
