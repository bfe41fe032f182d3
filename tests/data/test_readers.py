"""Tests for multiview_plugin.data.readers: every format round trip, every error case, real files."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from multiview_plugin.data.readers import (
    InputFormatError,
    format_passage,
    iter_corpus,
    iter_jsonl,
    iter_train_records,
    load_beir,
    load_corpus,
    load_dpr_qa,
    load_qrels,
    load_queries,
    open_text,
)
from multiview_plugin.driver.encode import main as encode_main
from tests.conftest import one_line_error, write_train_file
from tests.strategies import (
    DAMAGE,
    FAST,
    PLAIN,
    TEXT,
    bounded,
    corpora,
    corpus_lines,
    damage,
    nonblank_lines,
    one_line,
    qrels_lines,
    unique_ids,
    workdir,
    write_lines,
)


def write(path: Path, text: str, newline: str = "\n") -> Path:
    data = text.replace("\n", newline).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def jsonl(path: Path, *rows: object) -> Path:
    return write(path, "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def located(name: str, line: int | None, field: str | None = None) -> str:
    """Regex for an InputFormatError message naming file, line and field."""
    parts = [re.escape(name)]
    if line is not None:
        parts.append(rf" line {line}")
    if field is not None:
        parts.append(rf": field {re.escape(repr(field))}")
    return "".join(parts)


POS = {"docid": "d1", "title": "T1", "text": "one"}
NEG = {"docid": "d2", "text": "two"}
LEGACY = {"query_id": 7, "query": "q?", "positive_passages": [POS], "negative_passages": [NEG],
          "answers": ["a"]}


# ----------------------------------------------------------------------------- basics


def test_error_message_format():
    err = InputFormatError("train.jsonl", 17, "query", "expected a non-empty string, got null")
    assert str(err) == "train.jsonl line 17: field 'query': expected a non-empty string, got null"
    assert (err.path, err.line, err.field) == ("train.jsonl", 17, "query")
    assert isinstance(err, ValueError)
    assert str(InputFormatError(None, None, None, "boom")) == "boom"
    assert str(InputFormatError("a.tsv", 3, None, "boom")) == "a.tsv line 3: boom"


def test_format_passage():
    assert format_passage(" Title ", " text ") == "Title text"
    assert format_passage("", "text") == "text"
    assert format_passage(None, "text") == "text"
    assert format_passage("T", "x", separator=" [SEP] ") == "T [SEP] x"


def test_open_text_gz_and_plain(tmp_path):
    for name in ("a.txt", "a.txt.gz"):
        write(tmp_path / name, "héllo\nworld\n")
        with open_text(tmp_path / name) as f:
            assert f.read() == "héllo\nworld\n"


def test_iter_jsonl(tmp_path):
    path = jsonl(tmp_path / "x.jsonl", {"a": 1}, "", "  ", {"b": 2})
    assert list(iter_jsonl(path)) == [(1, {"a": 1}), (4, {"b": 2})]
    with pytest.raises(InputFormatError, match=located("bad.jsonl", 2) + ": invalid JSON"):
        list(iter_jsonl(jsonl(tmp_path / "bad.jsonl", {"a": 1}, "{not json")))
    with pytest.raises(InputFormatError, match=located("list.jsonl", 1) + ": expected a JSON object, got a"):
        list(iter_jsonl(jsonl(tmp_path / "list.jsonl", [1, 2])))


def test_iter_jsonl_bad_utf8(tmp_path):
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "\xff"}\n')
    with pytest.raises(InputFormatError, match=located("bin.jsonl", 2) + ": not valid UTF-8"):
        list(iter_jsonl(path))


# ----------------------------------------------------------------------------- train records


def test_legacy_train_round_trip(tmp_path):
    other = {"query_id": "q2", "query": "second", "positive_passages": [{"text": "no id"}]}
    path = jsonl(tmp_path / "train.jsonl.gz", LEGACY, other)
    first, second = iter_train_records(path, passage_field_separator=" | ")
    assert first == {"query_id": "7", "query": "q?", "answers": ["a"],
                     "positive_docids": ["d1"], "positives": ["T1 | one"],
                     "negative_docids": ["d2"], "negatives": ["two"], "negative_sentences": [-1],
                     "source": f"{path}:1"}
    assert second["positive_docids"] == [""] and second["negatives"] == [] and second["answers"] == []
    assert second["source"] == f"{path}:2"  # the full path: errors found later name the folder too


def test_new_format_train_resolved_against_corpus(tmp_path):
    corpus = load_corpus(jsonl(tmp_path / "corpus.jsonl", {"docid": "d1", "title": "T", "text": "one"},
                               {"docid": "d2", "text": "two"}))
    row = {"query_id": "q", "query_text": "hi", "positive_document_ids": ["d1"],
           "negative_document_ids": ["d2"]}
    (rec,) = iter_train_records(jsonl(tmp_path / "train.jsonl", row), corpus=corpus)
    assert rec["query"] == "hi" and rec["positives"] == ["T one"] and rec["negatives"] == ["two"]
    assert rec["positive_docids"] == ["d1"] and rec["negative_docids"] == ["d2"]

    with pytest.raises(InputFormatError, match=located("train.jsonl", 1, "positive_document_ids") + ".*corp"):
        list(iter_train_records(tmp_path / "train.jsonl"))
    bad = dict(row, negative_document_ids=["d2", "zz"])
    with pytest.raises(InputFormatError, match=located("unk.jsonl", 2, "negative_document_ids[1]") + ".*zz"):
        list(iter_train_records(jsonl(tmp_path / "unk.jsonl", row, bad), corpus=corpus))


@pytest.mark.parametrize("row, field, message", [
    ({**LEGACY, "query": None}, "query", "expected a non-empty string, got null"),
    ({k: v for k, v in LEGACY.items() if k != "query"}, "query", "field is missing"),
    ({**LEGACY, "query": "  "}, "query", "expected a non-empty string, got a string"),
    ({**LEGACY, "query": 3}, "query", "got a number"),
    ({**LEGACY, "positive_passages": []}, "positive_passages", "expected at least one positive passage"),
    ({k: v for k, v in LEGACY.items() if k != "positive_passages"}, "positive_passages", "at least one"),
    ({**LEGACY, "positive_passages": [{"docid": "x", "title": "t"}]}, "positive_passages[0].text", "string"),
    ({**LEGACY, "negative_passages": [NEG, {"text": None}]}, "negative_passages[1].text", "got null"),
    ({**LEGACY, "positive_passages": {"text": "x"}}, "positive_passages", "expected a list, got an object"),
    ({**LEGACY, "negative_passages": ["text"]}, "negative_passages[0]", "expected an object"),
    ({**LEGACY, "answers": [1]}, "answers", "list of strings"),
    ({"query_id": "q", "query_text": "x", "positive_document_ids": []}, "positive_document_ids", "at least"),
    ({"query_id": "q", "query_text": "x", "positive_document_ids": "d1"}, "positive_document_ids", "a list"),
])
def test_train_errors(tmp_path, row, field, message):
    path = jsonl(tmp_path / "train.jsonl", LEGACY, row)
    with pytest.raises(InputFormatError, match=located("train.jsonl", 2, field) + ".*" + re.escape(message)):
        list(iter_train_records(path, corpus={"d1": "one"}))


# ----------------------------------------------------------------------------- corpus


def test_corpus_variants(tmp_path):
    path = jsonl(tmp_path / "corpus.jsonl", {"docid": "a", "title": "T", "text": "x"},
                 {"_id": "b", "title": "", "text": "y", "metadata": {}},
                 {"docid": 3, "document_text": "z"})
    assert load_corpus(path) == {"a": "T x", "b": "y", "3": "z"}
    assert list(load_corpus(path)) == ["a", "b", "3"]
    assert list(iter_corpus(path, passage_field_separator="\n")) == [("a", "T\nx"), ("b", "y"), ("3", "z")]


def test_corpus_dpr_tsv(tmp_path):
    text = 'id\ttext\ttitle\n1\t"Aaron ( or ; ""Ahärôn"") was"\tAaron\n2\tplain text\tB\n'
    for name in ("psgs.tsv", "psgs.tsv.gz"):
        assert load_corpus(write(tmp_path / name, text)) == {"1": 'Aaron Aaron ( or ; "Ahärôn") was',
                                                             "2": "B plain text"}
    with pytest.raises(InputFormatError, match=located("cols.tsv", 2) + ": expected 'id<TAB>text<TAB>title'"):
        load_corpus(write(tmp_path / "cols.tsv", "id\ttext\ttitle\n1\ta\tb\tc\n"))


@pytest.mark.parametrize("rows, line, field, message", [
    ([{"title": "t", "text": "x"}], 1, "docid", "field is missing"),
    ([{"docid": "a", "title": "t"}], 1, "text", "field is missing"),
    ([{"docid": "a", "text": "x"}, {"docid": " ", "text": "y"}], 2, "docid", "non-empty docid"),
    ([{"docid": "a", "text": "x"}, {"docid": "b", "text": "y"}, {"docid": "a", "text": "z"}], 3, "docid",
     "duplicate docid 'a' (first seen on line 1)"),
    ([{"docid": "a#1", "text": "x"}], 1, "docid", "docids must not contain '#', which separates a docid"),
    ([{"docid": "a", "text": 5}], 1, "text", "got a number"),
])
def test_corpus_errors(tmp_path, rows, line, field, message):
    pattern = located("corpus.jsonl", line, field) + ".*" + re.escape(message)
    with pytest.raises(InputFormatError, match=pattern):
        load_corpus(jsonl(tmp_path / "corpus.jsonl", *rows))


def test_corpus_tsv_duplicate(tmp_path):
    with pytest.raises(InputFormatError, match=located("p.tsv", 3, "id") + ".*first seen on line 2"):
        load_corpus(write(tmp_path / "p.tsv", "id\ttext\ttitle\n1\ta\tA\n1\tb\tB\n"))


# ----------------------------------------------------------------------------- queries, qrels


def test_queries_formats(tmp_path):
    expected = {"1": "first", "q2": "second"}
    assert load_queries(jsonl(tmp_path / "a.jsonl", {"query_id": 1, "query": "first"},
                              {"query_id": "q2", "query": "second"})) == expected
    assert load_queries(jsonl(tmp_path / "b.jsonl", {"query_id": "1", "query_text": "first"},
                              {"query_id": "q2", "query_text": "second"})) == expected
    assert load_queries(jsonl(tmp_path / "c.jsonl", {"_id": "1", "text": "first", "metadata": {}},
                              {"_id": "q2", "text": "second"})) == expected
    assert load_queries(write(tmp_path / "d.tsv.gz", "1\tfirst\nq2\tsecond\n", newline="\r\n")) == expected
    assert list(load_queries(write(tmp_path / "e.txt", "q2\tsecond\n1\tfirst\n"))) == ["q2", "1"]


def test_queries_errors(tmp_path):
    with pytest.raises(InputFormatError, match=located("q.tsv", 2) + ": expected 'qid<TAB>query text'"):
        load_queries(write(tmp_path / "q.tsv", "1\tfirst\nno tab here\n"))
    with pytest.raises(InputFormatError, match=located("dup.tsv", 3, "query_id") + ".*first seen on line 1"):
        load_queries(write(tmp_path / "dup.tsv", "1\ta\n2\tb\n1\tc\n"))
    with pytest.raises(InputFormatError, match=located("q.jsonl", 1, "query") + ".*field is missing"):
        load_queries(jsonl(tmp_path / "q.jsonl", {"query_id": "1"}))


def test_qrels_trec_and_beir(tmp_path):
    expected = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}}
    assert load_qrels(write(tmp_path / "trec.txt", "q1 0 d1 1\nq1 Q0 d2 0\n\nq2\t0\td3\t2\n")) == expected
    beir = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq2\td3\t2\n"
    assert load_qrels(write(tmp_path / "test.tsv", beir, newline="\r\n")) == expected
    assert load_qrels(write(tmp_path / "test.tsv.gz", beir, newline="\r\n")) == expected


def test_qrels_errors(tmp_path):
    with pytest.raises(InputFormatError, match=located("bad.txt", 2) + ": expected 'qid 0 docid relevance'"):
        load_qrels(write(tmp_path / "bad.txt", "q1 0 d1 1\nq1 d1\n"))
    with pytest.raises(InputFormatError, match=located("rel.txt", 2, "relevance") + ": expected an integer"):
        load_qrels(write(tmp_path / "rel.txt", "q1 0 d1 1\nq1 0 d2 high\n"))
    with pytest.raises(InputFormatError, match=located("rel.tsv", 3, "relevance")):
        load_qrels(write(tmp_path / "rel.tsv", "query-id\tcorpus-id\tscore\nq\td\t1\nq\td2\tx\n"))



def test_qrels_line_with_another_column_count_than_the_file_is_malformed(tmp_path):
    """main: a 3-column line inside a 4-column TREC qrels file was read as a (qid, docid, relevance) judgment."""
    with pytest.raises(InputFormatError, match=located("mixed.txt", 3) + ": 3 columns, but line 1 has 4 "
                       r"\(TREC: qid 0 docid relevance\)"):
        load_qrels(write(tmp_path / "mixed.txt", "q1 0 d1 1\nq1 0 d2 0\nq2 d3 1\n"))
    with pytest.raises(InputFormatError, match=located("mixed.tsv", 3) + ": 4 columns, but line 2 has 3"):
        load_qrels(write(tmp_path / "mixed.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\t0\td3\t1\n"))


def test_load_beir(tmp_path):
    jsonl(tmp_path / "corpus.jsonl", {"_id": "d1", "title": "T", "text": "x"}, {"_id": "d2", "text": "y"})
    jsonl(tmp_path / "queries.jsonl", {"_id": "q1", "text": "a"}, {"_id": "q2", "text": "b"},
          {"_id": "q3", "text": "c"})
    (tmp_path / "qrels").mkdir()
    qrels_text = "query-id\tcorpus-id\tscore\nq3\td2\t1\nq1\td1\t1\n"
    write(tmp_path / "qrels" / "test.tsv", qrels_text, newline="\r\n")
    corpus, queries, qrels = load_beir(tmp_path)
    assert corpus == {"d1": "T x", "d2": "y"}
    assert queries == {"q1": "a", "q3": "c"} and list(queries) == ["q1", "q3"]
    assert qrels == {"q3": {"d2": 1}, "q1": {"d1": 1}}
    with pytest.raises(FileNotFoundError, match="dev.tsv"):
        load_beir(tmp_path, "dev")
    write(tmp_path / "qrels" / "bad.tsv", "query-id\tcorpus-id\tscore\nq9\td1\t1\n")
    with pytest.raises(InputFormatError, match=located("bad.tsv", None, "query-id") + ".*q9"):
        load_beir(tmp_path, "bad")


# ----------------------------------------------------------------------------- DPR qa


def test_dpr_qa_csv_and_jsonl(tmp_path):
    csv_text = "who is \"x\"?\t['A', \"B's\"]\nsecond\t[\"C\"]\n"
    expected = [('who is "x"?', ["A", "B's"]), ("second", ["C"])]
    assert load_dpr_qa(write(tmp_path / "nq.qa.csv", csv_text, newline="\r\n")) == expected
    path = jsonl(tmp_path / "squad.txt", {"question": 'who is "x"?', "answer": ["A", "B's"]},
                 {"question": "second", "answer": ["C"]})
    assert load_dpr_qa(path) == expected


def test_dpr_qa_errors(tmp_path):
    with pytest.raises(InputFormatError, match=located("a.csv", 2, "answers") + ": not a Python list"):
        load_dpr_qa(write(tmp_path / "a.csv", "q\t['A']\nq2\t[oops\n"))
    with pytest.raises(InputFormatError, match=located("b.csv", 1) + ": expected 'question<TAB>"):
        load_dpr_qa(write(tmp_path / "b.csv", "just a question\n"))
    with pytest.raises(InputFormatError, match=located("c.csv", 1, "answers") + ": expected a list"):
        load_dpr_qa(write(tmp_path / "c.csv", "q\t'A'\n"))
    with pytest.raises(InputFormatError, match=located("d.jsonl", 2, "answer") + ": expected a list"):
        load_dpr_qa(jsonl(tmp_path / "d.jsonl", {"question": "q", "answer": ["a"]}, {"question": "q"}))


# ----------------------------------------------------------------------------- real data


def test_real_dpr_qa(real_data):
    topics = real_data / "anserini" / "topics"
    nq = load_dpr_qa(topics / "topics.dpr.nq.test.txt")
    assert len(nq) == 3610
    assert nq[0] == ("who got the first nobel prize in physics", ["Wilhelm Conrad Röntgen"])
    squad = load_dpr_qa(topics / "topics.dpr.squad.test.txt")
    assert len(squad) == 10570 and squad[0][0] == "Which NFL team represented the AFC at Super Bowl 50?"


def test_real_beir_scifact_train(real_data):
    corpus, queries, qrels = load_beir(real_data / "beir" / "scifact", "train")
    assert len(corpus) == 5183 and len(queries) == 809 and len(qrels) == 809
    assert sum(map(len, qrels.values())) == 919
    assert all(d in corpus for judged in qrels.values() for d in judged)


def test_real_anserini_topics_and_qrels(real_data):
    root = real_data / "anserini"
    assert len(load_queries(root / "topics" / "topics.dl19-passage.txt")) == 43
    assert len(load_queries(root / "topics" / "topics.beir-v1.0.0-fiqa.test.tsv.gz")) == 648
    qrels = load_qrels(root / "qrels" / "qrels.dl19-passage.txt")
    assert len(qrels) == 43 and sum(map(len, qrels.values())) == 9260
    assert {r for judged in qrels.values() for r in judged.values()} == {0, 1, 2, 3}


def test_tsv_docid_and_query_id_with_a_space(tmp_path):
    from multiview_plugin.data.readers import InputFormatError, load_corpus, load_queries

    tsv = tmp_path / "psgs.tsv"
    tsv.write_text("id\ttext\ttitle\n1\tparis\tfrance\n2 3\trome\titaly\n")
    with pytest.raises(InputFormatError, match=r"psgs.tsv line 3: field 'id': docid '2 3' contains whitespace"):
        load_corpus(tsv)
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query_id": "q 1", "query": "what"}\n')
    with pytest.raises(InputFormatError, match="q.jsonl line 1: field 'query_id': query id 'q 1' contains"):
        load_queries(queries)


def test_a_positive_listed_as_negative_is_dropped_with_a_warning(tmp_path, caplog):
    from multiview_plugin.data.readers import iter_train_records

    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"query_id": "0", "query": "who", "positive_passages": [
        {"docid": "d0", "text": "paris"}], "negative_passages": [
        {"docid": "d0", "text": "paris"}, {"docid": "d1", "text": "rome"}, {"text": "paris"}],
        "answers": []}) + "\n")
    caplog.set_level("WARNING")
    (rec,) = iter_train_records(path)
    assert rec["negatives"] == ["rome"] and rec["negative_docids"] == ["d1"] and rec["negative_sentences"] == [-1]
    assert "dropped 2 negative passages that are also positives of their query (in 1 queries)" in caplog.text


def _with_lone_surrogate(path: Path, text: str, needle: str) -> Path:
    assert needle in text
    path.write_text(text.replace(needle, needle + "\\ud800", 1))
    return path


def test_lone_surrogate_in_json_text_is_one_line(mvr_index, tmp_path, capsys):
    corpus = _with_lone_surrogate(tmp_path / "corpus.jsonl", mvr_index["corpus"].read_text(), "the moon")
    out = tmp_path / "c.pkl"
    assert encode_main(["--model_name_or_path", str(mvr_index["model"]), "--dataset_path", str(corpus),
                        "--encode_output_path", str(out)]) == 2
    one_line_error(capsys, f"{corpus} line 5", "field 'text'", "surrogate")
    queries = tmp_path / "queries.jsonl"
    queries.write_text('{"query_id": "q1", "query": "what is paris"}\n{"query_id": "q2", "query": "rome\\udc00"}\n')
    assert encode_main(["--model_name_or_path", str(mvr_index["model"]), "--dataset_path", str(queries),
                        "--encode_is_query", "--encode_output_path", str(out)]) == 2
    one_line_error(capsys, f"{queries} line 2", "field 'query'")
    train = write_train_file(tmp_path / "train.jsonl", 1)
    train = _with_lone_surrogate(train, train.read_text(), "london")
    with pytest.raises(InputFormatError, match=r"train.jsonl line 1: field 'negative_passages\[0\].title'"):
        list(iter_train_records(train))
    # a proper surrogate pair is one character, read as such
    queries.write_text('{"query_id": "q1", "query": "smile \\ud83d\\ude00"}\n')
    assert load_queries(queries) == {"q1": "smile \U0001F600"}


def test_tsv_corpus_header_after_a_blank_line_is_not_a_document(tmp_path):
    path = tmp_path / "psgs.tsv"
    path.write_text("\nid\ttext\ttitle\nd1\tparis is big\tParis\n")
    assert load_corpus(path) == {"d1": "Paris paris is big"}


def test_tsv_quote_that_swallows_lines_is_refused(tmp_path):
    """An unbalanced quote made csv read three rows as one (two documents lost, exit 0)."""
    path = tmp_path / "psgs.tsv"
    path.write_text('d1\t"paris is big\tParis\nd2\trome\tRome\nd3\tberlin" x\tBerlin\nd4\tmoon\tMoon\n')
    with pytest.raises(InputFormatError, match=r"psgs.tsv line 1: a quoted field runs on to line 3"):
        load_corpus(path)


def test_qrels_first_line_is_a_header_only_when_it_names_columns(tmp_path):
    from multiview_plugin.data.readers import load_qrels

    path = tmp_path / "qrels.tsv"
    path.write_text("q1\td1\thigh\nq1\td2\t1\n")  # a bad first judgment was skipped as a "header"
    with pytest.raises(InputFormatError, match=r"qrels.tsv line 1: field 'relevance'"):
        load_qrels(path)
    path.write_text("query-id\tcorpus-id\tscore\nq1\td2\t1\n")
    assert load_qrels(path) == {"q1": {"d2": 1}}
    path.write_text("q1 0 d1 1\nq1 0 d1 0\n")  # the later judgment silently won
    with pytest.raises(InputFormatError, match=r"line 2: field 'relevance'.*judged 0 here but 1"):
        load_qrels(path)
    path.write_text("q1 0 d1 1\nq1 0 d1 1\n")  # the same judgment twice is harmless
    assert load_qrels(path) == {"q1": {"d1": 1}}


# ----------------------------------------------------------------------------- property-based tests (hypothesis)
# Corpus, queries, train groups and qrels: equal to a reference, one line, or no line lost.
# Strategies and helpers: tests/strategies.py.


def corpus_reference(docs, fmt: str) -> dict[str, str]:
    return {d: format_passage(title or None if fmt == "tsv" else title, text) for d, title, text in docs}



@bounded(FAST)
@given(docs=corpora(), fmt=st.sampled_from(["jsonl", "tsv"]), crlf=st.booleans(), bom=st.booleans(),
       gz=st.booleans(), blank=st.frozensets(st.integers(0, 6), max_size=2),
       options=st.fixed_dictionaries({"alt_keys": st.booleans(), "extra": st.booleans(),
                                      "shuffle_keys": st.booleans(), "int_ids": st.booleans()}))
def test_corpus_well_formed_equals_reference(docs, fmt, crlf, bom, gz, blank, options):
    with workdir() as tmp:
        lines = corpus_lines(docs, fmt, **(options if fmt == "jsonl" else {}))
        path = write_lines(tmp / f"c.{fmt}{'.gz' if gz else ''}", lines, crlf=crlf, bom=bom, blank=blank, gz=gz)
        assert load_corpus(path) == corpus_reference(docs, fmt)


CORPUS_BREAKS = ["drop_id", "null_text", "empty_id", "space_id", "hash_id", "dup_id", "text_list", "bad_json",
                 "not_object", "surrogate", "bad_utf8"]


@bounded(FAST)
@given(docs=corpora(), fmt=st.sampled_from(["jsonl", "tsv"]), kind=st.sampled_from(CORPUS_BREAKS),
       pick=st.integers(0, 100))
def test_corpus_malformed_is_one_line_at_its_line(docs, fmt, kind, pick):
    if fmt == "tsv":
        assume(kind in ("empty_id", "space_id", "hash_id", "dup_id", "bad_utf8", "bad_json"))
    assume(kind != "dup_id" or len(docs) > 1)
    i = pick % len(docs)
    if kind == "dup_id":
        i = max(i, 1)
    offset = 2 if fmt == "tsv" else 1  # the tsv header is line 1
    with workdir() as tmp:
        lines = corpus_lines(docs, fmt)
        row = i + offset - 1
        if fmt == "tsv":
            cells = next(csv.reader([lines[row]], delimiter="\t"))
            if kind == "bad_json":  # tsv: a wrong number of columns
                cells = cells[:1]
            else:
                cells[0] = {"empty_id": "", "space_id": "a b", "hash_id": "a#1", "dup_id": docs[0][0],
                            "bad_utf8": cells[0]}[kind]
            buf = io.StringIO()
            csv.writer(buf, delimiter="\t", lineterminator="").writerow(cells)
            lines[row] = buf.getvalue()
        elif kind in ("bad_json", "not_object"):
            lines[row] = lines[row][:len(lines[row]) // 2] if kind == "bad_json" else "[1, 2]"
        elif kind != "bad_utf8":
            obj = json.loads(lines[row])
            if kind == "drop_id":
                del obj["docid"]
            elif kind == "null_text":
                obj["text"] = None
            elif kind == "text_list":
                obj["text"] = [obj["text"]]
            elif kind == "surrogate":
                obj["text"] += "\ud800"
            else:
                obj["docid"] = {"empty_id": "", "space_id": "a b", "hash_id": "a#1", "dup_id": docs[0][0]}[kind]
            lines[row] = json.dumps(obj)  # a lone surrogate is written as the escape \ud800
        path = write_lines(tmp / f"c.{fmt}", lines)
        if kind == "bad_utf8":
            data = path.read_bytes().split(b"\n")
            data[row] = data[row] + b"\xff"
            path.write_bytes(b"\n".join(data))
        with pytest.raises(InputFormatError) as err:
            load_corpus(path)
        one_line(err.value, path, i + offset)


@bounded(FAST)
@given(docs=corpora(), fmt=st.sampled_from(["jsonl", "tsv"]), hit=DAMAGE)
def test_corpus_damaged_never_traceback_never_loses_lines(docs, fmt, hit):
    with workdir() as tmp:
        path = write_lines(tmp / f"c.{fmt}", corpus_lines(docs, fmt))
        original = set(path.read_bytes().split(b"\n"))
        data = damage(path.read_bytes(), *hit)
        path.write_bytes(data)
        try:
            corpus = load_corpus(path)
        except InputFormatError as err:
            one_line(err, path)
            return
        reference = corpus_reference(docs, fmt)
        if fmt == "jsonl":  # every non-blank line is a document: none dropped
            assert len(corpus) == len(nonblank_lines(data))
            for line in nonblank_lines(data):
                if line in original:  # an untouched line reads as before
                    obj = json.loads(line)
                    assert corpus[obj["docid"]] == reference[obj["docid"]]
        else:  # every non-blank line but the header is a document
            rows = nonblank_lines(data)
            assert len(corpus) == len(rows) - (rows[0] == b"id\ttext\ttitle")


# ----------------------------------------------------------------------------- queries


@bounded(FAST)
@given(ids=unique_ids(), texts=st.lists(TEXT, min_size=6, max_size=6), fmt=st.sampled_from(["jsonl", "beir", "tsv"]),
       crlf=st.booleans(), bom=st.booleans(), gz=st.booleans(), blank=st.frozensets(st.integers(1, 6), max_size=2))
def test_queries_well_formed_equal_reference(ids, texts, fmt, crlf, bom, gz, blank):
    reference = {q: t.replace("\t", " ").strip() if fmt == "tsv" else t for q, t in zip(ids, texts)}
    if fmt == "tsv":
        lines = [f"{q}\t{t}" for q, t in reference.items()]
    else:
        keys = ("query_id", "query") if fmt == "jsonl" else ("_id", "text")
        lines = [json.dumps({keys[0]: q, keys[1]: t, **({"metadata": {}} if fmt == "beir" else {})})
                 for q, t in reference.items()]
    with workdir() as tmp:
        path = write_lines(tmp / f"q.{fmt}{'.gz' if gz else ''}", lines, crlf=crlf, bom=bom, blank=blank, gz=gz)
        assert load_queries(path) == reference


@bounded(FAST)
@given(ids=unique_ids(2), text=TEXT, fmt=st.sampled_from(["jsonl", "tsv"]),
       kind=st.sampled_from(["no_tab", "empty_text", "dup_id", "space_id", "control_id", "null_id", "surrogate",
                             "bad_utf8"]),
       pick=st.integers(1, 100))
def test_queries_malformed_is_one_line_at_its_line(ids, text, fmt, kind, pick):
    if fmt == "tsv":
        assume(kind not in ("null_id", "surrogate"))
    else:
        assume(kind != "no_tab")
    i = 1 + pick % (len(ids) - 1) if kind == "dup_id" else pick % len(ids)
    with workdir() as tmp:
        rows = [[q, text] for q in ids]
        bad_id = {"dup_id": ids[0], "space_id": "a b", "control_id": "a\x07b", "null_id": None}.get(kind)
        if bad_id is not None or kind == "null_id":
            rows[i][0] = bad_id
        if kind == "empty_text":
            rows[i][1] = "  "
        if kind == "surrogate":
            rows[i][1] += "\udc00"
        if fmt == "tsv":
            lines = [f"{q}\t{t}" if not (kind == "no_tab" and n == i) else f"{q} {t}" for n, (q, t) in enumerate(rows)]
        else:
            lines = [json.dumps({"query_id": q, "query": t}) for q, t in rows]
        path = write_lines(tmp / f"q.{fmt}", lines)
        if kind == "bad_utf8":
            data = path.read_bytes().split(b"\n")
            data[i] = data[i] + b"\xc3"
            path.write_bytes(b"\n".join(data))
        with pytest.raises(InputFormatError) as err:
            load_queries(path)
        one_line(err.value, path, i + 1)


@bounded(FAST)
@given(ids=unique_ids(), text=TEXT, fmt=st.sampled_from(["jsonl", "tsv"]), hit=DAMAGE)
def test_queries_damaged_never_traceback_never_lose_lines(ids, text, fmt, hit):
    with workdir() as tmp:
        lines = ([f"{q}\t{text}" for q in ids] if fmt == "tsv"
                 else [json.dumps({"query_id": q, "query": text}) for q in ids])
        path = write_lines(tmp / f"q.{fmt}", lines)
        data = damage(path.read_bytes(), *hit)
        path.write_bytes(data)
        try:
            queries = load_queries(path)
        except InputFormatError as err:
            one_line(err, path)
            return
        assert len(queries) == len(nonblank_lines(data))


# ----------------------------------------------------------------------------- train groups


@st.composite
def train_groups(draw) -> list[dict]:
    groups = []
    for qid in draw(unique_ids(1, 4)):
        pos_ids = draw(unique_ids(1, 2))
        neg_ids = [d for d in draw(unique_ids(0, 3)) if d not in pos_ids]
        passage = st.tuples(st.one_of(st.none(), PLAIN), TEXT)
        pos = [(d, *draw(passage)) for d in pos_ids]
        neg = [(d, *draw(passage)) for d in neg_ids]
        neg = [n for n in neg if format_passage(n[1], n[2]) not in {format_passage(p[1], p[2]) for p in pos}]
        groups.append({"query_id": qid, "query": draw(TEXT), "answers": draw(st.lists(PLAIN, max_size=2)),
                       "pos": pos, "neg": neg})
    return groups


def train_line(g: dict) -> str:
    def passages(items):
        return [{"docid": d, "text": t, **({"title": title} if title is not None else {})} for d, title, t in items]
    return json.dumps({"query_id": g["query_id"], "query": g["query"], "answers": g["answers"],
                       "positive_passages": passages(g["pos"]), "negative_passages": passages(g["neg"])})


def train_reference(g: dict) -> dict:
    return {"query_id": g["query_id"], "query": g["query"], "answers": g["answers"],
            "positive_docids": [d for d, _, _ in g["pos"]], "positives": [format_passage(a, t) for _, a, t in g["pos"]],
            "negative_docids": [d for d, _, _ in g["neg"]], "negatives": [format_passage(a, t) for _, a, t in g["neg"]]}


def _records(path: Path) -> list[dict]:
    keys = ("query_id", "query", "answers", "positive_docids", "positives", "negative_docids", "negatives")
    return [{k: r[k] for k in keys} for r in iter_train_records(path)]


@bounded(FAST)
@given(groups=train_groups(), crlf=st.booleans(), gz=st.booleans(), blank=st.frozensets(st.integers(1, 4), max_size=2))
def test_train_groups_well_formed_equal_reference(groups, crlf, gz, blank):
    with workdir() as tmp:
        path = write_lines(tmp / f"t.jsonl{'.gz' if gz else ''}", [train_line(g) for g in groups], crlf=crlf,
                           blank=blank, gz=gz)
        assert _records(path) == [train_reference(g) for g in groups]


TRAIN_BREAKS = {
    "no_query": lambda o: o.pop("query"),
    "empty_query": lambda o: o.update(query=" "),
    "no_positive": lambda o: o.update(positive_passages=[]),
    "positive_not_list": lambda o: o.update(positive_passages={"text": "x"}),
    "passage_not_object": lambda o: o["positive_passages"].append("text"),
    "passage_without_text": lambda o: o["positive_passages"][0].pop("text"),
    "text_number": lambda o: o["positive_passages"][0].update(text=3),
    "answers_not_strings": lambda o: o.update(answers=[1]),
    "bad_sentence": lambda o: o["negative_passages"].append({"docid": "zz", "text": "other", "sentence": -5}),
    "new_format_without_corpus": lambda o: o.update(positive_document_ids=["d"]),
    "surrogate": lambda o: o.update(query=o["query"] + "\udbff"),
}


@bounded(FAST)
@given(groups=train_groups(), kind=st.sampled_from(sorted(TRAIN_BREAKS)), pick=st.integers(0, 10))
def test_train_groups_malformed_is_one_line_at_its_line(groups, kind, pick):
    i = pick % len(groups)
    with workdir() as tmp:
        lines = [train_line(g) for g in groups]
        obj = json.loads(lines[i])
        TRAIN_BREAKS[kind](obj)
        lines[i] = json.dumps(obj)
        path = write_lines(tmp / "t.jsonl", lines)
        with pytest.raises(InputFormatError) as err:
            _records(path)
        one_line(err.value, path, i + 1)


@bounded(FAST)
@given(groups=train_groups(), hit=DAMAGE)
def test_train_groups_damaged_never_traceback_never_lose_lines(groups, hit):
    with workdir() as tmp:
        path = write_lines(tmp / "t.jsonl", [train_line(g) for g in groups])
        data = damage(path.read_bytes(), *hit)
        path.write_bytes(data)
        try:
            records = _records(path)
        except InputFormatError as err:
            one_line(err, path)
            return
        assert len(records) == len(nonblank_lines(data))


@st.composite
def qrels_data(draw) -> dict[str, dict[str, int]]:
    return {q: {d: draw(st.integers(-1, 3)) for d in draw(unique_ids(1, 3))} for q in draw(unique_ids(1, 4))}


@bounded(FAST)
@given(qrels=qrels_data(), fmt=st.sampled_from(["trec", "beir"]), crlf=st.booleans(), gz=st.booleans(),
       blank=st.frozensets(st.integers(1, 5), max_size=2))
def test_qrels_well_formed_equal_reference(qrels, fmt, crlf, gz, blank):
    with workdir() as tmp:
        path = write_lines(tmp / f"qrels.{fmt}{'.gz' if gz else ''}", qrels_lines(qrels, fmt), crlf=crlf,
                           blank=blank, gz=gz)
        assert load_qrels(path) == qrels


@bounded(FAST)
@given(qrels=qrels_data(), fmt=st.sampled_from(["trec", "beir"]), pick=st.integers(0, 100),
       kind=st.sampled_from(["float_rel", "word_rel", "columns", "conflict", "bad_utf8"]))
def test_qrels_malformed_is_one_line_at_its_line(qrels, fmt, pick, kind):
    with workdir() as tmp:
        lines = qrels_lines(qrels, fmt)
        first = 1 if fmt == "beir" else 0
        i = first + pick % (len(lines) - first)
        sep = " " if fmt == "trec" else "\t"
        parts = lines[i].split(sep)
        if kind == "float_rel":
            parts[-1] = "1.5"
        elif kind == "word_rel":
            parts[-1] = "relevant"
        elif kind == "columns":
            parts = parts[:2]
        elif kind == "conflict":  # the same pair judged twice, differently
            lines.append(sep.join(parts[:-1] + [str(int(parts[-1]) + 1)]))
            i = len(lines) - 1
        if kind != "conflict":
            lines[i] = sep.join(parts)
        path = write_lines(tmp / f"qrels.{fmt}", lines)
        if kind == "bad_utf8":
            data = path.read_bytes().split(b"\n")
            data[i] += b"\xed\xa0\x80"  # an encoded surrogate: not UTF-8
            path.write_bytes(b"\n".join(data))
        with pytest.raises(InputFormatError) as err:
            load_qrels(path)
        one_line(err.value, path, i + 1)


def test_a_huge_line_in_a_small_gzip_is_refused_without_holding_it(tmp_path, monkeypatch):
    """encode: a small gzip holding one 4 GiB line ended in a MemoryError under a 3 GB limit. Lines are read in
    pieces of at most $MULTIVIEW_MAX_LINE_BYTES (here 1 MB for speed; 64 MiB by default): a longer one is one
    line naming the file and the line, and memory stays within a few caps."""
    import gzip
    import tracemalloc

    from multiview_plugin.data.readers import DEFAULT_MAX_LINE_BYTES, InputFormatError, iter_corpus, max_line_bytes
    from multiview_plugin.errors import MultiViewError

    cap = 1_000_000
    monkeypatch.setenv("MULTIVIEW_MAX_LINE_BYTES", str(cap))
    path = tmp_path / "corpus.jsonl.gz"
    with gzip.open(path, "wb") as f:
        f.write(b'{"docid": "d0", "text": "fine"}\n')
        f.write(b'{"docid": "d1", "text": "' + b"a" * (cap - 30) + b'"}\n')  # within the cap: read
        f.write(b'{"docid": "d2", "text": "')
        for _ in range(40):  # a 40 MB line, 40 KB compressed
            f.write(b"a" * 1_000_000)
        f.write(b'"}\n')
    assert path.stat().st_size < 200_000
    read = []
    tracemalloc.start()
    with pytest.raises(InputFormatError, match=r"corpus.jsonl.gz line 3: a line longer than 1,000,000 bytes "
                                               r"\(\$MULTIVIEW_MAX_LINE_BYTES\)"):
        for docid, _ in iter_corpus(path):
            read.append(docid)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert read == ["d0", "d1"] and peak < 8 * cap, peak
    monkeypatch.setenv("MULTIVIEW_MAX_LINE_BYTES", "0")
    with pytest.raises(MultiViewError, match="MULTIVIEW_MAX_LINE_BYTES '0': expected a whole number"):
        max_line_bytes()
    monkeypatch.delenv("MULTIVIEW_MAX_LINE_BYTES")
    assert max_line_bytes() == DEFAULT_MAX_LINE_BYTES == 64 * 2**20


def test_encode_of_a_huge_line_is_one_error_line(mvr_index, tmp_path, capsys, monkeypatch):
    import gzip

    monkeypatch.setenv("MULTIVIEW_MAX_LINE_BYTES", "100000")
    corpus = tmp_path / "corpus.jsonl.gz"
    with gzip.open(corpus, "wb") as f:
        f.write(b'{"docid": "d0", "text": "' + b"a" * 3_000_000 + b'"}\n')
    out = tmp_path / "c.pkl"
    assert encode_main(["--model_name_or_path", str(mvr_index["model"]), "--dataset_path", str(corpus),
                        "--encode_output_path", str(out)]) == 2
    one_line_error(capsys, f"{corpus} line 1", "longer than 100,000 bytes")
    assert not out.exists()
