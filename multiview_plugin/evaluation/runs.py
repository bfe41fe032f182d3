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
import os
import re
from pathlib import Path

from multiview_plugin.atomic import atomic_open
from multiview_plugin.data.readers import InputFormatError, open_text
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


def detect_run_format(path: PathLike) -> str:
    """Guess a run file's format from its first non-blank line.

    Six whitespace-separated columns -> ``trec``; three columns whose third is an integer -> ``msmarco``
    (a rank), three columns otherwise -> ``tevatron`` (a score: Tevatron writes Python floats, which always
    carry a ``.``, an exponent, ``inf`` or ``nan``).

    Raises
    ------
    InputFormatError
        The file is empty or its first line has another number of columns.
    """
    try:
        with open_text(path) as f:
            first = next(((n, line.split()) for n, line in enumerate(f, 1) if line.strip()), None)
    except UnicodeDecodeError as err:
        raise InputFormatError(str(path), None, None, f"not valid UTF-8 ({err.reason})") from None
    if first is None:
        raise InputFormatError(str(path), None, None, "the run file is empty")
    lineno, parts = first
    if len(parts) == 6:
        return "trec"
    if len(parts) == 3:
        return "msmarco" if _INT.fullmatch(parts[2]) else "tevatron"
    raise InputFormatError(str(path), lineno, None,
                           f"cannot tell the run format: expected 6 columns (trec: 'qid Q0 docid rank score tag') "
                           f"or 3 (msmarco 'qid docid rank', tevatron 'qid docid score'), got {len(parts)}")


def read_run(path: PathLike, fmt: str | None = None) -> Run:
    """Read a run file into rank order.

    Parameters
    ----------
    path : str or os.PathLike
        ``trec``, ``msmarco`` or ``tevatron`` run (columns split on any whitespace; optionally ``.gz``).
    fmt : {"trec", "msmarco", "tevatron"}, optional
        The format; detected from the first line when omitted (see :func:`detect_run_format`).

    Returns
    -------
    Run
        ``{qid: [(docid, score)]}``, queries in order of first appearance. ``trec`` and ``tevatron`` lists
        are sorted by score, best first; equal scores keep the file's rank column (``trec``), then the file
        order. ``msmarco`` lists are sorted by rank and get the score ``1 / rank``.

    Raises
    ------
    InputFormatError
        A line with the wrong number of columns, a non-numeric score, a rank that is not an integer (or is
        negative; ``msmarco``: below 1), or a docid listed twice for the same query (``trec_eval`` refuses those
        too); the error names file and line. Bad UTF-8.
    ConfigError
        Unknown ``fmt``.
    """
    if fmt is None:
        fmt = detect_run_format(path)
    elif fmt not in RUN_FORMATS:
        raise ConfigError(f"unknown run format {fmt!r}; expected one of {', '.join(RUN_FORMATS)}")
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of small tuples: the cyclic collector would add half to the reading time
    try:
        entries = _parse_run(path, fmt)
        run: Run = {}
        for qid, rows in entries.items():
            rows.sort()  # (-score or 0, rank, line): unique by line number
            docids = [row[3] for row in rows]
            if len(set(docids)) != len(docids):
                _raise_duplicate(path, qid, rows)
            run[qid] = [(row[3], row[4]) for row in rows]
    except UnicodeDecodeError as err:
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


def _parse_run(path: PathLike, fmt: str) -> dict[str, list[_Row]]:
    """Parse a run file's lines into ``qid -> [(-score or 0, rank, line, docid, score)]`` (file order)."""
    n_cols = 6 if fmt == "trec" else 3
    example = {"trec": "qid Q0 docid rank score tag", "msmarco": "qid<TAB>docid<TAB>rank",
               "tevatron": "qid<TAB>docid<TAB>score"}[fmt]
    entries: dict[str, list[_Row]] = {}
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != n_cols:
                if not parts:
                    continue
                raise InputFormatError(str(path), lineno, None,
                                       f"expected {n_cols} columns ({fmt}: '{example}'), got {len(parts)}")
            try:
                if fmt == "trec":
                    qid, _, docid, rank_s, score_s, _ = parts
                    rank = int(rank_s)
                    score = float(score_s)
                    row = (-score, rank, lineno, docid, score)
                    if rank < 0:
                        raise ValueError
                elif fmt == "tevatron":
                    qid, docid, score_s = parts
                    score = float(score_s)
                    row = (-score, 0, lineno, docid, score)
                else:
                    qid, docid, rank_s = parts
                    rank = int(rank_s)
                    row = (0.0, rank, lineno, docid, 1.0 / rank if rank > 0 else 0.0)
                    if rank < 1:
                        raise ValueError
            except ValueError:
                raise _bad_number(path, lineno, fmt, parts) from None
            rows = entries.get(qid)
            if rows is None:
                entries[qid] = rows = []
            rows.append(row)
    return entries


def _bad_number(path: PathLike, lineno: int, fmt: str, parts: list[str]) -> InputFormatError:
    """The located error for a line whose rank or score does not parse."""
    rank_s = {"trec": parts[3], "msmarco": parts[2]}.get(fmt)
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
    return InputFormatError(str(path), lineno, "score", f"expected a number, got {score_s!r}")
