"""Readers for the data formats the Tevatron / Pyserini / BEIR / DPR ecosystem uses as-is.

Every reader reports bad input as :class:`InputFormatError`, naming the file, the 1-based line
number and the field, e.g. ``train.jsonl line 17: field 'query': expected a non-empty string, got null``.

Formats (docs/data-formats.md):

* Tevatron train jsonl, legacy (``positive_passages`` with inline passages) and new
  (``positive_document_ids`` resolved against a corpus) -- :func:`iter_train_records`.
* Corpus jsonl ``{"docid"|"_id", "title"?, "text"|"document_text"}`` or DPR ``psgs_w100.tsv``
  (``id<TAB>text<TAB>title``) -- :func:`load_corpus`, :func:`iter_corpus`.
* Queries jsonl ``{"query_id", "query"|"query_text"}``, BEIR ``{"_id", "text"}`` or ``qid<TAB>text``
  -- :func:`load_queries`.
* Qrels, TREC (``qid 0 docid rel``) or BEIR tsv (``query-id corpus-id score`` + header) -- :func:`load_qrels`.
* A BEIR folder -- :func:`load_beir`; DPR ``*.qa.csv`` and its jsonl variant -- :func:`load_dpr_qa`.

Any file may be gzipped (``.gz``); text is UTF-8 (a leading BOM is ignored).
"""

from __future__ import annotations

import ast
import csv
import gzip
import json
import logging
import os
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from multiview_plugin.data.seen_ids import SeenIds
from multiview_plugin.errors import ConfigError, MultiViewError
from multiview_plugin.text_options import PASSAGE_FIELD_SEPARATOR

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike

_TYPE_NAMES = {type(None): "null", bool: "a boolean", int: "a number", float: "a number",
               str: "a string", list: "a list", dict: "an object"}


class InputFormatError(MultiViewError, ValueError):
    """Bad input, with its location.

    ``str(err)`` reads like ``train.jsonl line 17: field 'query': expected a non-empty string, got null``.

    Parameters
    ----------
    path : str or None
        File the bad input is in.
    line : int or None
        1-based line number.
    field : str or None
        Offending field (nested fields as ``positive_passages[0].text``).
    message : str
        What is wrong.
    """

    def __init__(self, path: str | None, line: int | None, field: str | None, message: str):
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        self.message = message
        where = " ".join(p for p in (self.path, None if line is None else f"line {line}") if p)
        prefix = "".join(p for p in (f"{where}: " if where else "", f"field {field!r}: " if field else ""))
        super().__init__(prefix + message)

    def __reduce__(self) -> tuple:
        # pickled whole: raised in a datasets worker process (--num_proc), it reaches the driver intact
        return type(self), (self.path, self.line, self.field, self.message)


def _describe(value: Any) -> str:
    """Short description of a JSON value for error messages ('null', 'an empty string', 'a list', ...)."""
    if value == "":
        return "an empty string"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def open_text(path: PathLike) -> TextIO:
    """Open a text file for reading as UTF-8, transparently decompressing ``.gz``.

    Parameters
    ----------
    path : str or os.PathLike
        File to open.

    Returns
    -------
    TextIO
        A text stream (universal newlines, so CRLF reads as ``\\n``).
    """
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig")
    return open(path, encoding="utf-8-sig")


MAX_LINE_BYTES_ENV = "MULTIVIEW_MAX_LINE_BYTES"
DEFAULT_MAX_LINE_BYTES = 64 * 2**20  # 64 MiB: thousands of times what any model reads of a record


def max_line_bytes() -> int:
    """The longest line (bytes, line end included) the line readers accept: ``$MULTIVIEW_MAX_LINE_BYTES``, default
    64 MiB. A longer line is refused before it is held whole, so a small gzip of one huge line cannot exhaust
    memory."""
    raw = os.environ.get(MAX_LINE_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_LINE_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"${MAX_LINE_BYTES_ENV} {raw!r}: expected a whole number of bytes >= 1")
    return value


