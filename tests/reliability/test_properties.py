"""Property-based tests (hypothesis) over every reader and the drivers that use them.

For generated inputs, each reader / driver either

* produces output equal to a reference (the data the file was generated from), for well-formed files and for
  transformations that keep their meaning (blank lines, CRLF, BOM, gzip, key order, extra fields, ...), or
* refuses with one line naming the file (and the line, for line-based files) for malformed ones, or
* for arbitrary byte-level damage (truncation, a deleted / inserted / flipped byte, a duplicated line), does
  one of the two: never a traceback, and never a result that silently drops a line of the file.

Drivers are called in-process through their ``main(argv)`` (the ``cli`` wrapper: exit status 2 and one
``error: ...`` line). Examples are bounded and derandomized (``SETTINGS``) so the suite is reproducible and
fast; docs/reliability.md states the number of generated cases.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import math
import pickle
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from multiview_plugin.data.readers import (
    InputFormatError,
    format_passage,
    iter_train_records,
    load_corpus,
    load_qrels,
    load_queries,
)
from multiview_plugin.driver.evaluate import main as evaluate_main
from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.search import main as search_main
from multiview_plugin.encoding.shards import ShardFormatError, read_shard
from multiview_plugin.errors import MultiViewError
from multiview_plugin.evaluation.runs import read_run
from tests.conftest import WORDS

# Examples per property (PER_KIND: per parametrized damage kind); the sum over this file is the number of
# generated cases stated in docs/reliability.md.
FAST, MEDIUM, SLOW, PER_KIND = 60, 30, 12, 3


def bounded(n: int) -> Callable:
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


# ----------------------------------------------------------------------------- strategies

ID = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.:", min_size=1, max_size=6)
RICH = ["é", "naïve", "日本", "ß", '"q"', "back\\slash", "a/b", "x{y}", "emoji\U0001F600", "zwj\u200dx"]
TEXT = st.lists(st.sampled_from(list(WORDS[:40]) + RICH), min_size=1, max_size=6).map(" ".join)
PLAIN = st.lists(st.sampled_from(list(WORDS[:40])), min_size=1, max_size=5).map(" ".join)


def unique_ids(n_min: int = 1, n_max: int = 6) -> st.SearchStrategy[list[str]]:
    return st.lists(ID, min_size=n_min, max_size=n_max, unique=True)


def write_lines(path: Path, lines: list[str], *, crlf: bool = False, bom: bool = False, blank: frozenset = frozenset(),
                gz: bool = False) -> Path:
    """Write ``lines`` (blank lines inserted before the indices in ``blank``)."""
    out: list[str] = []
    for i, line in enumerate(lines):
        if i in blank:
            out.append("   " if i % 2 else "")
        out.append(line)
    data = (("\ufeff" if bom else "") + "".join(x + ("\r\n" if crlf else "\n") for x in out)).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def damage(data: bytes, kind: str, at: int, byte: int) -> bytes:
    """Byte-level damage at position ``at`` (taken modulo the length)."""
    if not data:
        return data
    at %= len(data)
    if kind == "truncate":
        return data[:at]
    if kind == "delete":
        return data[:at] + data[at + 1:]
    if kind == "insert":
        return data[:at] + bytes([byte]) + data[at:]
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ (byte or 1)]) + data[at + 1:]
    lines = data.splitlines(keepends=True)  # duplicate a line
    i = at % len(lines)
    return b"".join(lines[:i + 1] + [lines[i] if lines[i].endswith(b"\n") else lines[i] + b"\n"] + lines[i + 1:])


DAMAGE = st.tuples(st.sampled_from(["truncate", "delete", "insert", "flip", "duplicate"]),
                   st.integers(0, 10_000), st.integers(0, 255))


def one_line(err: BaseException, path: Path, line: int | None = None) -> None:
    """The error is one line naming ``path`` (and ``line``)."""
    text = str(err)
    assert "\n" not in text and str(path) in text, text
    if line is not None:
        assert f"line {line}" in text, (line, text)


def nonblank_lines(data: bytes) -> list[bytes]:
    """The lines a line reader sees as non-blank (split at b"\\n", blank = only whitespace)."""
    return [x for x in data.split(b"\n") if x.decode("utf-8", "replace").strip()]


def nonblank_text_lines(data: bytes) -> list[str]:
    """The same for readers of text streams (universal newlines: a lone \\r also ends a line)."""
    return [x for x in io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig", errors="replace") if x.split()]


@contextlib.contextmanager
def workdir():
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


def run_driver(main: Callable, argv: list[str]) -> tuple[int, str]:
    """(exit status, the ``error: ...`` line or '') of a driver run in-process; a traceback fails the test."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(argv)
    lines = [x[x.index("error: "):] for x in err.getvalue().splitlines() if "error: " in x]  # after a tqdm bar
    assert "Traceback" not in err.getvalue()
    if rc:
        assert rc == 2 and len(lines) == 1, err.getvalue()
    return rc, lines[0] if lines else ""


# ----------------------------------------------------------------------------- corpus


