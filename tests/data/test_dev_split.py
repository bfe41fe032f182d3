"""Tests of multiview_plugin/data/dev_split.py: carving a model-selection dev split out of a train file by
passage groups."""

from __future__ import annotations

import json

from multiview_plugin.data.dev_split import carve_dev_split, parse_groups


def test_dev_split_carves_whole_groups(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"docid": f"{a}_{p}", "title": "t", "text": f"text {a} {p}"}) + "\n"
                              for a in range(3) for p in range(2)))
    train = tmp_path / "train.jsonl"
    rows = [{"query_id": f"q{a}{p}", "query": "q", "positive_passages": [{"docid": f"{a}_{p}", "text": "x"}],
             "negative_passages": [{"docid": f"{(a + 1) % 3}_0", "text": "y"}]} for a in range(3) for p in range(2)]
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    paths = carve_dev_split(train, corpus, tmp_path / "out", parse_groups("2"))
    kept = [json.loads(line) for line in paths["train"].read_text().splitlines()]
    # q1*'s only negative (2_0) is a dev passage: those records go too, so no dev text is ever trained on
    assert [r["query_id"] for r in kept] == ["q00", "q01"]
    assert all(not n["docid"].startswith("2_") for r in kept for n in r["negative_passages"])
    assert paths["dev_qrels"].read_text().split("\n")[:2] == ["q20 0 2_0 1", "q21 0 2_1 1"]
    assert [json.loads(x)["docid"] for x in paths["dev_corpus"].read_text().splitlines()] == ["2_0", "2_1"]
    assert parse_groups("28-31") == {"28", "29", "30", "31"}
