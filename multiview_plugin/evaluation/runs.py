"""Run files: the rankings a search writes and the evaluation reads.

Three formats, all one line per retrieved document:

* ``trec``: ``qid Q0 docid rank score tag`` (rank from 1), what ``trec_eval`` and Pyserini read;
* ``msmarco``: ``qid<TAB>docid<TAB>rank`` (MS MARCO's official evaluation script);
* ``tevatron``: ``qid<TAB>docid<TAB>score`` (Tevatron's ``--save_text`` output).

In memory a run is a :data:`Run`: ``{qid: [(docid, score), ...]}`` with each list in rank order, best first.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from multiview_plugin.atomic import atomic_open
from multiview_plugin.data.readers import InputFormatError, iter_lines, open_text
from multiview_plugin.errors import ConfigError

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike
Run = dict[str, list[tuple[str, float]]]
"""``qid -> [(docid, score)]`` in rank order (best first)."""

RUN_FORMATS = ("trec", "msmarco", "tevatron")
_WHITESPACE = re.compile(r"\s")
_INT = re.compile(r"[+-]?\d+")


def _check_token(value: str, what: str) -> None:
    if not value or _WHITESPACE.search(value):
        raise ConfigError(f"cannot write {what} {value!r} to a run file: it is empty or contains whitespace")


def write_run(run: Run, path: PathLike, fmt: str = "trec", tag: str = "multiview") -> Path:
    """Write a run file atomically (temporary file in the same folder, then :func:`os.replace`).

    Parameters
    ----------
    run : Run
        ``{qid: [(docid, score), ...]}``, each list in rank order (best first); ranks are the list positions.
    path : str or os.PathLike
        Output file; parent folders are created.
    fmt : {"trec", "msmarco", "tevatron"}
        ``trec``: ``qid Q0 docid rank score tag``; ``msmarco``: ``qid<TAB>docid<TAB>rank``;
        ``tevatron``: ``qid<TAB>docid<TAB>score``. Ranks count from 1, scores are written as ``%.6f``.
    tag : str
        Run tag (last column of the ``trec`` format).

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ConfigError
        Unknown format, or a qid, docid or tag that is empty or contains whitespace.
    """
    if fmt not in RUN_FORMATS:
        raise ConfigError(f"unknown run format {fmt!r}; expected one of {', '.join(RUN_FORMATS)}")
    if fmt == "trec":
        _check_token(tag, "run tag")
    path = Path(path)
    n_lines = 0
    with atomic_open(path) as f:
        for qid, ranking in run.items():
            qid = str(qid)
            _check_token(qid, "query id")
            lines = []
            for rank, (docid, score) in enumerate(ranking, 1):
                docid = str(docid)
                _check_token(docid, "docid")
                if fmt == "trec":
                    lines.append(f"{qid} Q0 {docid} {rank} {score:.6f} {tag}\n")
                elif fmt == "msmarco":
                    lines.append(f"{qid}\t{docid}\t{rank}\n")
                else:
                    lines.append(f"{qid}\t{docid}\t{score:.6f}\n")
            f.writelines(lines)
            n_lines += len(lines)
    logger.info("wrote %s run %s (%d queries, %d lines)", fmt, path, len(run), n_lines)
    return path


def _first_columns(path: PathLike) -> tuple[int, list[str]] | None:
    try:
        with open_text(path) as f:
            return next(((n, line.split()) for n, line in enumerate(f, 1) if line.strip()), None)
    except UnicodeDecodeError as err:
        for _ in iter_lines(path):  # raises the error located at its line
            pass
        raise InputFormatError(str(path), None, None, f"not valid UTF-8 ({err.reason})") from None


def _columns_format(path: PathLike) -> str:
    """``trec`` (6 columns) or ``3`` (msmarco or tevatron: decided by the values) from the first line."""
    first = _first_columns(path)
    if first is None:
        raise InputFormatError(str(path), None, None, "the run file is empty")
    lineno, parts = first
    if len(parts) == 6:
        return "trec"
    if len(parts) == 3:
        return "3"
    raise InputFormatError(str(path), lineno, None,
                           f"cannot tell the run format: expected 6 columns (trec: 'qid Q0 docid rank score tag') "
                           f"or 3 (msmarco 'qid docid rank', tevatron 'qid docid score'), got {len(parts)}")


def detect_run_format(path: PathLike) -> str:
    """A run file's format, when its content leaves no doubt.

    Six whitespace-separated columns -> ``trec``. Three columns: ``tevatron`` (scores) when some third value
    is not an integer (Tevatron writes scores as floats); ``msmarco`` (ranks) when every third value is an
    integer and each query's values are exactly 1, 2, ..., n in file order (ranks as MS MARCO writes them; a
    best-first list of integer *scores* never ascends). Any other all-integer file is ambiguous: the same
    integers read as ranks or as scores give opposite orders, so it is refused (pass ``fmt`` / ``--run_format``).

    Raises
    ------
    InputFormatError
        The file is empty, its first line has another number of columns, or a 3-column file is ambiguous.
    """
    fmt = _columns_format(path)
    return fmt if fmt == "trec" else _parse_run(path, None)[1]


def read_run(path: PathLike, fmt: str | None = None) -> Run:
    """Read a run file into rank order.

    Parameters
    ----------
    path : str or os.PathLike
        ``trec``, ``msmarco`` or ``tevatron`` run (columns split on any whitespace; optionally ``.gz``).
    fmt : {"trec", "msmarco", "tevatron"}, optional
        The format; detected when omitted, only where unambiguous (see :func:`detect_run_format`).

    Returns
    -------
    Run
        ``{qid: [(docid, score)]}``, queries in order of first appearance. ``trec`` and ``tevatron`` lists
        are sorted by score, best first; equal scores keep the file's rank column (``trec``), then the file
        order. ``msmarco`` lists are sorted by rank and get the score ``1 / rank``.

    Raises
    ------
    InputFormatError
        A line with the wrong number of columns, a non-numeric or non-finite (NaN, inf) score, a rank that is
        not an integer (or is negative; ``msmarco``: below 1), a docid listed twice for the same query
        (``trec_eval`` refuses those too), or a format that cannot be told from the content; the error names
        file and line. Bad UTF-8.
    ConfigError
        Unknown ``fmt``.
    """
    if fmt is None:
        fmt = _columns_format(path)
    elif fmt not in RUN_FORMATS:
        raise ConfigError(f"unknown run format {fmt!r}; expected one of {', '.join(RUN_FORMATS)}")
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of small tuples: the cyclic collector would add half to the reading time
    try:
        entries, fmt = _parse_run(path, None if fmt == "3" else fmt)
        run: Run = {}
        for qid, rows in entries.items():
            rows.sort()  # (-score or 0, rank, line): unique by line number
            docids = [row[3] for row in rows]
            if len(set(docids)) != len(docids):
                _raise_duplicate(path, qid, rows)
            run[qid] = [(row[3], row[4]) for row in rows]
    except UnicodeDecodeError as err:
        for _ in iter_lines(path):  # raises the error located at its line
            pass
        raise InputFormatError(str(path), None, None, f"not valid UTF-8 ({err.reason})") from None
    finally:
        if gc_was_enabled:
            gc.enable()
    logger.info("read %s run %s: %d queries, %d lines", fmt, path, len(run), sum(map(len, run.values())))
    return run


_Row = tuple[float, int, int, str, float]  # sort key (-score or 0, rank, line number), docid, score


def _raise_duplicate(path: PathLike, qid: str, rows: list[_Row]) -> None:
    first: dict[str, int] = {}
    for _, _, lineno, docid, _ in sorted(rows, key=lambda row: row[2]):
        if docid in first:
            raise InputFormatError(str(path), lineno, None, f"docid {docid!r} is listed twice for query {qid!r} "
                                   f"(first on line {first[docid]})")
        first[docid] = lineno


def _parse_run(path: PathLike, fmt: str | None) -> tuple[dict[str, list[_Row]], str]:
    """Parse a run file's lines into ``qid -> [(-score or 0, rank, line, docid, score)]`` (file order), and
    the format. ``fmt`` None: a 3-column file whose format is decided by its values (:func:`detect_run_format`)."""
    auto = fmt is None
    n_cols = 6 if fmt == "trec" else 3
    example = {"trec": "qid Q0 docid rank score tag", "msmarco": "qid<TAB>docid<TAB>rank",
               "tevatron": "qid<TAB>docid<TAB>score", None: "qid docid rank|score"}[fmt]
    if auto:
        fmt = "tevatron"  # read as scores; turned into ranks below if every value is a rank 1..n
    all_int = ranks = True  # auto: every value an integer; each query's values 1, 2, ..., n in file order
    not_a_rank = 0  # the first line where the values stop being ranks
    entries: dict[str, list[_Row]] = {}
    isfinite, int_match = math.isfinite, _INT.fullmatch
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != n_cols:
                if not parts:
                    continue
                raise InputFormatError(str(path), lineno, None,
                                       f"expected {n_cols} columns ({'3-column run' if auto else fmt}: "
                                       f"'{example}'), got {len(parts)}")
            try:
                if fmt == "trec":
                    qid, _, docid, rank_s, score_s, _ = parts
                    rank = int(rank_s)
                    score = float(score_s)
                    row = (-score, rank, lineno, docid, score)
                    if rank < 0 or not isfinite(score):
                        raise ValueError
                elif fmt == "tevatron":
                    qid, docid, score_s = parts
                    score = float(score_s)
                    row = (-score, 0, lineno, docid, score)
                    if not isfinite(score):
                        raise ValueError
                else:
                    qid, docid, rank_s = parts
                    rank = int(rank_s)
                    row = (0.0, rank, lineno, docid, 1.0 / rank if rank > 0 else 0.0)
                    if rank < 1:
                        raise ValueError
            except ValueError:
                raise _bad_number(path, lineno, "3" if auto else fmt, parts) from None
            rows = entries.get(qid)
            if rows is None:
                entries[qid] = rows = []
            if auto and all_int:
                all_int = int_match(parts[2]) is not None
                if ranks and all_int and int(parts[2]) != len(rows) + 1:
                    ranks, not_a_rank = False, lineno
            rows.append(row)
    if not auto or not all_int:
        return entries, fmt
    if not ranks:
        raise InputFormatError(str(path), not_a_rank, None, "ambiguous run format: 3 columns whose third values are "
                               "all integers, but not ranks 1, 2, ... per query in file order from this line on; as "
                               "msmarco ranks or as tevatron scores they give opposite orders: pass --run_format "
                               "msmarco or --run_format tevatron")
    return {qid: [(0.0, int(score), lineno, docid, 1.0 / score) for _, _, lineno, docid, score in rows]
            for qid, rows in entries.items()}, "msmarco"


def _bad_number(path: PathLike, lineno: int, fmt: str, parts: list[str]) -> InputFormatError:
    """The located error for a line whose rank or score does not parse."""
    rank_s = parts[3] if fmt == "trec" else parts[2] if fmt == "msmarco" else None
    if rank_s is not None:
        minimum = 1 if fmt == "msmarco" else 0
        try:
            ok = int(rank_s) >= minimum
        except ValueError:
            ok = False
        if not ok:
            what = "a positive" if minimum else "a non-negative"
            return InputFormatError(str(path), lineno, "rank", f"expected {what} integer, got {rank_s!r}")
    score_s = parts[4] if fmt == "trec" else parts[2]
    try:
        finite = math.isfinite(float(score_s))
    except ValueError:
        finite = None
    field = "score" if fmt != "3" else "score or rank"
    if finite is False:
        return InputFormatError(str(path), lineno, field, f"expected a finite number, got {score_s!r} (a run "
                                "with NaN or infinite scores cannot be ranked)")
    return InputFormatError(str(path), lineno, field, f"expected a number, got {score_s!r}")


def to_run(q_ids: Sequence[str], docids: np.ndarray, scores: np.ndarray) -> Run:
    """A run from a search's (Q, depth) docid and score arrays; ``None`` docids (fewer hits than the depth) are
    left out."""
    return {qid: [(d, float(s)) for d, s in zip(row_d, row_s) if d is not None]
            for qid, row_d, row_s in zip(q_ids, docids.tolist(), scores.tolist())}
