"""Pseudo-query files (DCE's document views; doc2query / docTTTTTquery output).

Two formats are read:

* jsonl, one document per line: ``{"docid": "d1", "queries": ["q1", "q2", ...]}`` (what
  :mod:`multiview_plugin.driver.generate_queries` writes); any docid order.
* docTTTTTquery-style text predictions aligned to a corpus: line i holds the queries of the corpus's i-th
  document. A ``.txt`` file holds one query per line (several files, comma-separated, give several queries
  per document, like docTTTTTquery's ``predicted_queries_topk_sample000.txt`` ... ``019.txt``); a line may
  also hold several queries separated by tabs. The line count must equal the corpus size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from multiview_plugin.data.readers import InputFormatError, PathLike, iter_jsonl, open_text
from multiview_plugin.text_options import PASSAGE_FIELD_SEPARATOR


def iter_query_records(path: PathLike) -> Iterator[tuple[int, str, list[str]]]:
    """``(line, docid, queries)`` of a pseudo-query jsonl file, with located errors."""
    for lineno, obj in iter_jsonl(path):
        docid = obj.get("docid")
        if isinstance(docid, int) and not isinstance(docid, bool):
            docid = str(docid)
        if not isinstance(docid, str) or not docid:
            raise InputFormatError(str(path), lineno, "docid", f"expected a non-empty string, got {docid!r}")
        queries = obj.get("queries")
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            raise InputFormatError(str(path), lineno, "queries", "expected a list of strings")
        yield lineno, docid, [q.strip() for q in queries if q.strip()]


def _aligned_text(paths: Sequence[str], docids: Sequence[str], keep: set[str] | None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {d: [] for d in docids if keep is None or d in keep}
    for path in paths:
        n = 0
        with open_text(path) as f:
            for n, line in enumerate(f, start=1):
                if n > len(docids):
                    raise InputFormatError(path, n, None, f"more lines than the corpus has documents "
                                           f"({len(docids)}): predictions and corpus are misaligned")
                if docids[n - 1] in out:
                    out[docids[n - 1]].extend(q.strip() for q in line.rstrip("\n").split("\t") if q.strip())
        if n != len(docids):
            raise InputFormatError(path, None, None, f"{n} lines but the corpus has {len(docids)} documents: "
                                   "line i must hold the queries of the corpus's i-th document")
    return out


def load_pseudo_queries(path: PathLike, corpus_docids: Sequence[str] | None = None,
                        keep: set[str] | None = None) -> dict[str, list[str]]:
    """Pseudo-queries by docid from jsonl or aligned text predictions (see the module docstring).

    ``corpus_docids`` (in corpus order) is required for text predictions; for jsonl it is used to check that
    every listed docid is in the corpus. ``keep``: only these docids are held in memory (one encode shard).

    Raises
    ------
    InputFormatError
        Bad records, a duplicate docid, text predictions whose line count differs from the corpus, or docids
        unknown to the corpus.
    """
    paths = [p for p in str(path).split(",") if p]
    for p in paths:
        if not Path(p).is_file():
            raise FileNotFoundError(f"pseudo-query file {p} does not exist")
    if all(p.removesuffix(".gz").endswith(".txt") for p in paths):
        if corpus_docids is None:
            raise InputFormatError(paths[0], None, None, "text predictions are aligned by line to a corpus: "
                                   "pass the corpus (its docids in order)")
        return _aligned_text(paths, list(corpus_docids), keep)
    known = set(corpus_docids) if corpus_docids is not None else None
    out: dict[str, list[str]] = {}
    for p in paths:
        for lineno, docid, queries in iter_query_records(p):
            if docid in out:
                raise InputFormatError(p, lineno, "docid", f"duplicate docid {docid!r}")
            if known is not None and docid not in known:
                raise InputFormatError(p, lineno, "docid", f"docid {docid!r} is not in the corpus")
            if keep is None or docid in keep:
                out[docid] = queries
            else:
                out.setdefault(docid, [])  # remembered for the duplicate check only
    if keep is not None:
        out = {d: q for d, q in out.items() if d in keep}
    return out


def format_query_record(docid: str, queries: Sequence[str]) -> str:
    return json.dumps({"docid": docid, "queries": list(queries)}, ensure_ascii=False) + "\n"


def _warmup_generator(queries_path: str, corpus_path: str, separator: str, stamps: Any) -> Iterator[dict]:
    from multiview_plugin.data.readers import iter_corpus

    corpus = dict(iter_corpus(corpus_path, separator))
    views = load_pseudo_queries(queries_path, list(corpus))
    for docid, queries in views.items():
        for i, query in enumerate(queries):
            yield {"query_id": f"{docid}:{i}", "query": query, "answers": [], "positive_docids": [docid],
                   "positives": [corpus[docid]], "negative_docids": [], "negatives": [], "negative_sentences": [],
                   "source": f"{queries_path}:{docid}"}


def warmup_records(queries_path: str, corpus_path: str, passage_field_separator: str = PASSAGE_FIELD_SEPARATOR,
                   cache_dir: str | None = None) -> Any:
    """DCE's warm-up training set: every pseudo-query with its own document as the positive and no hard
    negatives (training then uses in-batch negatives only), as validated train records."""
    import datasets

    from multiview_plugin.data.dataset import RECORD_FEATURES, _stamp

    if not corpus_path:
        raise InputFormatError(queries_path, None, None, "warm-up on pseudo-queries needs --corpus_path "
                               "(the documents the queries were generated from)")
    records = datasets.Dataset.from_generator(
        _warmup_generator, features=RECORD_FEATURES, cache_dir=cache_dir,
        gen_kwargs={"queries_path": queries_path, "corpus_path": corpus_path, "separator": passage_field_separator,
                    "stamps": [_stamp(p) for p in [*queries_path.split(","), corpus_path]]})
    if len(records) == 0:
        raise InputFormatError(queries_path, None, None, "no pseudo-queries found")
    return records


def write_sentence_queries(corpus_path: str, output: PathLike, max_queries: int = 10,
                           passage_field_separator: str = PASSAGE_FIELD_SEPARATOR) -> Path:
    """A pseudo-query file whose "queries" are each document's first ``max_queries`` sentences.

    A documented stand-in for doc2query output where no generator is available (no model can be downloaded
    on the reference machines): views E(sentence ⊕ d) stress one sentence each, with no knowledge of real
    questions. Written atomically.
    """
    from multiview_plugin.atomic import atomic_open
    from multiview_plugin.data.readers import iter_corpus
    from multiview_plugin.data.sentences import split_sentences

    with atomic_open(output) as f:
        for docid, text in iter_corpus(corpus_path, passage_field_separator):
            f.write(format_query_record(docid, split_sentences(text)[:max_queries]))
    return Path(output)
