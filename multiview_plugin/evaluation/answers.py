"""Open-domain QA retrieval accuracy: does a top-k passage contain an answer?

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

The retrieval json is Pyserini's: ``{qid: {"question", "answers", "contexts": [{"docid", "score", "text",
"has_answer"}]}}`` with ``text = "title\\ntext"``, which ``pyserini.eval.evaluate_dpr_retrieval`` reads
(it uses ``has_answer`` when present, else matches the part after the first newline).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import string
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import regex as uregex

from multiview_plugin.data.readers import InputFormatError, iter_jsonl, load_dpr_qa, open_text
from multiview_plugin.errors import MultiViewError
from multiview_plugin.evaluation.runs import Run, atomic_open

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike
Passage = str | tuple[str | None, str]

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


def topk_accuracy(hits_has_answer: Sequence[Sequence[bool]], ks: Sequence[int] = (1, 5, 20, 100)) -> dict[str, float]:
    """Top-k accuracy: the percentage of questions with an answer-bearing passage among their first k.

    Parameters
    ----------
    hits_has_answer : Sequence[Sequence[bool]]
        Per question, the ``has_answer`` flag of each retrieved passage in rank order (lists may differ in
        length; a question with no passages counts as a miss).
    ks : Sequence[int]
        Cutoffs.

    Returns
    -------
    dict[str, float]
        ``{"Top1": ..., "Top5": ...}`` in percent (0 for every k when there are no questions).

    Examples
    --------
    >>> topk_accuracy([[False, True], [True], [], [False, False, False]], ks=(1, 2))
    {'Top1': 25.0, 'Top2': 50.0}
    """
    ks = [int(k) for k in ks]
    n = len(hits_has_answer)
    if n == 0:
        logger.warning("no questions: every top-k accuracy is 0")
        return {f"Top{k}": 0.0 for k in ks}
    width = max(1, max(map(len, hits_has_answer)))
    flags = np.zeros((n, width), dtype=bool)
    for row, hits in enumerate(hits_has_answer):
        flags[row, :len(hits)] = np.asarray(hits, dtype=bool)
    first_hit = np.where(flags.any(axis=1), flags.argmax(axis=1), np.iinfo(np.int64).max)  # max: no hit
    return {f"Top{k}": float(100.0 * np.mean(first_hit < k)) for k in ks}


def _split_passage(passage: Passage) -> tuple[str, str]:
    if isinstance(passage, str):
        return "", passage
    title, text = passage
    return title or "", text


def build_retrieval(run: Run, questions: Mapping[str, str], answers: Mapping[str, Sequence[str]],
                    passages: Mapping[str, Passage], depth: int = 100, regex: bool = False,
                    lenient: bool = False, store_text: bool = True) -> dict[str, dict[str, Any]]:
    """Pyserini's DPR retrieval json for a run.

    Parameters
    ----------
    run : Run
        ``{qid: [(docid, score)]}`` in rank order.
    questions : Mapping[str, str]
        Question text per qid (``""`` where unknown).
    answers : Mapping[str, Sequence[str]]
        Answers per qid. **Every** question here gets an entry, in this order; one the run does not answer
        gets no contexts (and so counts as a miss). Run queries without answers are left out.
    passages : Mapping[str, str or (title, text)]
        Docid -> passage. A ``(title, text)`` pair keeps the title out of the matching (as DPR does);
        a plain string is the text, without title.
    depth : int
        Contexts kept per question.
    regex : bool
        Answers are regular expressions (CuratedTREC).
    lenient : bool
        See :func:`has_answer`.
    store_text : bool
        Keep each context's ``"title\\ntext"``; without it the json is much smaller and still enough for
        Pyserini's evaluation, which uses ``has_answer`` (like Pyserini's converter without ``--store-raw``).

    Returns
    -------
    dict
        ``{qid: {"question": str, "answers": list[str], "contexts": [{"docid": str, "score": float,
        "text": "title\\ntext", "has_answer": bool}]}}``.

    Raises
    ------
    MultiViewError
        A retrieved docid is not in ``passages``.
    """
    unanswered = [qid for qid in run if qid not in answers]
    if unanswered:
        logger.warning("%d of the run's %d queries have no answers and are left out (e.g. %s)",
                       len(unanswered), len(run), unanswered[:3])
    missing = sum(qid not in run for qid in answers)
    if missing:
        logger.warning("%d of the %d questions are not in the run; they count as misses", missing, len(answers))
    retrieval: dict[str, dict[str, Any]] = {}
    for qid, answer_list in answers.items():
        contexts = []
        for docid, score in run.get(qid, ())[:depth]:
            if docid not in passages:
                raise MultiViewError(f"docid {docid!r} (retrieved for query {qid!r}) is not in the corpus; "
                                     "was the run made with another corpus?")
            title, text = _split_passage(passages[docid])
            context: dict[str, Any] = {"docid": docid, "score": float(score)}
            if store_text:
                context["text"] = f"{title}\n{text}"
            context["has_answer"] = has_answer(answer_list, text, regex=regex, lenient=lenient)
            contexts.append(context)
        retrieval[qid] = {"question": questions.get(qid, ""), "answers": list(answer_list), "contexts": contexts}
    return retrieval


def retrieval_accuracy(retrieval: Mapping[str, Mapping[str, Any]], ks: Sequence[int] = (1, 5, 20, 100),
                       regex: bool = False, lenient: bool = False) -> dict[str, float]:
    """Top-k accuracy (percent) of a retrieval json, like ``pyserini.eval.evaluate_dpr_retrieval``.

    Uses each context's ``has_answer`` flag; a context without one is matched against the part of its
    ``text`` after the first newline (the title comes before it), as Pyserini does.
    """
    hits = []
    for qid, item in retrieval.items():
        flags = []
        for ctx in item.get("contexts", ()):
            if "has_answer" in ctx:
                flags.append(bool(ctx["has_answer"]))
            else:
                text = ctx.get("text")
                if text is None:
                    raise MultiViewError(f"retrieval entry {qid!r}: a context has neither 'has_answer' nor 'text'")
                flags.append(has_answer(item["answers"], text.split("\n", 1)[-1], regex=regex, lenient=lenient))
        hits.append(flags)
    return topk_accuracy(hits, ks)


def write_retrieval_json(retrieval: Mapping[str, Any], path: PathLike) -> Path:
    """Write a retrieval json atomically (UTF-8, non-ASCII kept); returns ``path``."""
    path = Path(path)
    with atomic_open(path) as f:
        json.dump(retrieval, f, ensure_ascii=False, indent=1)
        f.write("\n")
    logger.info("wrote retrieval json %s (%d questions)", path, len(retrieval))
    return path


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
