"""Tests of multiview_plugin/encoding/doc2query.py: seeded, resumable, sharded pseudo-query generation (the
files' guards: tests/reliability/test_nothing_lost.py)."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import assume, given

from multiview_plugin.driver.generate_queries import main as generate_main
from tests.conftest import TOPICS, WORDS, write_topics_corpus
from tests.strategies import DAMAGE, PER_KIND, bounded, damage, run_driver, workdir, write_lines


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


# ----------------------------------------------------------------------------- property-based tests (hypothesis)
# generate_queries' .partial file and marker.
# Strategies and helpers: tests/strategies.py.


@pytest.fixture(scope="module")
def interrupted_generation(tmp_path_factory) -> dict:
    """A tiny doc2query model, a 6-document corpus, the complete reference output, and the partial file and marker
    of a run killed in its second batch."""
    from multiview_plugin.driver import generate_queries as gq
    from multiview_plugin.encoding import doc2query
    from tools.testing import make_tiny_t5

    root = tmp_path_factory.mktemp("props_generate")
    model = make_tiny_t5(root / "t5", seq2seq=True)
    corpus = write_lines(root / "corpus.jsonl", [json.dumps({"docid": f"d{i}", "text": " ".join(WORDS[i:i + 5])})
                                                 for i in range(6)])
    argv = ["--model_name_or_path", str(model), "--corpus_path", str(corpus), "--num_queries", "2",
            "--max_query_length", "4", "--batch_size", "2"]
    assert gq.main([*argv, "--output", str(root / "ref.jsonl")]) == 0
    calls = []

    def killed(out, text):
        calls.append(1)
        if len(calls) == 2:
            out.write(text[:7])  # torn mid-line
            raise KeyboardInterrupt
        out.write(text)

    original, doc2query._append = doc2query._append, killed
    try:
        with pytest.raises(KeyboardInterrupt):
            gq.main([*argv, "--output", str(root / "cut.jsonl")])
    finally:
        doc2query._append = original
    return {"argv": argv, "reference": (root / "ref.jsonl").read_bytes(),
            "partial": (root / "cut.jsonl.partial").read_bytes(), "marker": (root / "cut.jsonl.json").read_bytes()}


MARKER_EDITS = {
    "settings_list": lambda m: m.__setitem__("settings", [1, 2]),
    "settings_missing": lambda m: m.pop("settings"),
    "complete_string": lambda m: m.__setitem__("complete", "no"),
    "partial_null": lambda m: m.__setitem__("partial", None),
    "partial_bytes_negative": lambda m: m["partial"].__setitem__("bytes", -5),
    "partial_bytes_larger": lambda m: m["partial"].__setitem__("bytes", m["partial"]["bytes"] + 1),
    "partial_sha_int": lambda m: m["partial"].__setitem__("sha256", 7),
    "pending_edited": lambda m: m["partial"].__setitem__("pending", "x" + m["partial"]["pending"]),
    "written_by_other": lambda m: m.__setitem__("written_by", "someone"),
    "not_object": None,
}
GENERATE_DAMAGE = ["none", "partial_damage", "marker_damage", *(f"marker:{k}" for k in MARKER_EDITS)]


@pytest.mark.parametrize("kind", GENERATE_DAMAGE)
@bounded(PER_KIND)
@given(hit=DAMAGE)
def test_generate_queries_resumes_only_what_its_marker_describes(interrupted_generation, kind, hit):
    """A damaged ``.partial`` or marker is refused in one line and left as it was; an intact pair resumes to
    exactly the uninterrupted run's output; a change that keeps the marker's meaning resumes the same."""
    from multiview_plugin.driver.generate_queries import main as generate_main

    state = interrupted_generation
    with workdir() as tmp:
        out, partial, marker = tmp / "cut.jsonl", tmp / "cut.jsonl.partial", tmp / "cut.jsonl.json"
        partial.write_bytes(damage(state["partial"], *hit) if kind == "partial_damage" else state["partial"])
        marker.write_bytes(damage(state["marker"], *hit) if kind == "marker_damage" else state["marker"])
        if kind.startswith("marker:"):
            edit = MARKER_EDITS[kind.split(":", 1)[1]]
            record = json.loads(state["marker"])
            if edit is None:
                record = [record]
            else:
                edit(record)
            marker.write_text(json.dumps(record))
        before = partial.read_bytes()
        assume(kind != "partial_damage" or before != state["partial"])
        rc, err = run_driver(generate_main, [*state["argv"], "--output", str(out)])
        if rc:
            assert str(partial) in err or str(marker) in err, err
            assert kind != "none", err
            assert partial.read_bytes() == before and not out.exists()
            return
        assert kind == "none" or kind == "marker_damage" or kind == "partial_damage", kind
        assert out.read_bytes() == state["reference"]
