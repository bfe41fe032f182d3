"""Run files: the rankings a search writes and the evaluation reads.

Three formats, all one line per retrieved document:

* ``trec``: ``qid Q0 docid rank score tag`` (rank from 1), what ``trec_eval`` and Pyserini read;
* ``msmarco``: ``qid<TAB>docid<TAB>rank`` (MS MARCO's official evaluation script);
* ``tevatron``: ``qid<TAB>docid<TAB>score`` (Tevatron's ``--save_text`` output).

In memory a run is a :data:`Run`: ``{qid: [(docid, score), ...]}`` with each list in rank order, best first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from multiview_plugin.data.readers import InputFormatError, open_text
from multiview_plugin.errors import ConfigError

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike
Run = dict[str, list[tuple[str, float]]]
"""``qid -> [(docid, score)]`` in rank order (best first)."""

RUN_FORMATS = ("trec", "msmarco", "tevatron")
_WHITESPACE = re.compile(r"\s")
_INT = re.compile(r"[+-]?\d+")


@contextlib.contextmanager
def atomic_open(path: PathLike, encoding: str = "utf-8") -> Iterator[TextIO]:
    """Open ``path`` for writing text so that it appears complete or not at all.

    Writes to a temporary file in the same folder and moves it over ``path`` (:func:`os.replace`) when the
    ``with`` block ends without an exception; on an exception the temporary file is removed and ``path``
    is left untouched. Parent folders are created.

    Parameters
    ----------
    path : str or os.PathLike
        Final file name.
    encoding : str
        Text encoding.

    Yields
    ------
    TextIO
        The stream to write to.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # not tempfile.mkstemp: its files are private (0600); this one gets the usual umask permissions
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        with open(tmp, "x", encoding=encoding, newline="\n") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) == 6:
                return "trec"
            if len(parts) == 3:
                return "msmarco" if _INT.fullmatch(parts[2]) else "tevatron"
            raise InputFormatError(str(path), lineno, None,
                                   f"cannot tell the run format: expected 6 columns (trec: 'qid Q0 docid rank "
                                   f"score tag') or 3 (msmarco 'qid docid rank', tevatron 'qid docid score'), "
                                   f"got {len(parts)}")
    raise InputFormatError(str(path), None, None, "the run file is empty")


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
        A line with the wrong number of columns, a non-numeric score, a rank that is not an integer
        (``msmarco``: below 1), or a docid listed twice for the same query (``trec_eval`` refuses those too);
        the error names file and line.
    ConfigError
        Unknown ``fmt``.
    """
    if fmt is None:
        fmt = detect_run_format(path)
    elif fmt not in RUN_FORMATS:
        raise ConfigError(f"unknown run format {fmt!r}; expected one of {', '.join(RUN_FORMATS)}")
    # qid -> docid -> (sort key, score, line)
    entries: dict[str, dict[str, tuple[tuple[float, int, int], float, int]]] = {}
    try:
        _parse_run(path, fmt, entries)
    except UnicodeDecodeError as err:
        raise InputFormatError(str(path), None, None, f"not valid UTF-8 ({err.reason})") from None
    run: Run = {}
    for qid, ranking in entries.items():
        ordered = sorted(ranking.items(), key=lambda item: item[1][0])
        run[qid] = [(docid, score) for docid, (_, score, _) in ordered]
    logger.info("read %s run %s: %d queries, %d lines", fmt, path, len(run), sum(map(len, run.values())))
    return run


def _parse_run(path: PathLike, fmt: str, entries: dict[str, dict[str, tuple[tuple[float, int, int], float, int]]]
               ) -> None:
    """Parse the lines of a run file into ``entries`` (qid -> docid -> (sort key, score, line number))."""
    n_cols = 6 if fmt == "trec" else 3
    example = {"trec": "qid Q0 docid rank score tag", "msmarco": "qid<TAB>docid<TAB>rank",
               "tevatron": "qid<TAB>docid<TAB>score"}[fmt]
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != n_cols:
                raise InputFormatError(str(path), lineno, None,
                                       f"expected {n_cols} columns ({fmt}: '{example}'), got {len(parts)}")
            if fmt == "trec":
                qid, _, docid, rank_s, score_s, _ = parts
            elif fmt == "msmarco":
                qid, docid, rank_s = parts
                score_s = None
            else:
                qid, docid, score_s = parts
                rank_s = None
            rank = 0
            if rank_s is not None:
                try:
                    rank = int(rank_s)
                except ValueError:
                    rank = -1
                if rank < (1 if score_s is None else 0):  # msmarco ranks count from 1; trec_eval ignores ranks
                    raise InputFormatError(str(path), lineno, "rank",
                                           f"expected a {'positive' if score_s is None else 'non-negative'} "
                                           f"integer, got {rank_s!r}")
            if score_s is None:
                score = 1.0 / rank
            else:
                try:
                    score = float(score_s)
                except ValueError:
                    raise InputFormatError(str(path), lineno, "score", f"expected a number, got {score_s!r}") from None
            # sort key: best score first, then the rank column, then the file order
            key = (-score if score_s is not None else 0.0, rank, lineno)
            ranking = entries.setdefault(qid, {})
            if docid in ranking:
                raise InputFormatError(str(path), lineno, None, f"docid {docid!r} is listed twice for query "
                                       f"{qid!r} (first on line {ranking[docid][2]})")
            ranking[docid] = (key, score, lineno)
