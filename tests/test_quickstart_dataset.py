"""Tests for multiview_plugin.quickstart.dataset: the embedded, procedurally generated demo dataset."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from multiview_plugin.data.readers import (
    format_passage,
    iter_jsonl,
    iter_train_records,
    load_corpus,
    load_qrels,
    load_queries,
)
from multiview_plugin.quickstart.dataset import (
    _KINDS,
    FILE_NAMES,
    KIND_NAMES,
    QuickstartData,
    build_quickstart_data,
    write_quickstart_data,
)


@pytest.fixture(scope="module")
def data() -> QuickstartData:
    return build_quickstart_data()


def _doc_of(qid: str) -> str:
    """Query ids are ``<docid>-<attribute>``."""
    return qid.rsplit("-", 1)[0]


def _all_questions(data: QuickstartData) -> list[tuple[str, str, str, list[str]]]:
    """``(qid, question, gold docid, answers)`` for train and eval questions alike."""
    rows = [(r["query_id"], r["query"], r["positive_passages"][0]["docid"], r["answers"]) for r in data.train]
    rows += [(q, data.eval_queries[q], next(iter(data.eval_qrels[q])), data.eval_answers[q])
             for q in data.eval_queries]
    return rows


def _digest(data: QuickstartData) -> str:
    blob = json.dumps([data.corpus, data.train, data.eval_queries, data.eval_answers, data.eval_qrels])
    return hashlib.sha256(blob.encode()).hexdigest()


def test_deterministic(data):
    assert build_quickstart_data() == data
    assert build_quickstart_data(seed=14) != data


def test_deterministic_across_processes_and_hash_seeds(data):
    """No reliance on hash() or set order: another interpreter with another PYTHONHASHSEED agrees."""
    code = ("import hashlib, json; from multiview_plugin.quickstart.dataset import build_quickstart_data as b; "
            "d = b(); print(hashlib.sha256(json.dumps([d.corpus, d.train, d.eval_queries, d.eval_answers, "
            "d.eval_qrels]).encode()).hexdigest())")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == _digest(data)


def test_sizes(data):
    assert len(data.corpus) == 150
    assert 360 <= len(data.train) <= 450
    assert 130 <= len(data.eval_queries) <= 190
    assert set(data.eval_queries) == set(data.eval_answers) == set(data.eval_qrels)
    assert len({r["query_id"] for r in data.train} | set(data.eval_queries)) == len(data.train) + len(data.eval_queries)


def test_passages_are_short_encyclopedia_entries(data):
    words = [len(p["text"].split()) for p in data.corpus.values()]
    assert min(words) >= 40 and max(words) <= 110
    assert 60 <= sum(words) / len(words) <= 90
    for passage in data.corpus.values():
        assert 4 <= passage["text"].count(".") <= 6, passage  # one fact per sentence; values hold no '.'
        assert passage["title"] in passage["text"]


def test_kinds(data):
    assert len(KIND_NAMES) >= 5
    counts = Counter(data.doc_kinds.values())
    assert set(counts) == set(KIND_NAMES) and set(counts.values()) == {25}


def test_docids_unique_and_clean(data):
    assert all(docid == p["docid"] and "#" not in docid and docid.startswith("qs-")
               for docid, p in data.corpus.items())
    assert len({p["title"] for p in data.corpus.values()}) == len(data.corpus)  # names never repeat


def test_answers_in_gold_passage(data):
    for qid, question, docid, answers in _all_questions(data):
        text = data.corpus[docid]["text"].lower()
        assert answers and all(a.lower() in text for a in answers), (qid, answers)
        assert data.corpus[docid]["title"] in question  # the question names its entity
        assert answers[0].lower() not in question.lower()
    for record in data.train:
        assert record["positive_passages"][0] == data.corpus[record["positive_passages"][0]["docid"]]


def test_answers_never_match_inside_other_words(data):
    """An answer found in ANY passage is found there as whole words ("lion" never matches "millions"), so
    substring-based answer matching agrees with token-based matching."""
    texts = [p["text"].lower() for p in data.corpus.values()]
    for answer in sorted({a for *_, answers in _all_questions(data) for a in answers}):
        needle = answer.lower()
        whole = re.compile(rf"(?<!\w)(?<!\d,){re.escape(needle)}(?!\w)(?!,\d)")
        assert all(whole.search(t) for t in texts if needle in t), answer


def test_several_questions_per_passage_about_different_attributes(data):
    per_doc: dict[str, list[str]] = defaultdict(list)
    for qid, _, docid, _ in _all_questions(data):
        assert _doc_of(qid) == docid
        per_doc[docid].append(qid)
    assert set(per_doc) == set(data.corpus)  # every passage is asked about
    assert all(3 <= len(qids) <= 5 and len(set(qids)) == len(qids) for qids in per_doc.values())


def test_questions_paraphrase_the_passage(data):
    """A question never repeats a sentence of its passage nearly verbatim."""
    for _, question, docid, _ in _all_questions(data):
        sentences = [s.strip().lower() for s in data.corpus[docid]["text"].split(".") if s.strip()]
        stem = question.rstrip("?.").lower()
        assert not any(stem in s or s in stem for s in sentences), question


def test_values_are_shared_across_entities_of_a_kind(data):
    """Lexical overlap alone cannot answer: most answers also occur in other passages of the same kind."""
    shared = 0
    questions = _all_questions(data)
    for _, _, docid, answers in questions:
        kind = data.doc_kinds[docid]
        shared += any(answers[0].lower() in p["text"].lower() for d, p in data.corpus.items()
                      if d != docid and data.doc_kinds[d] == kind)
    assert shared / len(questions) > 0.5


def test_train_eval_split_by_entity(data):
    train_docs = {r["positive_passages"][0]["docid"] for r in data.train}
    negative_docs = {r["negative_passages"][0]["docid"] for r in data.train}
    eval_docs = {docid for judged in data.eval_qrels.values() for docid in judged}
    assert not train_docs & eval_docs
    assert not negative_docs & eval_docs  # eval passages never appear in training at all
    assert train_docs | eval_docs == set(data.corpus)
    assert 0.6 <= len(train_docs) / len(data.corpus) <= 0.8
    for kind in KIND_NAMES:  # split per kind
        assert any(data.doc_kinds[d] == kind for d in eval_docs)
    assert all(judged == {next(iter(judged)): 1} for judged in data.eval_qrels.values())


def test_hard_negatives(data):
    same_value = 0
    for record in data.train:
        (positive,), (negative,) = record["positive_passages"], record["negative_passages"]
        assert negative["docid"] != positive["docid"] and negative["text"] != positive["text"]
        assert data.doc_kinds[negative["docid"]] == data.doc_kinds[positive["docid"]]
        assert negative == data.corpus[negative["docid"]]
        same_value += record["answers"][0].lower() in negative["text"].lower()
    assert same_value / len(data.train) > 0.3  # often the negative states the same value for another entity


def test_train_is_shuffled(data):
    """Questions about one passage are spread out, not adjacent (in-batch negatives would repeat it)."""
    docs = [r["positive_passages"][0]["docid"] for r in data.train]
    assert sum(a == b for a, b in zip(docs, docs[1:])) < len(docs) // 10


def test_templates():
    for kind in _KINDS:
        assert len(kind.attributes) >= 5
        for attribute in (kind.intro, *kind.attributes):
            assert len(attribute.sentences) >= 3 and len(attribute.questions) >= 3
            assert all("{v}" in s for s in attribute.sentences)
            assert all("{name}" in s for s in attribute.sentences) or attribute is not kind.intro
            assert all("{name}" in q and "{v}" not in q for q in attribute.questions)


def test_small_and_invalid_sizes():
    small = build_quickstart_data(num_entities=19, seed=3)
    assert len(small.corpus) == 19 and small.train and small.eval_queries
    assert {r["positive_passages"][0]["docid"] for r in small.train}.isdisjoint(
        d for judged in small.eval_qrels.values() for d in judged)
    with pytest.raises(ValueError, match="at least 18"):
        build_quickstart_data(num_entities=17)


def test_write_and_read_back(data, tmp_path: Path):
    out = tmp_path / "qs"
    paths = write_quickstart_data(data, out)
    assert set(paths) == set(FILE_NAMES) and all(p.parent == out and p.is_file() for p in paths.values())
    assert sorted(p.name for p in out.iterdir()) == sorted(FILE_NAMES.values())  # no temporary files left

    corpus = load_corpus(paths["corpus"])
    assert list(corpus) == list(data.corpus)
    assert all(corpus[d] == format_passage(p["title"], p["text"]) for d, p in data.corpus.items())

    records = list(iter_train_records(paths["train"]))
    assert len(records) == len(data.train)
    for read, original in zip(records, data.train):
        assert read["query_id"] == original["query_id"] and read["query"] == original["query"]
        assert read["answers"] == original["answers"]
        assert read["positive_docids"] == [original["positive_passages"][0]["docid"]]
        assert read["negative_docids"] == [original["negative_passages"][0]["docid"]]
        assert read["positives"] == [corpus[read["positive_docids"][0]]]

    assert load_queries(paths["eval_queries"]) == data.eval_queries
    assert load_qrels(paths["eval_qrels"]) == data.eval_qrels
    assert {o["query_id"]: o["answers"] for _, o in iter_jsonl(paths["eval_answers"])} == data.eval_answers

    before = paths["corpus"].read_bytes()
    write_quickstart_data(data, out)  # rewriting replaces the files in place
    assert paths["corpus"].read_bytes() == before