@st.composite
def corpora(draw) -> list[tuple[str, str | None, str]]:
    ids = draw(unique_ids())
    return [(d, draw(st.one_of(st.none(), TEXT)), draw(TEXT)) for d in ids]


def corpus_lines(docs, fmt: str, *, alt_keys: bool = False, extra: bool = False, shuffle_keys: bool = False,
                 int_ids: bool = False) -> list[str]:
    if fmt == "tsv":
        buf = io.StringIO()
        writer = csv.writer(buf, delimiter="\t", lineterminator="\n")
        writer.writerow(["id", "text", "title"])
        for d, title, text in docs:
            writer.writerow([d, text, title or ""])
        return buf.getvalue().splitlines()
    lines = []
    for d, title, text in docs:
        obj = {"_id" if alt_keys else "docid": int(d) if int_ids and d.isdigit() and d == str(int(d)) else d,
               "document_text" if alt_keys else "text": text}
        if title is not None:
            obj["title"] = title
        if extra:
            obj["metadata"] = {"url": "http://x", "n": [1, 2.5, None]}
        items = list(obj.items())[::-1] if shuffle_keys else list(obj.items())
        lines.append(json.dumps(dict(items), ensure_ascii=bool(len(lines) % 2)))
    return lines


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


# ----------------------------------------------------------------------------- qrels


@st.composite
def qrels_data(draw) -> dict[str, dict[str, int]]:
    return {q: {d: draw(st.integers(-1, 3)) for d in draw(unique_ids(1, 3))} for q in draw(unique_ids(1, 4))}


def qrels_lines(qrels, fmt: str) -> list[str]:
    rows = [(q, d, r) for q, docs in qrels.items() for d, r in docs.items()]
    if fmt == "trec":
        return [f"{q} 0 {d} {r}" for q, d, r in rows]
    return ["query-id\tcorpus-id\tscore", *(f"{q}\t{d}\t{r}" for q, d, r in rows)]


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


# ----------------------------------------------------------------------------- runs


@st.composite
def runs(draw, integer_scores: bool = False) -> dict[str, list[tuple[str, float]]]:
    run = {}
    for q in draw(unique_ids(1, 4)):
        docs = draw(unique_ids(1, 5))
        score = st.integers(-50, 50).map(float) if integer_scores else st.floats(-100, 100, allow_nan=False).map(
            lambda x: round(x, 3))
        scores = sorted((draw(score) for _ in docs), reverse=True)
        run[q] = list(zip(docs, scores))
    return run


def run_lines(run, fmt: str) -> list[str]:
    out = []
    for q, ranking in run.items():
        for rank, (d, s) in enumerate(ranking, 1):
            out.append({"trec": f"{q} Q0 {d} {rank} {s:.6f} tag", "tevatron": f"{q}\t{d}\t{s:.6f}",
                        "msmarco": f"{q}\t{d}\t{rank}", "tevatron_int": f"{q}\t{d}\t{int(s)}"}[fmt])
    return out


def same_ranking(read, run, fmt: str, shuffled: bool) -> None:
    """Equal to the reference: docids in order (scores 1/rank for msmarco); lines shuffled in a tevatron file
    may reorder documents of equal score among themselves (the file has nothing else to order them by)."""
    assert (set(read) == set(run)) if shuffled else (list(read) == list(run))
    for q, ranking in run.items():
        got = read[q]
        if fmt == "msmarco":
            assert got == [(d, 1 / r) for r, (d, _) in enumerate(ranking, 1)]
        elif fmt == "trec" or not shuffled:
            assert got == ranking
        else:
            assert [s for _, s in got] == [s for _, s in ranking] and sorted(got) == sorted(ranking)


@bounded(FAST)
@given(run=runs(), fmt=st.sampled_from(["trec", "tevatron", "msmarco"]), shuffle=st.randoms(use_true_random=False),
       gz=st.booleans(), crlf=st.booleans(), given_format=st.booleans(), blank=st.frozensets(st.integers(1, 9),
                                                                                           max_size=2))
def test_runs_well_formed_equal_reference(run, fmt, shuffle, gz, crlf, given_format, blank):
    lines = run_lines(run, fmt)
    shuffled = fmt != "msmarco"
    if shuffled:
        shuffle.shuffle(lines)  # scores, not line order, rank
    with workdir() as tmp:
        path = write_lines(tmp / f"run.{fmt}{'.gz' if gz else ''}", lines, gz=gz, crlf=crlf, blank=blank)
        same_ranking(read_run(path, fmt if given_format else None), run, fmt, shuffled)


@bounded(FAST)
@given(run=runs(integer_scores=True))
def test_integer_scored_runs_are_never_read_as_ranks(run):
    """A best-first run with integer scores is refused as ambiguous (it needs --run_format), or read as MS MARCO
    ranks only where both readings agree (one document per query, valued 1): never in reverse."""
    with workdir() as tmp:
        path = write_lines(tmp / "run.txt", run_lines(run, "tevatron_int"))
        try:
            read = read_run(path)
        except InputFormatError as err:
            one_line(err, path)
            assert "--run_format" in str(err)
            return
        assert all(len(r) == 1 and r[0][1] == 1 for r in run.values())
        assert {q: [d for d, _ in r] for q, r in read.items()} == {q: [d for d, _ in r] for q, r in run.items()}


