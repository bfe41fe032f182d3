"""Tests of multiview_plugin/data/msmarco.py: MS MARCO passage files → Tevatron train jsonl with BM25 negatives."""

from __future__ import annotations

import json

import pytest

from multiview_plugin.data.msmarco import main as msmarco_main
from tests.conftest import TOPICS, one_line_error


@pytest.fixture
def files(tmp_path):
    collection = tmp_path / "collection.tsv"
    collection.write_text("".join(f"{i}\t{t}\n" for i, (_, _, t) in enumerate(TOPICS)))
    queries = tmp_path / "queries.train.tsv"
    queries.write_text("".join(f"q{i}\twhat is {a}\n" for i, (a, _, _) in enumerate(TOPICS)))
    qrels = tmp_path / "qrels.train.tsv"
    qrels.write_text("q0 0 0 1\nq2 0 2 1\nq2 0 3 1\nq5 0 5 0\n")  # q5: judged not relevant
    return ["--collection", str(collection), "--queries", str(queries), "--qrels", str(qrels)]


def test_judged_queries_become_records_with_bm25_negatives(files, tmp_path):
    out = tmp_path / "train.jsonl"
    assert msmarco_main([*files, "--output", str(out), "--num_negatives", "3"]) == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["query_id"] for r in records] == ["q0", "q2"]
    assert [p["docid"] for p in records[1]["positive_passages"]] == ["2", "3"]
    assert records[0]["positive_passages"][0]["text"] == TOPICS[0][2]
    for r in records:
        negatives = [n["docid"] for n in r["negative_passages"]]
        assert len(negatives) == 3 and not {p["docid"] for p in r["positive_passages"]} & set(negatives)
    assert msmarco_main([*files, "--output", str(out), "--max_queries", "1"]) == 0
    assert len(out.read_text().splitlines()) == 1


def test_a_judged_passage_missing_from_the_collection_is_one_line(files, tmp_path, capsys):
    qrels = tmp_path / "qrels.train.tsv"
    qrels.write_text("q0 0 99 1\n")
    assert msmarco_main([*files, "--output", str(tmp_path / "train.jsonl")]) == 2
    one_line_error(capsys, "query q0: judged passages ['99'] are not in")
    assert not (tmp_path / "train.jsonl").exists()
