"""Answers of open-domain QA questions: reading them (:func:`load_qa`) and DPR's answer matcher
(:func:`has_answer`), used by evaluation (top-k accuracy), by DCSR's answer sentences (``data/sentences.py``) and
by negative mining.

The matcher follows DPR (and Pyserini's ``evaluate_dpr_retrieval``), so top-k accuracies compare with
published numbers:

* text and answers are NFD-normalised and cut into lower-cased tokens -- runs of letters, digits and
  combining marks, or any other single character that is not a separator or a control character;
* an answer matches when its token sequence occurs contiguously in the passage's tokens
  (``"art"`` does not match ``"party"``; ``"eiffel tower"`` matches ``"The Eiffel Tower!"``);
* CuratedTREC answers are regular expressions, searched case-insensitively (``regex=True``);
* only the passage **text** is matched, not its title (DPR and Pyserini do the same);
* one deliberate difference: an answer without tokens (``""``, ``"  "``) never matches, where DPR's loop
  would match every passage. No question of anserini's ``topics.dpr.*`` files has such an answer.

Unicode classes come from the ``regex`` package (a dependency of ``transformers``).

``lenient=True`` additionally drops punctuation tokens and the articles *a*, *an*, *the* from both sides
before matching (SQuAD-style normalisation, see :func:`normalize_answer`). It matches a little more often
than DPR and is off by default.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import string
import unicodedata
from collections.abc import Sequence

import regex as uregex

from multiview_plugin.data.readers import InputFormatError, iter_jsonl, load_dpr_qa, open_text

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike

# A token is a run of letters / digits / combining marks, or one character that is neither a separator
# (Z*) nor a control/format/unassigned character (C*) -- DPR's SimpleTokenizer.
_TOKEN = uregex.compile(r"[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]", uregex.UNICODE)
_ARTICLES = frozenset({"a", "an", "the"})
_PUNCT_TABLE = str.maketrans("", "", string.punctuation)
_ARTICLE_RE = re.compile(r"\b(?:a|an|the)\b")


def normalize_answer(s: str) -> str:
    """SQuAD-style normalisation: lower-case, drop ASCII punctuation and the articles a/an/the, collapse spaces.

    >>> normalize_answer("The  Eiffel-Tower!")
    'eiffeltower'
    >>> normalize_answer("An apple, a day")
    'apple day'
    """
    s = s.lower().translate(_PUNCT_TABLE)
    return " ".join(_ARTICLE_RE.sub(" ", s).split())


def _is_punct(token: str) -> bool:
    return len(token) == 1 and unicodedata.category(token)[0] in "PS"


@functools.lru_cache(maxsize=1 << 15)
def tokenize(text: str, lenient: bool = False) -> tuple[str, ...]:
    """DPR tokens of ``text``: NFD-normalised, lower-cased (see the module docstring).

    >>> tokenize("Wilhelm Conrad's X-rays")
    ('wilhelm', 'conrad', "'", 's', 'x', '-', 'rays')
    >>> tokenize("The U.S. flag", lenient=True)
    ('u', 's', 'flag')
    """
    tokens = [t.lower() for t in _TOKEN.findall(unicodedata.normalize("NFD", text))]
    if lenient:
        tokens = [t for t in tokens if t not in _ARTICLES and not _is_punct(t)]
    return tuple(tokens)


def _contains(haystack: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    """Whether ``needle`` occurs contiguously in ``haystack`` (an empty needle never matches)."""
    n = len(needle)
    if n == 0 or n > len(haystack):
        return False
    first = needle[0]
    return any(haystack[i:i + n] == needle for i, t in enumerate(haystack[:len(haystack) - n + 1]) if t == first)


@functools.lru_cache(maxsize=4096)
def _compile(pattern: str) -> re.Pattern | None:
    try:
        return re.compile(unicodedata.normalize("NFD", pattern), re.IGNORECASE | re.UNICODE | re.MULTILINE)
    except re.error as err:
        logger.debug("invalid answer regex %r (%s): never matches", pattern, err)
        return None


def has_answer(answers: Sequence[str], text: str, regex: bool = False, lenient: bool = False) -> bool:
    """Whether ``text`` contains one of ``answers`` (DPR semantics, see the module docstring).

    Parameters
    ----------
    answers : Sequence[str]
        Answer strings, or regular expressions when ``regex`` (CuratedTREC).
    text : str
        Passage text (without its title, to match DPR).
    regex : bool
        Treat answers as patterns for :func:`re.search` (case-insensitive, multiline); an invalid pattern
        never matches.
    lenient : bool
        Also ignore punctuation tokens and articles (token mode only).

    Returns
    -------
    bool

    Examples
    --------
    >>> has_answer(["eiffel tower"], "The Eiffel Tower! It is tall.")
    True
    >>> has_answer(["art"], "a party")
    False
    >>> has_answer([r"20,?3[24]0 f(ee|oo)t"], "It is 20,320 feet high", regex=True)
    True
    """
    if regex:
        text = unicodedata.normalize("NFD", text)
        return any(p is not None and p.search(text) is not None for p in map(_compile, answers))
    tokens = tokenize(text, lenient)
    return any(_contains(tokens, tokenize(answer, lenient)) for answer in answers)



def _first_object(path: PathLike) -> dict | None:
    """The first JSON object of a jsonl file, or None when the file does not start with '{'."""
    with open_text(path) as f:
        for line in f:
            if line.strip():
                if not line.lstrip().startswith("{"):
                    return None
                break
    for _, obj in iter_jsonl(path):
        return obj
    return None


def load_qa(path: PathLike) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Load questions and answers.

    Parameters
    ----------
    path : str or os.PathLike
        Either an answers jsonl ``{"query_id", "answers": [...], "query"|"question"?}`` (what
        ``multiview_plugin.data.squad`` writes as ``eval_answers.jsonl``), or a DPR QA file: ``*.qa.csv`` /
        anserini's ``topics.dpr.*.txt`` (``question<TAB>['answer', ...]``) or its jsonl variant
        ``{"question", "answer": [...]}`` (CuratedTREC). DPR files have no ids: a question's qid is its
        0-based position in the file (``"0"``, ``"1"``, ...), the ids Pyserini gives DPR topics.

    Returns
    -------
    tuple of (dict[str, str], dict[str, list[str]])
        Questions (qid -> text; empty for an answers jsonl without question fields) and answers, in file
        order.

    Raises
    ------
    InputFormatError
        Bad lines, a missing or non-string answer list, or a duplicate query id.
    """
    first = _first_object(path)
    if first is None or "query_id" not in first:
        items = load_dpr_qa(path)
        return ({str(i): q for i, (q, _) in enumerate(items)}, {str(i): list(a) for i, (_, a) in enumerate(items)})
    questions: dict[str, str] = {}
    answers: dict[str, list[str]] = {}
    lines: dict[str, int] = {}
    for lineno, obj in iter_jsonl(path):
        qid = obj.get("query_id")
        if isinstance(qid, int) and not isinstance(qid, bool):
            qid = str(qid)
        if not isinstance(qid, str) or not qid.strip():
            raise InputFormatError(str(path), lineno, "query_id", f"expected a non-empty string, got {qid!r}")
        if qid in lines:
            raise InputFormatError(str(path), lineno, "query_id",
                                   f"duplicate query id {qid!r} (first seen on line {lines[qid]})")
        value = obj.get("answers")
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
            raise InputFormatError(str(path), lineno, "answers", "expected a list of answer strings")
        lines[qid] = lineno
        answers[qid] = value
        question = obj.get("query", obj.get("question"))
        if isinstance(question, str):
            questions[qid] = question
    return questions, answers


def load_answers(path: PathLike) -> dict[str, list[str]]:
    """Answers per qid from an answers jsonl or a DPR QA file (see :func:`load_qa`)."""
    return load_qa(path)[1]