RUN_BREAKS = ["nan", "inf", "word", "columns", "dup_doc", "neg_rank", "bad_utf8"]


@bounded(FAST)
@given(run=runs(), fmt=st.sampled_from(["trec", "tevatron", "msmarco"]), kind=st.sampled_from(RUN_BREAKS),
       pick=st.integers(0, 100), given_format=st.booleans())
def test_runs_malformed_is_one_line_at_its_line(run, fmt, kind, pick, given_format):
    assume(not (kind in ("nan", "inf") and fmt == "msmarco"))
    assume(not (kind == "neg_rank" and fmt == "tevatron"))
    lines = run_lines(run, fmt)
    i = pick % len(lines)
    sep = " " if fmt == "trec" else "\t"
    parts = lines[i].split(sep)
    value = 4 if fmt == "trec" else 2
    if kind in ("nan", "inf", "word"):
        parts[value] = {"nan": "nan", "inf": "-inf", "word": "high"}[kind]
    elif kind == "neg_rank":
        parts[3 if fmt == "trec" else 2] = "-1" if fmt == "trec" else "0"
    elif kind == "columns":
        parts = parts[:-1]
    if kind == "dup_doc":
        lines.append(lines[i])
        i = len(lines) - 1
    else:
        lines[i] = sep.join(parts)
    with workdir() as tmp:
        path = write_lines(tmp / f"run.{fmt}", lines)
        if kind == "bad_utf8":
            data = path.read_bytes().split(b"\n")
            data[i] = b"\xff" + data[i]
            path.write_bytes(b"\n".join(data))
        with pytest.raises(InputFormatError) as err:
            read_run(path, fmt if given_format else None)
        one_line(err.value, path, None if kind == "bad_utf8" and not given_format else i + 1)


@bounded(FAST)
@given(run=runs(), fmt=st.sampled_from(["trec", "tevatron", "msmarco"]), hit=DAMAGE, given_format=st.booleans())
def test_runs_damaged_never_traceback_never_lose_lines(run, fmt, hit, given_format):
    with workdir() as tmp:
        path = write_lines(tmp / f"run.{fmt}", run_lines(run, fmt))
        data = damage(path.read_bytes(), *hit)
        path.write_bytes(data)
        try:
            read = read_run(path, fmt if given_format else None)
        except (InputFormatError, MultiViewError) as err:
            one_line(err, path)
            return
        assert sum(map(len, read.values())) == len(nonblank_text_lines(data))


# ----------------------------------------------------------------------------- evaluate (driver)


@bounded(MEDIUM)
@given(run=runs(), fmt=st.sampled_from(["trec", "tevatron", "msmarco"]), pick=st.integers(0, 99),
       kind=st.sampled_from(["none", "none", "nan", "columns", "dup_doc", "cut_line", "qrels_conflict"]))