def _iter_lines(path: PathLike) -> Iterator[tuple[int, str]]:
    """Yield ``(line number, line without its line end)``; bad UTF-8 is an InputFormatError at its line, and so is
    a line longer than :func:`max_line_bytes` (read in bounded pieces: never held whole)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    cap = max_line_bytes()
    with opener(path, "rb") as f:
        lineno = 0
        while raw := f.readline(cap + 1):
            lineno += 1
            if len(raw) > cap and not raw.endswith(b"\n"):
                raise InputFormatError(str(path), lineno, None,
                                       f"a line longer than {cap:,} bytes (${MAX_LINE_BYTES_ENV}): far beyond what "
                                       "a model reads of one record; split or drop it, or raise the cap")
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise InputFormatError(str(path), lineno, None, f"not valid UTF-8 ({err.reason})") from None
            yield lineno, line.rstrip("\r\n")


iter_lines = _iter_lines  # public name: callers that read text their own way locate a decoding error with it


def _csv_rows(path: PathLike) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line number, row)`` of a tab-separated, csv-quoted file (blank lines skipped)."""
    reader = csv.reader((line + "\n" for _, line in _iter_lines(path)), delimiter="\t")
    try:
        previous = 0
        for row in reader:
            if reader.line_num - previous > 1:  # a quoted field swallowed line ends: rows would be lost
                raise InputFormatError(str(path), previous + 1, None,
                                       f"a quoted field runs on to line {reader.line_num} (an unbalanced '\"'?); "
                                       "each row of this file is one line")
            previous = reader.line_num
            if row and "".join(row).strip():
                yield reader.line_num, row
    except csv.Error as err:
        raise InputFormatError(str(path), reader.line_num, None, f"bad TSV: {err}") from None


def first_nonblank_line(path: PathLike) -> str:
    """The first line with text ('' if the file is blank); bad UTF-8 before it is an InputFormatError."""
    return next((line for _, line in _iter_lines(path) if line.strip()), "")


def _first_char(path: PathLike) -> str:
    """First non-blank character of a file ('' if the file is blank)."""
    return first_nonblank_line(path).lstrip()[:1]


def iter_jsonl(path: PathLike) -> Iterator[tuple[int, dict]]:
    """Iterate over a JSON-lines file.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.jsonl`` file (optionally ``.gz``).

    Yields
    ------
    tuple of (int, dict)
        1-based line number and the parsed object. Blank lines are skipped.

    Raises
    ------
    InputFormatError
        A line is not valid JSON, or not a JSON object.
    """
    for lineno, line in _iter_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputFormatError(str(path), lineno, None,
                                   f"invalid JSON: {err.msg} (column {err.colno})") from None
        if not isinstance(obj, dict):
            raise InputFormatError(str(path), lineno, None, f"expected a JSON object, got {_describe(obj)}")
        if _SURROGATE_ESCAPE.search(line):  # cheap test first: the escape's text is on the line
            field = _lone_surrogate(obj)
            if field is not None:
                raise InputFormatError(str(path), lineno, field, "a lone UTF-16 surrogate escape (\\ud800-"
                                       "\\udfff without its pair): not valid Unicode text")
        yield lineno, obj


