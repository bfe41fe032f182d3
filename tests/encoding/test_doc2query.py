"""Tests of multiview_plugin/encoding/doc2query.py: seeded, resumable, sharded pseudo-query generation (the
files' guards: tests/reliability/test_nothing_lost.py)."""

from __future__ import annotations

import hashlib
import json

import pytest

from multiview_plugin.driver.generate_queries import main as generate_main
from tests.conftest import TOPICS, write_topics_corpus


@pytest.fixture
def corpus(tmp_path):
    return write_topics_corpus(tmp_path / "corpus.jsonl")


def generate(model, corpus, out, *extra):
    return generate_main(["--model_name_or_path", str(model), "--corpus_path", str(corpus), "--output", str(out),
                          "--num_queries", "3", "--max_query_length", "5", "--batch_size", "3", *extra])


def test_generation_is_seeded_resumable_and_sharded(tiny_doc2query, corpus, tmp_path, monkeypatch):
    assert generate(tiny_doc2query, corpus, tmp_path / "a.jsonl") == 0
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    assert [r["docid"] for r in records] == [f"d{i}" for i in range(len(TOPICS))]
    assert all(len(r["queries"]) == 3 for r in records)
    assert len({q for r in records for q in r["queries"]}) > 3  # sampled, not one repeated string
    # same seed, same queries; another seed, other queries
    assert generate(tiny_doc2query, corpus, tmp_path / "b.jsonl") == 0
    assert (tmp_path / "b.jsonl").read_text().splitlines() == lines
    assert generate(tiny_doc2query, corpus, tmp_path / "c.jsonl", "--seed", "7") == 0
    assert (tmp_path / "c.jsonl").read_text().splitlines() != lines
    # an interrupted run (two batches written, then killed while writing the third: a torn line) resumes
    # without duplicating
    from multiview_plugin.encoding import doc2query

    append, calls = doc2query._append, []

    def torn_third_batch(out, text):
        calls.append(1)
        if len(calls) == 3:
            out.write(text[:10])
            raise KeyboardInterrupt
        append(out, text)

    with monkeypatch.context() as m:
        m.setattr(doc2query, "_append", torn_third_batch)
        with pytest.raises(KeyboardInterrupt):
            generate(tiny_doc2query, corpus, tmp_path / "r.jsonl", "--checkpoint_every", "1")
    partial = tmp_path / "r.jsonl.partial"
    assert partial.read_text() == "\n".join(lines[:6]) + "\n" + lines[6][:10]
    assert generate(tiny_doc2query, corpus, tmp_path / "r.jsonl") == 0
    assert (tmp_path / "r.jsonl").read_text().splitlines() == lines and not partial.exists()
    # shards cover the corpus in order
    for s in range(2):
        assert generate(tiny_doc2query, corpus, tmp_path / f"s{s}.jsonl", "--dataset_number_of_shards", "2",
                        "--dataset_shard_index", str(s)) == 0
    shards = [json.loads(x)["docid"] for s in range(2) for x in (tmp_path / f"s{s}.jsonl").read_text().splitlines()]
    assert shards == [r["docid"] for r in records]


def test_marker_and_verified_partial(tmp_path):
    from multiview_plugin.encoding.doc2query import _partial_record, marker_path, verified_partial

    assert marker_path(tmp_path / "q.jsonl") == tmp_path / "q.jsonl.json"
    partial = tmp_path / "q.jsonl.partial"
    partial.write_text("line 1\nline 2\n")
    head = hashlib.sha256(b"line 1\n").hexdigest()
    assert verified_partial(partial, {"partial": _partial_record(7, head, "line 2\n")}) == 14  # the batch landed
    partial.write_text("line 1\nli")  # torn while appending the pending batch
    assert verified_partial(partial, {"partial": _partial_record(7, head, "line 2\n")}) == 7
    partial.write_text("someone else's file\n")
    assert verified_partial(partial, {"partial": _partial_record(7, head, "line 2\n")}) is None