def test_evaluate_driver_equals_reference_or_one_line(run, fmt, kind, pick):
    """MRR@10 equals a hand computation over the reference ranking, or exit 2 with one line naming the file."""
    qrels = {q: {d: 1 for j, (d, _) in enumerate(r) if (j + pick) % 3 == 0} or {"unretrieved": 1}
             for q, r in run.items()}
    qrels["never_run"] = {"x": 1}
    lines = run_lines(run, fmt)
    i = pick % len(lines)
    if kind == "nan" and fmt != "msmarco":
        parts = lines[i].split()
        parts[4 if fmt == "trec" else 2] = "nan"
        lines[i] = (" " if fmt == "trec" else "\t").join(parts)
    elif kind == "columns":
        lines[i] = lines[i].rsplit(" " if fmt == "trec" else "\t", 1)[0]
    elif kind == "dup_doc":
        lines.append(lines[i])
    elif kind == "cut_line":
        lines[i] = lines[i][:max(1, len(lines[i]) // 3)]
    qrel_lines = qrels_lines(qrels, "trec")
    if kind == "qrels_conflict":
        qrel_lines.append(qrel_lines[0][:-1] + "0")
    with workdir() as tmp:
        path = write_lines(tmp / "run.txt", lines)
        qpath = write_lines(tmp / "qrels.txt", qrel_lines)
        out = tmp / "m.json"
        rc, err = run_driver(evaluate_main, ["--run", str(path), "--qrels", str(qpath), "--metrics", "MRR@10",
                                             "--run_format", fmt, "--output_json", str(out)])
        if rc:
            assert str(qpath if kind == "qrels_conflict" else path) in err, err
            assert kind not in ("none",) and not (kind == "nan" and fmt == "msmarco"), err
            return
        assert kind == "none" or (kind == "nan" and fmt == "msmarco"), kind
        expected = sum(next((1 / r for r, (d, _) in enumerate(ranking[:10], 1) if d in qrels[q]), 0.0)
                       for q, ranking in run.items()) / len(qrels)
        assert json.loads(out.read_text())["MRR@10"] == pytest.approx(expected, abs=1e-12)


# ----------------------------------------------------------------------------- shards and the index driver


@st.composite
def shard_payloads(draw) -> tuple[np.ndarray, list[str]]:
    ids = draw(unique_ids(1, 6))
    dim = draw(st.integers(1, 6))
    dtype = draw(st.sampled_from([np.float32, np.float16]))
    values = draw(st.lists(st.floats(-4, 4, allow_nan=False, width=16), min_size=len(ids) * dim,
                           max_size=len(ids) * dim))
    return np.array(values, dtype=dtype).reshape(len(ids), dim), ids


def _lookup_variant(ids: list[str], variant: str):
    if variant == "tuple":
        return tuple(ids)
    if variant == "array":
        return np.array(ids)
    return list(ids)


SHARD_BREAKS = {
    "nan": lambda reps, lk: (_set(reps, np.nan), lk),
    "inf": lambda reps, lk: (_set(reps, -np.inf), lk),
    "short_lookup": lambda reps, lk: (reps, lk[:-1]),
    "long_lookup": lambda reps, lk: (reps, [*lk, "extra"]),
    "none_id": lambda reps, lk: (reps, [None, *lk[1:]]),
    "float_id": lambda reps, lk: (reps, [1.5, *lk[1:]]),
    "bytes_id": lambda reps, lk: (reps, [b"x", *lk[1:]]),
    "list_id": lambda reps, lk: (reps, [["a", "b"], *lk[1:]]),
    "bool_id": lambda reps, lk: (reps, [True, *lk[1:]]),
    "newline_id": lambda reps, lk: (reps, ["a\nb", *lk[1:]]),
    "space_id": lambda reps, lk: (reps, ["a b", *lk[1:]]),
    "empty_id": lambda reps, lk: (reps, ["", *lk[1:]]),
    "dup_id": lambda reps, lk: (reps, [lk[-1], *lk[1:]]) if len(lk) > 1 else (reps, lk + lk),
    "int_vectors": lambda reps, lk: (reps.astype(np.int32), lk),
    "one_d": lambda reps, lk: (reps.reshape(-1), lk),
    "lookup_dict": lambda reps, lk: (reps, dict.fromkeys(lk)),
}


def _set(reps: np.ndarray, value: float) -> np.ndarray:
    reps = reps.copy()
    reps.flat[len(reps.flat) // 2] = value
    return reps


@pytest.mark.parametrize("kind", ["none", "garbage_after", "truncate", "not_tuple", "triple", *SHARD_BREAKS])
@bounded(PER_KIND)
@given(payload=shard_payloads(), variant=st.sampled_from(["list", "tuple", "array"]), cut=st.integers(0, 10_000),
       protocol=st.sampled_from([2, 4, 5]))
def test_index_driver_over_shards_equals_reference_or_one_line(payload, variant, kind, cut, protocol):
    reps, ids = payload
    with workdir() as tmp:
        shard = tmp / "shard.pkl"
        obj = (reps, _lookup_variant(ids, variant))
        if kind in SHARD_BREAKS:
            obj = SHARD_BREAKS[kind](reps, list(ids))
        elif kind == "not_tuple":
            obj = [reps, ids]
        elif kind == "triple":
            obj = (reps, ids, ids)
        data = pickle.dumps(obj, protocol=protocol)
        if kind == "truncate":
            data = data[:cut % len(data)]
        elif kind == "garbage_after":
            data += b"trailing bytes"
        shard.write_bytes(data)
        rc, err = run_driver(index_main, ["--passage_reps", str(shard), "--index_dir", str(tmp / "idx"),
                                          "--allow_partial"])
        if rc:
            assert str(shard) in err
            assert kind not in ("none", "garbage_after"), err
            assert not (tmp / "idx").exists()
            return
        assert kind in ("none", "garbage_after"), kind
        assert (tmp / "idx" / "docid").read_text().splitlines() == ids
        index = faiss.read_index(str(tmp / "idx" / "index"))
        np.testing.assert_array_equal(index.reconstruct_n(0, index.ntotal), reps.astype(np.float32))


@bounded(MEDIUM)
@given(payload=shard_payloads(), hit=DAMAGE)
def test_damaged_shard_never_traceback(payload, hit):
    """Byte-level damage to a shard pickle: a one-line error naming it, or what the damaged file holds
    (a flipped byte inside the float data is still a valid shard)."""
    reps, ids = payload
    with workdir() as tmp:
        shard = tmp / "shard.pkl"
        shard.write_bytes(damage(pickle.dumps((reps, ids), protocol=5), *hit))
        try:
            got, lookup, _ = read_shard(shard)
        except ShardFormatError as err:
            one_line(err, shard)
            return
        assert got.shape == reps.shape and len(lookup) == len(ids) and np.isfinite(got).all()


# ----------------------------------------------------------------------------- index folders and search


@pytest.fixture(scope="module")
def index_folder(tmp_path_factory) -> dict[str, Path]:
    """A small index (12 documents × 2 views, dim 8) and query vectors; the reference run."""
    root = tmp_path_factory.mktemp("props_index")
    rng = np.random.default_rng(0)
    reps = rng.standard_normal((24, 8)).astype(np.float32)
    lookup = [f"d{i // 2}#{i % 2}" for i in range(24)]
    (root / "c.pkl").write_bytes(pickle.dumps((reps, lookup), protocol=5))
    info = {"model_name": "mvr", "dim": 8, "views_per_doc": 2, "dtype": "float32", "num_items": 12,
            "num_vectors": 24, "max_views": 2, "view_ids": True}
    (root / "c.pkl.json").write_text(json.dumps(info))
    (root / "q.pkl").write_bytes(pickle.dumps((rng.standard_normal((5, 8)).astype(np.float32),
                                               [f"q{i}" for i in range(5)]), protocol=5))
    assert index_main(["--passage_reps", str(root / "c.pkl"), "--index_dir", str(root / "idx")]) == 0
    assert search_main(["--index", str(root / "idx"), "--encoded_queries", str(root / "q.pkl"), "--output",
                        str(root / "ref.trec"), "--hits", "5"]) == 0
    return {"root": root, "index": root / "idx", "queries": root / "q.pkl", "reference": root / "ref.trec"}


def _meta_edit(field: str, value) -> Callable[[dict], None]:
    return lambda meta: meta.__setitem__(field, value)


META_EDITS = {
    "unknown_field": _meta_edit("surprise", 1),
    "dim_string": _meta_edit("dim", "8"),
    "dim_wrong": _meta_edit("dim", 9),
    "num_vectors_wrong": _meta_edit("num_vectors", 23),
    "num_docs_negative": _meta_edit("num_docs", -1),
    "views_word": _meta_edit("views_per_doc", "many"),
    "mean_views_string": _meta_edit("mean_views", "2"),
    "aggregation_unknown": _meta_edit("aggregation", "median"),
    "extra_not_dict": _meta_edit("extra", []),
    "view_ids_string": _meta_edit("view_ids", "yes"),
    "shards_not_list": _meta_edit("shards", "c.pkl"),
    "newer_format": _meta_edit("format_version", 99),
    "missing_dim": lambda meta: meta.pop("dim"),
    "not_object": None,
    "extra_harmless": lambda meta: meta["extra"].__setitem__("note", "added by hand"),
}
FOLDER_DAMAGE = ["delete_index", "delete_docid", "delete_meta", "docid_short", "docid_long", "docid_blank",
                 "index_truncated", "index_garbage", "meta_truncated", *(f"meta:{k}" for k in META_EDITS)]


@pytest.mark.parametrize("kind", FOLDER_DAMAGE)
@bounded(PER_KIND)
@given(cut=st.integers(1, 10_000))
def test_search_driver_over_index_folders_equals_reference_or_one_line(index_folder, kind, cut):
    with workdir() as tmp:
        idx = tmp / "idx"
        shutil.copytree(index_folder["index"], idx)
        meta_path, docid, index = idx / "multiview.json", idx / "docid", idx / "index"
        if kind.startswith("delete_"):
            {"delete_index": index, "delete_docid": docid, "delete_meta": meta_path}[kind].unlink()
        elif kind.startswith("docid_"):
            lines = docid.read_text().splitlines()
            lines = {"docid_short": lines[:-1], "docid_long": [*lines, "d99#0"],
                     "docid_blank": [*lines[:3], "", *lines[3:-1]]}[kind]
            docid.write_text("\n".join(lines) + "\n")
        elif kind.startswith("index_"):
            data = index.read_bytes()
            index.write_bytes(data[:cut % len(data)] if kind == "index_truncated" else b"\x00garbage" * 9)
        elif kind == "meta_truncated":
            text = meta_path.read_text()
            meta_path.write_text(text[:cut % len(text)])
        else:
            edit = META_EDITS[kind.split(":", 1)[1]]
            meta = json.loads(meta_path.read_text())
            if edit is None:
                meta = [meta]
            else:
                edit(meta)
            meta_path.write_text(json.dumps(meta))
        out = tmp / "run.trec"
        rc, err = run_driver(search_main, ["--index", str(idx), "--encoded_queries", str(index_folder["queries"]),
                                           "--output", str(out), "--hits", "5"])
        if rc:
            assert str(idx) in err, err
            assert kind != "meta:extra_harmless", err
            assert not out.exists()
            return
        assert kind == "meta:extra_harmless", kind
        assert read_run(out) == read_run(index_folder["reference"])


# ----------------------------------------------------------------------------- encode (driver)


@pytest.fixture(scope="module")
def tiny_dpr(tiny_bert, tmp_path_factory) -> Path:
    import torch

    from multiview_plugin.arguments import DataArguments, ModelArguments
    from multiview_plugin.registry import get_encoder_class

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("props_dpr")
    get_encoder_class("dpr").build(ModelArguments(model_name_or_path=str(tiny_bert), model_name="dpr"),
                                   DataArguments(pad_to_multiple_of=None, passage_max_len=16,
                                                 query_max_len=8)).save(folder)
    return folder


@bounded(SLOW)
@given(docs=corpora(), kind=st.sampled_from(["none", "blank", "crlf", "dup_id", "surrogate", "bad_json", "empty_text",
                                             "damage"]),
       hit=DAMAGE)
def test_encode_driver_over_corpora_equals_reference_or_one_line(tiny_dpr, docs, kind, hit):
    with workdir() as tmp:
        lines = corpus_lines(docs, "jsonl")
        if kind == "dup_id":
            lines.append(lines[0])
        elif kind == "surrogate":
            lines[-1] = lines[-1].replace('"text": "', '"text": "\\udfff', 1)
        elif kind == "bad_json":
            lines[0] = lines[0][:-2]
        elif kind == "empty_text":
            obj = json.loads(lines[-1])
            obj["text"], obj["title"] = " ", None
            lines[-1] = json.dumps(obj)
        path = write_lines(tmp / "c.jsonl", lines, crlf=kind == "crlf", blank=frozenset({1}) if kind == "blank"
                           else frozenset())
        if kind == "damage":
            path.write_bytes(damage(path.read_bytes(), *hit))
        out = tmp / "c.pkl"
        rc, err = run_driver(__import__("multiview_plugin.driver.encode", fromlist=["main"]).main,
                             ["--model_name_or_path", str(tiny_dpr), "--dataset_path", str(path),
                              "--encode_output_path", str(out), "--per_device_eval_batch_size", "4"])
        if rc:
            assert str(path) in err or str(out) in err, err
            assert kind not in ("none", "blank", "crlf"), err
            assert not out.exists()
            return
        assert kind in ("none", "blank", "crlf", "damage"), kind
        reps, lookup, _ = read_shard(out)
        expected = list(load_corpus(path))  # the reader's output is checked against its reference above
        assert lookup == expected and len(lookup) == len(nonblank_lines(path.read_bytes()))
        assert np.isfinite(reps).all() and all(math.isfinite(x) for x in reps[:, 0])


# ----------------------------------------------------------------------------- re-scoring store and index files


@pytest.fixture(scope="module")
def store_folder(tmp_path_factory) -> dict[str, Path]:
    """An SQ8 index with an fp32 re-scoring store (24 documents × 2 views, dim 8), queries, the reference run."""
    root = tmp_path_factory.mktemp("props_store")
    rng = np.random.default_rng(1)
    reps = rng.standard_normal((48, 8)).astype(np.float32)
    (root / "c.pkl").write_bytes(pickle.dumps((reps, [f"d{i // 2}#{i % 2}" for i in range(48)]), protocol=5))
    (root / "c.pkl.json").write_text(json.dumps({"model_name": "mvr", "dim": 8, "views_per_doc": 2,
                                                 "dtype": "float32", "num_items": 24, "num_vectors": 48,
                                                 "max_views": 2, "view_ids": True}))
    (root / "q.pkl").write_bytes(pickle.dumps((rng.standard_normal((5, 8)).astype(np.float32),
                                               [f"q{i}" for i in range(5)]), protocol=5))
    assert index_main(["--passage_reps", str(root / "c.pkl"), "--index_dir", str(root / "idx"), "--index_factory",
                       "SQ8", "--rescore_store", "fp32", "--target_recall", "0"]) == 0
    assert search_main(["--index", str(root / "idx"), "--encoded_queries", str(root / "q.pkl"), "--output",
                        str(root / "ref.trec"), "--hits", "5"]) == 0
    return {"index": root / "idx", "queries": root / "q.pkl", "reference": root / "ref.trec"}


def _store_edit(store: Path, meta: dict, kind: str, at: int, byte: int) -> None:
    views = np.load(store)
    if kind == "store_truncated":
        data = store.read_bytes()
        store.write_bytes(data[:at % len(data)])
    elif kind == "store_flip":
        data = store.read_bytes()
        at %= len(data)
        store.write_bytes(data[:at] + bytes([data[at] ^ (byte or 1)]) + data[at + 1:])
    elif kind == "store_same_shape":  # another store of the same shape and dtype
        np.save(store, np.roll(views, 1 + at % (len(views) - 1), axis=0))
    elif kind == "store_fp16":
        np.save(store, views.astype(np.float16))
    elif kind == "store_rows":
        np.save(store, views[:-1 - at % 5])
    elif kind == "store_deleted":
        store.unlink()
    elif kind == "meta_rows":
        meta["rescore_store"]["rows"] = 47
    elif kind == "meta_dtype":
        meta["rescore_store"]["dtype"] = ["int8", "float64", None, 3][at % 4]
    elif kind == "meta_file":
        meta["rescore_store"]["file"] = ["../c.pkl", "", "docid", "/etc/passwd"][at % 4]
    elif kind == "meta_fingerprint":
        meta["files"]["rescore_views.npy"] = "1 bytes, sampled sha256 0"
    elif kind == "meta_files_type":
        meta["files"] = ["index", "docid"]


STORE_DAMAGE = ["none", "store_truncated", "store_flip", "store_same_shape", "store_fp16", "store_rows",
                "store_deleted", "meta_rows", "meta_dtype", "meta_file", "meta_fingerprint", "meta_files_type"]


@pytest.mark.parametrize("kind", STORE_DAMAGE)
@bounded(PER_KIND)
@given(at=st.integers(0, 10_000), byte=st.integers(0, 255))
def test_search_over_a_damaged_rescore_store_equals_reference_or_one_line(store_folder, kind, at, byte):
    """The re-scoring store and the files record: any change since the build is one line naming the folder,
    never a run from other vectors."""
    with workdir() as tmp:
        idx = tmp / "idx"
        shutil.copytree(store_folder["index"], idx)
        meta = json.loads((idx / "multiview.json").read_text())
        _store_edit(idx / "rescore_views.npy", meta, kind, at, byte)
        (idx / "multiview.json").write_text(json.dumps(meta))
        out = tmp / "run.trec"
        rc, err = run_driver(search_main, ["--index", str(idx), "--encoded_queries", str(store_folder["queries"]),
                                           "--output", str(out), "--hits", "5"])
        if rc:
            assert str(idx) in err and kind != "none", err
            assert not out.exists()
            return
        assert kind == "none", kind
        assert read_run(out) == read_run(store_folder["reference"])


# ----------------------------------------------------------------------------- hybrid: the BM25 corpus


CORPUS_CHANGES = ["none", "copy", "edit_text", "drop_line", "add_line", "rename_id", "damage"]


@pytest.mark.parametrize("kind", CORPUS_CHANGES)
@bounded(PER_KIND)
@given(texts=st.lists(PLAIN, min_size=12, max_size=12), queries=st.lists(PLAIN, min_size=5, max_size=5),
       hit=DAMAGE, pick=st.integers(0, 11))
def test_hybrid_search_uses_only_the_indexed_corpus(index_folder, kind, texts, queries, hit, pick):
    """``--hybrid bm25 --bm25_corpus``: the corpus the index records (or a byte-identical copy) fuses; any other
    file (an edited text, a line dropped or added, a renamed id, byte damage) is one line naming it."""
    from multiview_plugin.encoding.fingerprint import file_identity

    with workdir() as tmp:
        idx = tmp / "idx"
        shutil.copytree(index_folder["index"], idx)
        corpus = write_lines(tmp / "corpus.jsonl", [json.dumps({"docid": f"d{i}", "text": t})
                                                    for i, t in enumerate(texts)])
        meta = json.loads((idx / "multiview.json").read_text())
        meta["extra"]["input"] = {"identity": file_identity(corpus), "separator": " ", "source": str(corpus)}
        (idx / "multiview.json").write_text(json.dumps(meta))
        topics = write_lines(tmp / "topics.tsv", [f"q{i}\t{q}" for i, q in enumerate(queries)])
        given_corpus = tmp / "given.jsonl"
        lines = corpus.read_text().splitlines()
        if kind == "edit_text":
            lines[pick] = json.dumps({"docid": f"d{pick}", "text": texts[pick] + " edited"})
        elif kind == "drop_line":
            del lines[pick]
        elif kind == "add_line":
            lines.append(json.dumps({"docid": "d99", "text": texts[pick]}))
        elif kind == "rename_id":
            lines[pick] = json.dumps({"docid": f"x{pick}", "text": texts[pick]})
        data = ("\n".join(lines) + "\n").encode()
        given_corpus.write_bytes(damage(data, *hit) if kind == "damage" else data)
        assume(kind != "damage" or given_corpus.read_bytes() != corpus.read_bytes())
        argv = ["--index", str(idx), "--encoded_queries", str(index_folder["queries"]), "--topics", str(topics),
                "--hits", "5", "--hybrid", "bm25", "--hybrid_alpha", "0.5"]
        rc, err = run_driver(search_main, [*argv, "--bm25_corpus", str(given_corpus if kind != "none" else corpus),
                                           "--output", str(tmp / "run.trec")])
        if rc and "stop words" in err:  # every text is a stop word: BM25 has nothing to index (one line)
            assert str(given_corpus if kind != "none" else corpus) in err, err
            return
        if rc:
            assert kind not in ("none", "copy") and "--bm25_corpus" in err and str(given_corpus) in err, err
            assert not (tmp / "run.trec").exists()
            return
        assert kind in ("none", "copy"), kind
        assert run_driver(search_main, [*argv, "--bm25_corpus", str(corpus), "--output", str(tmp / "ref.trec")])[0] == 0
        assert read_run(tmp / "run.trec") == read_run(tmp / "ref.trec")


# ----------------------------------------------------------------------------- generate_queries markers


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


# ----------------------------------------------------------------------------- run-settings files


@pytest.fixture(scope="module")
def run_settings_file(tmp_path_factory) -> dict:
    from multiview_plugin.training.run_settings import INPUTS_KEY, save_run_settings

    folder = tmp_path_factory.mktemp("props_run")
    settings = {"learning_rate": 1e-4, "model_name": "mvr", "seed": 7, "output_dir": str(folder),
                INPUTS_KEY: {"--dataset_path train.jsonl": "10 bytes, sha256 0123456789abcdef"}}
    save_run_settings(folder, settings)
    return {"folder": folder, "settings": settings, "bytes": (folder / "multiview_run.json").read_bytes()}


RUN_EDITS = {
    "settings_list": lambda r: r.__setitem__("settings", [["seed", 7]]),
    "settings_string": lambda r: r.__setitem__("settings", "seed=7"),
    "inputs_list": lambda r: r["settings"].__setitem__("input_files", ["train.jsonl"]),
    "inputs_number": lambda r: r["settings"]["input_files"].__setitem__("--dataset_path train.jsonl", 10),
    "data_changed": lambda r: r["settings"]["input_files"].__setitem__("--dataset_path train.jsonl", "11 bytes"),
    "option_changed": lambda r: r["settings"].__setitem__("seed", 8),
    "may_differ": lambda r: r["settings"].__setitem__("output_dir", "elsewhere"),
    "no_settings": lambda r: r.pop("settings"),
    "not_object": None,
}


@bounded(MEDIUM)
@given(kind=st.sampled_from(["none", "damage", *RUN_EDITS]), hit=DAMAGE)
def test_run_settings_files_resume_the_same_run_or_one_line(run_settings_file, kind, hit):
    """``multiview_run.json`` as the train driver reads it on resume: the same run resumes, anything else (other
    options or data, damage, wrong types) is one ConfigError line naming the file; never a traceback."""
    from multiview_plugin.errors import ConfigError
    from multiview_plugin.training.run_settings import check_resume

    with workdir() as tmp:
        path = tmp / "multiview_run.json"
        if kind == "damage":
            path.write_bytes(damage(run_settings_file["bytes"], *hit))
        else:
            record = json.loads(run_settings_file["bytes"])
            if kind != "none":
                edit = RUN_EDITS[kind]
                record = [record] if edit is None else record
                if edit is not None:
                    edit(record)
            path.write_text(json.dumps(record))
        try:
            check_resume(tmp, run_settings_file["settings"])
        except ConfigError as err:
            assert "\n" not in str(err) and str(tmp) in str(err), str(err)
            assert kind not in ("none", "may_differ"), str(err)
            if kind == "data_changed":
                assert "--dataset_path train.jsonl" in str(err) and "the data changed" in str(err)
            return
        assert kind in ("none", "may_differ", "damage"), kind
        if kind == "damage":  # still parses to the same run: only whitespace-level damage
            assert json.loads(path.read_text())["settings"] == run_settings_file["settings"]


# ----------------------------------------------------------------------------- nothing lost: tool-owned names


@bounded(FAST)
@given(content=st.binary(max_size=64))
def test_output_lock_never_removes_a_file_without_its_marker(content):
    """Any bytes at ``<output>.lock`` but the tool's own marker line: never removed (one line), whatever pid
    they hold."""
    import os

    from multiview_plugin.paths import LOCK_MARKER, OutputLock

    assume(not content.startswith(LOCK_MARKER.encode()))
    with workdir() as tmp:
        lock = tmp / "x.pkl.lock"
        lock.write_bytes(content)
        os.utime(lock, (1, 1))
        with pytest.raises(MultiViewError) as err:
            OutputLock(tmp / "x.pkl").acquire()
        assert "\n" not in str(err.value) and lock.read_bytes() == content


@bounded(FAST)
@given(content=st.one_of(st.binary(max_size=64), st.dictionaries(ID, st.one_of(st.integers(), ID), max_size=4)
                         .map(lambda d: json.dumps(d).encode())), overwrite=st.booleans())
def test_encode_never_replaces_a_file_at_its_sidecar_path(content, overwrite):
    """Any file at ``<output>.json`` that is not a shard sidecar: encode refuses (one line, also with
    --overwrite) before writing anything."""
    from multiview_plugin.encoding.encode import refuse_foreign_output
    from multiview_plugin.errors import ConfigError

    with workdir() as tmp:
        side = tmp / "c.pkl.json"
        side.write_bytes(content)
        with pytest.raises(ConfigError) as err:
            refuse_foreign_output(tmp / "c.pkl", overwrite)
        assert "\n" not in str(err.value) and str(side) in str(err.value) and side.read_bytes() == content


@bounded(FAST)
@given(steps=st.lists(st.tuples(st.integers(1, 60), st.booleans()), min_size=1, max_size=8,
                      unique_by=lambda s: s[0]), limit=st.integers(1, 4))
def test_checkpoint_rotation_never_deletes_a_checkpoint_the_run_did_not_write(steps, limit):
    """``--save_total_limit``: of the ``checkpoint-N`` folders, those not this run's all stay; of the run's own,
    the newest ``limit`` stay (and the newest always)."""
    from multiview_plugin.training.checkpoints import rotate_own_checkpoints

    with workdir() as tmp:
        for step, _ in steps:
            (tmp / f"checkpoint-{step}").mkdir()
            (tmp / f"checkpoint-{step}" / "x").write_text(str(step))
        own = {step for step, mine in steps if mine}
        rotate_own_checkpoints(tmp, limit, lambda p: int(p.name.split("-")[1]) in own)
        left = {int(p.name.split("-")[1]) for p in tmp.iterdir()}
        assert {s for s, mine in steps if not mine} <= left
        assert left & own == set(sorted(own)[-limit:])