# JSON's \uD800-\uDFFF escapes: a high and low surrogate pair decodes to one character, a lone one stays a
# surrogate code point that UTF-8 (and every tokenizer) rejects
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(value: Any, field: str = "") -> str | None:
    """The (nested) field of a parsed JSON value whose text holds a lone surrogate, or None."""
    if isinstance(value, str):
        return field or "(text)" if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        items = ((f"{field}.{k}" if field else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{field}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    return next((found for name, v in items if (found := _lone_surrogate(v, name)) is not None), None)


def format_passage(title: str | None, text: str, separator: str = PASSAGE_FIELD_SEPARATOR) -> str:
    """Join a passage's title and text the way Tevatron does.

    Parameters
    ----------
    title : str or None
        Passage title; may be empty or None.
    text : str
        Passage text.
    separator : str
        Put between title and text (Tevatron's ``--passage_field_separator``).

    Returns
    -------
    str
        ``"title{separator}text"`` with both parts stripped, or just the text when there is no title.
    """
    title = (title or "").strip()
    text = text.strip()
    return f"{title}{separator}{text}" if title and text else title or text


# ----------------------------------------------------------------------------- field checks


class _Ctx:
    """Location (file, line) of the object being validated, so checks can raise located errors."""

    def __init__(self, path: PathLike, line: int | None):
        self.path, self.line = str(path), line

    def error(self, field: str | None, message: str) -> InputFormatError:
        return InputFormatError(self.path, self.line, field, message)

    def string(self, obj: Mapping, key: str, field: str | None = None, *, required: bool = True,
               allow_int: bool = False, non_empty: bool = True) -> str | None:
        """Read ``obj[key]`` as a string (ints accepted and cast when ``allow_int``)."""
        field = field or key
        if key not in obj or obj[key] is None:
            if not required:
                return None
            raise self.error(field, f"expected {'a non-empty' if non_empty else 'a'} string, "
                                    f"got {'null' if key in obj else 'nothing (field is missing)'}")
        value = obj[key]
        if allow_int and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or (non_empty and not value.strip()):
            raise self.error(field, f"expected {'a non-empty' if non_empty else 'a'} string, "
                                    f"got {_describe(value)}")
        return value

    def list_of(self, obj: Mapping, key: str) -> list:
        """Read ``obj[key]`` as a list (missing or null -> ``[]``)."""
        value = obj.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(key, f"expected a list, got {_describe(value)}")
        return value

    def ids(self, obj: Mapping, key: str) -> list[str]:
        """Read a list of document ids (strings or ints, cast to str)."""
        items = self.list_of(obj, key)
        return [self.string({key: v}, key, f"{key}[{i}]", allow_int=True) for i, v in enumerate(items)]


# the longest id (characters): ids go to line files and fixed-width arrays (a docid array is rows x the longest id
# wide), so one huge id among many rows would allocate gigabytes
MAX_ID_CHARS = 1024


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a document or query id (None if it can): whitespace or control characters
    would split or corrupt the line-based files ids end up in (shard lookups, docid files, runs); more than
    :data:`MAX_ID_CHARS` characters would blow up the arrays that hold them."""
    if len(value) > MAX_ID_CHARS:
        return f"of {len(value)} characters ({value[:20]!r}...) is longer than the {MAX_ID_CHARS} an id may have"
    for ch in value:
        if ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf"):
            kind = "whitespace" if ch.isspace() else "a control character"
            return f"{value!r} contains {kind} ({ch!r}); ids must be single tokens"
    return None


def _first_key(obj: Mapping, keys: Iterable[str]) -> str:
    """The first of ``keys`` present in ``obj`` (or the first key, for the error message)."""
    keys = list(keys)
    return next((k for k in keys if k in obj), keys[0])


# ----------------------------------------------------------------------------- train files


def _sentence_indices(ctx: _Ctx, obj: Mapping, key: str) -> list[int]:
    """The optional ``sentence`` of each legacy passage (the hard sentence a miner chose; -1 when absent)."""
    out = []
    for i, passage in enumerate(ctx.list_of(obj, key)):
        value = passage.get("sentence", -1) if isinstance(passage, dict) else -1
        if value is None:
            value = -1
        if not isinstance(value, int) or isinstance(value, bool) or value < -1:
            raise ctx.error(f"{key}[{i}].sentence", f"expected a sentence index >= 0, got {_describe(value)}")
        out.append(value)
    return out


def _passages(ctx: _Ctx, obj: Mapping, key: str, separator: str) -> tuple[list[str], list[str]]:
    """Docids and formatted texts of a legacy ``positive_passages`` / ``negative_passages`` list."""
    docids, texts = [], []
    for i, passage in enumerate(ctx.list_of(obj, key)):
        field = f"{key}[{i}]"
        if not isinstance(passage, dict):
            raise ctx.error(field, f"expected an object with 'text', got {_describe(passage)}")
        text = ctx.string(passage, "text", f"{field}.text", non_empty=False)
        title = ctx.string(passage, "title", f"{field}.title", required=False, non_empty=False)
        docid = ctx.string(passage, "docid", f"{field}.docid", required=False, allow_int=True,
                           non_empty=False)
        docids.append(docid or "")
        texts.append(format_passage(title, text, separator))
    return docids, texts


def _resolve(ctx: _Ctx, obj: Mapping, key: str, corpus: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Docids of a new-format id list and their corpus texts."""
    docids = ctx.ids(obj, key)
    for i, docid in enumerate(docids):
        if docid not in corpus:
            raise ctx.error(f"{key}[{i}]", f"unknown docid {docid!r} (not in the corpus)")
    return docids, [corpus[d] for d in docids]


def iter_train_records(path: PathLike, corpus: Mapping[str, str] | None = None,
                       passage_field_separator: str = PASSAGE_FIELD_SEPARATOR) -> Iterator[dict]:
    """Read a Tevatron train jsonl file (legacy or new format, detected per line) into one schema.

    Legacy lines carry passages inline: ``{"query_id", "query", "positive_passages": [{"docid", "title",
    "text"}], "negative_passages": [...], "answers"?}``. New lines carry ids: ``{"query_id", "query_text",
    "positive_document_ids", "negative_document_ids", "answers"?}`` and need ``corpus``.

    Parameters
    ----------
    path : str or os.PathLike
        The train jsonl file (optionally ``.gz``).
    corpus : Mapping[str, str], optional
        Docid -> formatted passage text (see :func:`load_corpus`); required for new-format lines.
    passage_field_separator : str
        Joins title and text of inline passages.

    Yields
    ------
    dict
        ``{"query_id": str, "query": str, "answers": list[str], "positive_docids": list[str],
        "positives": list[str], "negative_docids": list[str], "negatives": list[str],
        "negative_sentences": list[int], "source": "train.jsonl:17"}``. ``negative_sentences`` holds a
        legacy negative passage's optional ``"sentence"`` (the index of a mined hard sentence, see
        ``multiview_plugin.driver.mine_negatives``), -1 where absent. A missing ``query_id`` becomes the
        ``source`` string; a missing legacy ``docid`` becomes ``""``. A negative that is also a positive of its
        query (same docid, or same text) is dropped, with one warning per file: mined negatives sometimes
        contain the positive, and training against it would push the query away from its own answer.

    Raises
    ------
    InputFormatError
        Bad JSON, a missing/empty query, no positive passage, a passage without text, a wrong type,
        a new-format line without a corpus, or an unknown docid.
    """
    dropped = {"negatives": 0, "queries": 0}
    for lineno, obj in iter_jsonl(path):
        yield parse_train_record(obj, path, lineno, corpus, passage_field_separator, source=f"{path}:{lineno}",
                                 dropped=dropped)
    if dropped["negatives"]:
        logger.warning("%s: dropped %d negative passages that are also positives of their query (in %d queries)",
                       path, dropped["negatives"], dropped["queries"])


def parse_train_record(obj: Mapping, path: PathLike, line: int | None, corpus: Mapping[str, str] | None = None,
                       passage_field_separator: str = PASSAGE_FIELD_SEPARATOR, source: str | None = None,
                       dropped: dict[str, int] | None = None) -> dict:
    """Validate one Tevatron train record (legacy or new format) into the normalised schema of
    :func:`iter_train_records`. ``path`` and ``line`` locate errors (for hub datasets: the dataset name
    and row number). Negatives that are also positives are dropped and counted in ``dropped``."""
    ctx = _Ctx(path, line)
    source = source or f"{Path(str(path)).name}:{line}"
    new_format = "query_text" in obj or "positive_document_ids" in obj
    query = ctx.string(obj, "query_text" if new_format else "query")
    query_id = ctx.string(obj, "query_id", required=False, allow_int=True) or source
    answers = obj.get("answers")
    answers = [answers] if isinstance(answers, str) else ctx.list_of(obj, "answers")
    if not all(isinstance(a, str) for a in answers):
        raise ctx.error("answers", "expected a list of strings")
    if new_format:
        if corpus is None:
            raise ctx.error("positive_document_ids", "this line uses the new Tevatron format (document ids); "
                            "pass a corpus (docid -> text, see load_corpus) to resolve them")
        pos_key, neg_key = "positive_document_ids", "negative_document_ids"
        pos_ids, positives = _resolve(ctx, obj, pos_key, corpus)
        neg_ids, negatives = _resolve(ctx, obj, neg_key, corpus)
    else:
        pos_key = "positive_passages"
        pos_ids, positives = _passages(ctx, obj, pos_key, passage_field_separator)
        neg_ids, negatives = _passages(ctx, obj, "negative_passages", passage_field_separator)
    neg_sentences = [-1] * len(negatives) if new_format else _sentence_indices(ctx, obj, "negative_passages")
    if not positives:
        raise ctx.error(pos_key, f"expected at least one positive {'id' if new_format else 'passage'}")
    neg_ids, negatives, neg_sentences = _drop_positives(pos_ids, positives, neg_ids, negatives, neg_sentences,
                                                        dropped)
    return {"query_id": query_id, "query": query, "answers": list(answers),
            "positive_docids": pos_ids, "positives": positives,
            "negative_docids": neg_ids, "negatives": negatives, "negative_sentences": neg_sentences,
            "source": source}


def _drop_positives(pos_ids: list[str], positives: list[str], neg_ids: list[str], negatives: list[str],
                    neg_sentences: list[int], dropped: dict[str, int] | None
                    ) -> tuple[list[str], list[str], list[int]]:
    """The negatives that are not also positives (same non-empty docid, or same text)."""
    pos_id_set, pos_texts = {d for d in pos_ids if d}, set(positives)
    keep = [i for i, (d, t) in enumerate(zip(neg_ids, negatives)) if not (d in pos_id_set or t in pos_texts)]
    if len(keep) == len(negatives):
        return neg_ids, negatives, neg_sentences
    if dropped is not None:
        dropped["negatives"] += len(negatives) - len(keep)
        dropped["queries"] += 1
    return [neg_ids[i] for i in keep], [negatives[i] for i in keep], [neg_sentences[i] for i in keep]


# ----------------------------------------------------------------------------- corpus


def _is_tsv(path: PathLike) -> bool:
    return str(path).removesuffix(".gz").endswith(".tsv")


def _iter_raw_corpus(path: PathLike) -> Iterator[tuple[int, str, str | None, str]]:
    """Yield ``(line, docid, title, text)`` from a corpus jsonl or DPR psgs tsv, with field checks."""
    if _is_tsv(path):
        first = True
        for lineno, row in _csv_rows(path):
            if first and row == ["id", "text", "title"]:  # the header: the first non-blank row
                first = False
                continue
            first = False
            if len(row) not in (2, 3):
                raise InputFormatError(str(path), lineno, None,
                                       f"expected 'id<TAB>text<TAB>title', got {len(row)} columns")
            yield lineno, row[0].strip(), row[2] if len(row) == 3 else None, row[1]
        return
    for lineno, obj in iter_jsonl(path):
        ctx = _Ctx(path, lineno)
        docid = ctx.string(obj, _first_key(obj, ("docid", "_id")), allow_int=True, non_empty=False)
        text = ctx.string(obj, _first_key(obj, ("text", "document_text", "contents")), non_empty=False)
        title = ctx.string(obj, "title", required=False, non_empty=False)
        yield lineno, docid.strip(), title, text


def iter_corpus(path: PathLike, passage_field_separator: str = PASSAGE_FIELD_SEPARATOR) -> Iterator[tuple[str, str]]:
    """Stream a corpus file as ``(docid, formatted text)``.

    Parameters
    ----------
    path : str or os.PathLike
        Corpus jsonl ``{"docid"|"_id", "title"?, "text"|"document_text"}``, or DPR ``psgs_w100.tsv``
        (``id<TAB>text<TAB>title``, header skipped) when the name ends with ``.tsv`` / ``.tsv.gz``.
    passage_field_separator : str
        Joins title and text (see :func:`format_passage`).

    Yields
    ------
    tuple of (str, str)
        Docid and ``format_passage(title, text, passage_field_separator)``.

    Raises
    ------
    InputFormatError
        Missing docid or text field, an empty docid, a docid containing whitespace, a control character or
        ``'#'``, or a duplicate docid (both line numbers named). Whitespace around a docid is stripped.
    """
    seen = SeenIds()  # bounded per-docid memory (64-bit hashes; a match is confirmed by rereading its line)
    id_field = "id" if _is_tsv(path) else "docid"
    for lineno, docid, title, text in _iter_raw_corpus(path):
        if not docid:
            raise InputFormatError(str(path), lineno, id_field, "expected a non-empty docid")
        if id_problem(docid):
            raise InputFormatError(str(path), lineno, id_field, f"docid {id_problem(docid)}")
        if "#" in docid:
            raise InputFormatError(str(path), lineno, id_field,
                                   f"docid {docid!r}: docids must not contain '#', which separates a docid "
                                   "from its view index in multi-vector lookups")
        first = seen.check_add(docid, lineno)
        if first is not None and _docid_at(path, first) == docid:
            raise InputFormatError(str(path), lineno, id_field,
                                   f"duplicate docid {docid!r} (first seen on line {first})")
        yield docid, format_passage(title, text, passage_field_separator)


def _docid_at(path: PathLike, lineno: int) -> str | None:
    """The docid on line ``lineno`` (confirms a duplicate-hash match; read only then)."""
    return next((docid for n, docid, _, _ in _iter_raw_corpus(path) if n == lineno), None)


def load_corpus(path: PathLike, passage_field_separator: str = PASSAGE_FIELD_SEPARATOR) -> dict[str, str]:
    """Load a whole corpus file (see :func:`iter_corpus`) as an insertion-ordered ``{docid: text}``."""
    corpus = dict(iter_corpus(path, passage_field_separator))
    logger.info("Loaded %d passages from %s", len(corpus), path)
    return corpus


# ----------------------------------------------------------------------------- queries, qrels


def load_queries(path: PathLike) -> dict[str, str]:
    """Load queries as an ordered ``{qid: text}``.

    Parameters
    ----------
    path : str or os.PathLike
        jsonl with ``{"query_id", "query"|"query_text"}`` or BEIR ``{"_id", "text"}`` (detected by a
        leading ``'{'``), else ``qid<TAB>text`` lines (anserini topic files); optionally ``.gz``.

    Returns
    -------
    dict[str, str]
        Query id -> query text, in file order.

    Raises
    ------
    InputFormatError
        A line without id or text, a query id with whitespace or control characters inside, or a duplicate
        query id.
    """
    queries: dict[str, str] = {}
    lines: dict[str, int] = {}
    if _first_char(path) == "{":
        def rows() -> Iterator[tuple[int, str, str]]:
            for lineno, obj in iter_jsonl(path):
                ctx = _Ctx(path, lineno)
                yield (lineno, ctx.string(obj, _first_key(obj, ("query_id", "_id")), allow_int=True),
                       ctx.string(obj, _first_key(obj, ("query", "query_text", "text"))))
    else:
        def rows() -> Iterator[tuple[int, str, str]]:
            for lineno, line in _iter_lines(path):
                if not line.strip():
                    continue
                qid, tab, text = line.partition("\t")
                if not tab or not qid.strip() or not text.strip():
                    raise InputFormatError(str(path), lineno, None,
                                           f"expected 'qid<TAB>query text', got {line!r}")
                yield lineno, qid.strip(), text.strip()
    for lineno, qid, text in rows():
        if id_problem(qid):
            raise InputFormatError(str(path), lineno, "query_id", f"query id {id_problem(qid)}")
        if qid in lines:
            raise InputFormatError(str(path), lineno, "query_id",
                                   f"duplicate query id {qid!r} (first seen on line {lines[qid]})")
        lines[qid] = lineno
        queries[qid] = text
    return queries


def load_qrels(path: PathLike) -> dict[str, dict[str, int]]:
    """Load relevance judgments as ``{qid: {docid: relevance}}``.

    Parameters
    ----------
    path : str or os.PathLike
        TREC qrels (``qid 0 docid rel``, whitespace separated) or BEIR tsv
        (``query-id<TAB>corpus-id<TAB>score`` with a header line);
        CRLF line ends are fine; optionally ``.gz``.

    Returns
    -------
    dict[str, dict[str, int]]
        Judgments in file order (a pair repeated with the same value counts once).

    Raises
    ------
    InputFormatError
        A line with the wrong number of columns (or another number than the first judgment's), a non-integer
        relevance (a first line is skipped as a BEIR
        header only when its last cell is a column name: score, relevance, label ...), or a pair judged twice
        with different values.
    """
    qrels: dict[str, dict[str, int]] = {}
    first = True
    columns: tuple[int, int] | None = None  # the first judgment's column count and line
    for lineno, line in _iter_lines(path):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split("\t")] if "\t" in line else line.split()
        if len(parts) == 4:
            qid, _, docid, rel = parts
        elif len(parts) == 3:
            qid, docid, rel = parts
        else:
            raise InputFormatError(str(path), lineno, None, "expected 'qid 0 docid relevance' (TREC) or "
                                   f"'query-id<TAB>corpus-id<TAB>score' (BEIR), got {len(parts)} columns")
        try:
            relevance = int(rel)
        except ValueError:
            if first and len(parts) == 3 and rel.lower() in _QRELS_HEADER:  # BEIR header: query-id corpus-id score
                first = False
                continue
            raise InputFormatError(str(path), lineno, "relevance",
                                   f"expected an integer, got {rel!r}") from None
        first = False
        if columns is None:
            columns = (len(parts), lineno)
        elif len(parts) != columns[0]:  # e.g. a 3-column line in a TREC file: a column is missing, not a format
            layout = "TREC: qid 0 docid relevance" if columns[0] == 4 else "BEIR: query-id corpus-id score"
            raise InputFormatError(str(path), lineno, None, f"{len(parts)} columns, but line {columns[1]} has "
                                   f"{columns[0]} ({layout}); every line of a qrels file has the same columns")
        judged = qrels.setdefault(qid, {})
        if judged.get(docid, relevance) != relevance:
            raise InputFormatError(str(path), lineno, "relevance",
                                   f"({qid!r}, {docid!r}) is judged {relevance} here but {judged[docid]} on an "
                                   "earlier line; which one holds?")
        judged[docid] = relevance
    return qrels


_QRELS_HEADER = {"score", "relevance", "rel", "label", "grade"}  # the last column's name in a BEIR header


def load_beir(folder: PathLike,
              split: str = "test") -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """Load a BEIR dataset folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/{split}.tsv``; ``.gz`` ok).

    Parameters
    ----------
    folder : str or os.PathLike
        The dataset folder.
    split : str
        Which qrels file to read.

    Returns
    -------
    tuple
        ``(corpus, queries, qrels)``: docid -> ``"title text"``, qid -> text (only the queries judged
        in this split, in queries-file order), qid -> {docid: relevance}.

    Raises
    ------
    FileNotFoundError
        A required file is absent.
    InputFormatError
        Bad input, or judged queries missing from the queries file.
    """
    folder = Path(folder)

    def find(name: str) -> Path:
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.exists():
                return candidate
        raise FileNotFoundError(f"BEIR folder {folder}: no {name} (or {name}.gz)")

    qrels_path = find(f"qrels/{split}.tsv")
    qrels = load_qrels(qrels_path)
    all_queries = load_queries(find("queries.jsonl"))
    missing = [qid for qid in qrels if qid not in all_queries]
    if missing:
        raise InputFormatError(str(qrels_path), None, "query-id", f"{len(missing)} judged query ids are "
                               f"not in queries.jsonl, e.g. {missing[:3]}")
    queries = {qid: text for qid, text in all_queries.items() if qid in qrels}
    corpus = load_corpus(find("corpus.jsonl"))
    unknown = sum(docid not in corpus for judged in qrels.values() for docid in judged)
    if unknown:
        logger.warning("%s: %d judged docids are not in the corpus", qrels_path, unknown)
    logger.info("BEIR %s [%s]: %d docs, %d queries, %d judgments", folder.name, split, len(corpus),
                len(queries), sum(map(len, qrels.values())))
    return corpus, queries, qrels


def load_dpr_qa(path: PathLike) -> list[tuple[str, list[str]]]:
    """Load DPR open-domain QA questions and answers.

    Parameters
    ----------
    path : str or os.PathLike
        DPR ``*.qa.csv`` (``question<TAB>python-list-of-answers``, csv-quoted) or its jsonl variant
        ``{"question", "answer": [...]}`` (detected by a leading ``'{'``), as in anserini's
        ``topics.dpr.*.txt``.

    Returns
    -------
    list of (str, list[str])
        Questions with their answer strings (regexes for CuratedTREC), in file order.

    Raises
    ------
    InputFormatError
        A malformed line.
    """
    items: list[tuple[str, list[str]]] = []

    def check(ctx: _Ctx, answers: Any, field: str) -> list[str]:
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise ctx.error(field, f"expected a list of answer strings, got {_describe(answers)}")
        return answers

    if _first_char(path) == "{":
        for lineno, obj in iter_jsonl(path):
            ctx = _Ctx(path, lineno)
            items.append((ctx.string(obj, "question"), check(ctx, obj.get("answer"), "answer")))
        return items
    for lineno, row in _csv_rows(path):
        ctx = _Ctx(path, lineno)
        if len(row) != 2:
            raise ctx.error(None, f"expected 'question<TAB>[answers]', got {len(row)} columns")
        try:
            answers = ast.literal_eval(row[1])
        except (ValueError, SyntaxError):
            raise ctx.error("answers", f"not a Python list literal: {row[1][:80]!r}") from None
        items.append((ctx.string({"question": row[0]}, "question"), check(ctx, answers, "answers")))
    return items
